"""DP-FTRL in the experiments (`--aggregator=tree`): what it needs, a tiny
EMNIST run through the tree aggregation with its report, and its resumption
(tff_canary.harness: preflight, dp_fedavg, training, correlated_report)."""

import json
import math
import os
import shutil
import subprocess
import sys

import dp_accounting
import numpy as np
import pytest
from scipy import stats

import repo_paths
from tff_canary.harness.config import experiment_config
from tff_canary.harness.recording import run_dir
import fake_runs

# The in-process runs train tests/small_model.py's CNN (tests/conftest.py).
pytestmark = pytest.mark.usefixtures("small_emnist_model")


REPO = str(repo_paths.REPO)
TREE = dict(aggregator="tree", clip=0.1)


def _config(path, **overrides):
  args = dict(output_dir=str(path), **TREE)
  args.update(overrides)
  return experiment_config.ExperimentConfig(**args)


@pytest.mark.parametrize("kwargs, match", [
    (dict(clip=None), r"aggregator='tree' \(--aggregator=tree\) needs 1 more "
     r"setting; add --clip=C .*at a fixed clip"),
    (dict(directions="gaussian", sampling="per_round", zeroing=True),
     r"needs 3 more settings; add --directions=orthogonal "
     r"--sampling=shuffle --nozeroing "),
    # Canary clients take TFF's own, unseeded noise (tests/mechanisms/tree/test_end_to_end_clients.py).
    (dict(insertion="clients"), r"aggregator='tree' with insertion='clients'"
     r" \(--aggregator=tree --insertion=clients\) needs 1 more setting; add "
     r"--noseeded_noise "),
    (dict(presentations=2, allow_participation_mismatch=True),
     r"add --noallow_participation_mismatch .*once per tree"),
    # Without fair coins the audit's one-run bounds do not hold: refused,
    # not printed as "each inserted by a fair coin".
    (dict(assignment="fixed"), r"needs 1 more setting; add "
     r"--assignment=coin .*one-run bounds need candidates inserted by fair "
     r"coins"),
    (dict(noise_multiplier=0.0), r"aggregator='tree' needs noise_multiplier "
     r"> 0.*got noise_multiplier=0.0"),
    (dict(ddp_bits=16),
     r"ddp_bits=16 is for aggregator='ddp'; got aggregator='tree'"),
])
def test_what_dp_ftrl_cannot_do_is_refused(tmp_path, kwargs, match):
  with pytest.raises(ValueError, match=match):
    _config(tmp_path, **kwargs)


def test_a_bad_tree_flag_is_answered_before_tensorflow_loads(tmp_path):
  out = tmp_path / "run"
  proc = subprocess.run(
      [sys.executable, os.path.join(REPO, "experiments", "emnist.py"),
       "--aggregator=tree", f"--output_dir={out}"],
      capture_output=True, text=True, timeout=120)
  assert proc.returncode == 2
  assert proc.stderr.strip().splitlines()[-1].startswith(
      "error: aggregator='tree' (--aggregator=tree) needs 1 more setting; "
      "add --clip=C"), proc.stderr
  assert "tensorflow" not in proc.stderr and not out.exists()


# The report from a run directory with simulated scores (no TensorFlow) ------


def _simulated_run(path, *, extra_participations=0, z=1.0, seed=0):
  """A DP-FTRL run directory whose scores are drawn here: u_j ~ N(a_j / z,
  K), a_j canary j's realized participations (its schedule if inserted,
  plus `extra_participations` per epoch at further rounds: a client counted
  twice per tree), K the claimed tree's covariance; 4 epochs of 8 rounds,
  400 candidates."""
  from tff_canary.stats.canaries import canary_config, schedules  # pylint: disable=g-import-not-at-top
  # pylint: disable-next=g-import-not-at-top
  from tff_canary.stats.correlated import tree_noise
  config = dict(task="emnist", data="synthetic", seed=seed, canary_seed=7,
                dim=10_000, noise_multiplier=z, clip=0.1, clients_per_round=4,
                num_rounds=32, num_inserted=200, num_held_out=200,
                sampling="shuffle", num_clients=32, delta=1e-5,
                presentations=4, assignment="coin", directions="orthogonal",
                aggregator="tree")
  canaries = canary_config.CanaryConfig(
      seed=7, num_inserted=200, num_held_out=200,
      schedule=schedules.ShuffledEpochs(32, 8, partial_last_epoch=True),
      assignment="coin", directions="orthogonal")
  a = canaries.schedule_matrix() & canaries.inserted[:, None]
  for extra in range(extra_participations):
    a[:, extra + 1:] |= a[:, :-extra - 1]  # and the round after (next epoch's
    # first round for an epoch's last: at most once in 8 rounds)
  k = tree_noise.tree_noise(32, restart_period=8).covariance
  rng = np.random.default_rng(seed)
  u = a / z + rng.standard_normal((400, 32)) @ np.linalg.cholesky(k).T
  return fake_runs.save_scored_run(path, config, canaries, u)


def test_the_report_of_simulated_scores_finds_their_signal(tmp_path):
  from tff_canary.harness.reporting import report as report_lib  # pylint: disable=g-import-not-at-top
  rd = _simulated_run(tmp_path / "run")
  report = report_lib.build_report(rd.path)
  assert not report.audit.refuted, str(report.audit)
  # The scheduled statistic T_j ~ N(mu_j, 1) for inserted canaries: its
  # estimate (about 200 inserted) must cover the epsilon of their mean mu,
  # its target; scores misaligned with the schedules would put it near 0.
  targets = report.targets
  interval = report.estimates.scheduled.interval
  assert interval.low <= targets.schedules_epsilon <= interval.high
  assert report.estimates.scheduled.epsilon > 0.5 * targets.schedules_epsilon
  interval = report.estimates.final.interval
  assert interval.low <= targets.final_epsilon <= interval.high
  # A correct mechanism: epsilon-final's interval is not above the claim.
  assert report.estimates.final.interval.low < report.audit.claim.epsilon


def test_the_tree_report_shows_the_three_epsilons_and_what_each_targets(
    tmp_path):
  from tff_canary.harness.reporting import report as report_lib  # pylint: disable=g-import-not-at-top
  from tff_canary.mechanisms.correlated import report as correlated_report  # pylint: disable=g-import-not-at-top
  report = report_lib.build_report(_simulated_run(tmp_path / "run").path)
  t = report.targets
  # The efficient tree of 8 rounds: its rounds show less than its nodes.
  assert t.schedules_epsilon < t.worst_case_epsilon < t.node_epsilon
  assert t.node_epsilon == report.audit.claim.epsilon
  lines = report.headline().lines()
  assert len(lines) <= 8
  assert lines[0].startswith("analytical ε") and "node release" in lines[0]
  assert lines[1].startswith("rounds ε") and "worst-case" in lines[1]
  assert f"{t.worst_case_epsilon:.4g}" in lines[1]
  assert f"this run's canaries: {t.schedules_epsilon:.4g}" in lines[1]
  assert lines[2].startswith("ε-final") and (
      f"targets {t.final_epsilon:.4g} (final model)" in lines[2])
  assert lines[3].startswith("ε-all") and (
      f"targets {t.schedules_epsilon:.4g} (this run's canaries)" in lines[3])
  rows = {name: (kind, value, detail)
          for name, kind, value, detail in report.rows()}
  assert rows[correlated_report.WORST_CASE][:2] == ("analytical",
                                              t.worst_case_epsilon)
  assert rows[correlated_report.SCHEDULES][:2] == ("expected",
                                             t.schedules_epsilon)
  assert "not a ceiling" in rows[correlated_report.SCHEDULES][2]
  assert "targets none of these" in rows[correlated_report.MAX][2]
  assert "not the mechanism's ε" in rows[correlated_report.MAX][2]
  assert not any("ceiling of an attack" in name for name in rows)
  data = report.as_dict()
  assert data["targets"]["worst_case_epsilon"] == t.worst_case_epsilon
  assert [x["value"] for x in data["headline"]["targets"]] == [
      t.worst_case_epsilon, t.schedules_epsilon]
  assert data["headline"]["epsilon_all"]["target"]["value"] == (
      t.schedules_epsilon)
  assert "ceiling" not in data


def test_a_tree_report_refuses_a_run_without_fair_coins(tmp_path):
  from tff_canary.harness.reporting import report as report_lib  # pylint: disable=g-import-not-at-top
  rd = _simulated_run(tmp_path / "run")
  config = rd.load_config()
  config["assignment"] = "fixed"
  rd.save_config(config)
  with pytest.raises(run_dir.RunDirError, match=r"assignment='fixed'.*fair "
                     r"coins"):
    report_lib.build_report(rd.path)


def test_the_report_refutes_a_client_counted_twice_per_tree(tmp_path):
  from tff_canary.harness.reporting import report as report_lib  # pylint: disable=g-import-not-at-top
  rd = _simulated_run(tmp_path / "run", extra_participations=1)
  report = report_lib.build_report(rd.path)
  assert report.audit.refuted and "contribution" in report.audit.caught_by
  assert "REFUTED by contribution" in report.terminal_text()
  # The headline names both causes of a larger contribution, not only the
  # sampler; report.json keeps the check's reading under its one name.
  assert ("more participations than scheduled, or updates larger than the "
          "clip") in report.terminal_text()
  audit = report.as_dict()["audit"]
  assert audit["contribution_excess"] == pytest.approx(1.0, abs=0.3)
  assert audit["contribution_p_value"] < 1e-6
  assert {"contribution_t", "contribution_spread"} <= set(audit)
  assert not any(key.startswith("participation") for key in audit)
  # The sweep's row of a DP-FTRL report has every column, from the report.
  sys.path.insert(0, os.path.join(REPO, "experiments"))
  try:
    import sweep  # pylint: disable=g-import-not-at-top
  finally:
    sys.path.pop(0)
  row = sweep.row_of(report)
  assert set(row) == set(sweep.TREE_COLUMNS)
  assert row["epsilon_all_scheduled"] == report.estimates.scheduled.epsilon
  assert row["analytical_epsilon"] == report.audit.claim.epsilon


def test_a_tree_report_needs_the_whole_run(tmp_path):
  from tff_canary.harness.reporting import report as report_lib  # pylint: disable=g-import-not-at-top
  rd = _simulated_run(tmp_path / "run")
  rd.save_tree_scores(list(rd.load_tree_scores(400)[:20]))
  with pytest.raises(run_dir.RunDirError, match=r"has 20 rounds of the "
                     r"run's 32: the run has not finished"):
    report_lib.build_report(rd.path)


# A tiny run: 2 epochs of 3 rounds (18 clients, 6 per round), so 2 trees and
# every canary candidate scheduled twice; server SGD with learning rate 1 and
# no momentum, so theta_0 - theta_T is the sum of the rounds' noised means.
Z, CLIP, PER_ROUND = 1.0, 0.1, 6


def _tiny(path, **overrides):
  args = dict(output_dir=str(path), num_rounds=6, num_clients=18,
              clients_per_round=PER_ROUND, examples_per_client=8,
              num_inserted=12, num_held_out=12, noise_multiplier=Z,
              server_momentum=0.0, server_learning_rate=1.0, eval_every=0,
              checkpoint_every=3, eval_examples=64,
              allow_large_canary_fraction=True, **dict(TREE, clip=CLIP))
  args.update(overrides)
  return experiment_config.ExperimentConfig(**args)


@pytest.fixture(scope="module")
def tree_run(tmp_path_factory):
  from tff_canary.harness.runner import experiment  # pylint: disable=g-import-not-at-top
  path = tmp_path_factory.mktemp("tree") / "run"
  report = experiment.run_experiment(_tiny(path), progress=False,
                                     log=lambda *a: None)
  return report, run_dir.RunDir(path)


@pytest.mark.tff
@pytest.mark.slow
def test_a_tree_run_reports_the_tree_accounting_and_its_scores(tree_run):
  report, rd = tree_run
  config = rd.load_config()
  assert config["aggregator"] == "tree"
  # No per-round ledger (the tree's privacy is per tree) and no cosines.
  assert not rd.exists(run_dir.LEDGER) and not rd.exists(run_dir.COSINES_NPZ)
  scores = rd.load_tree_scores(24)
  assert scores.shape == (6, 24)
  # The analytical epsilon, independently: two trees of 3 rounds (depth
  # ceil(log2(4)) = 2 each) give mu = sqrt(2 + 2) / z, whose exact
  # Gaussian-DP delta at the reported epsilon must be the run's delta
  # (Dong, Roth & Su 2019, Corollary 2.13); and dp-accounting's RDP epsilon.
  eps = report.audit.claim.epsilon
  mu = 2.0 / Z
  delta = (stats.norm.cdf(-eps / mu + mu / 2)
           - math.exp(eps) * stats.norm.cdf(-eps / mu - mu / 2))
  assert delta == pytest.approx(config["delta"], rel=1e-6)
  accountant = dp_accounting.rdp.RdpAccountant(
      neighboring_relation=dp_accounting.NeighboringRelation.REPLACE_SPECIAL)
  for _ in range(2):
    accountant.compose(dp_accounting.SingleEpochTreeAggregationDpEvent(
        Z, [3]))
  assert report.audit.claim.rdp_epsilon == pytest.approx(
      accountant.get_epsilon(config["delta"]), rel=1e-9)
  text = report.terminal_text()
  assert text.splitlines()[0].startswith("analytical ε")
  assert "DP-FTRL, 2 trees" in text and "ε-all" in text
  saved = json.loads(open(rd.file(run_dir.REPORT_JSON)).read())
  assert saved["aggregator"] == "tree"
  assert saved["analytical"] == report.analytical
  # Its one figure, every epsilon against the analytical ones.
  assert "![" in open(rd.file(run_dir.REPORT_MD)).read()
  assert os.path.exists(os.path.join(rd.file(run_dir.PLOTS), "epsilons.png"))
  # The tree noise self-test ran per tensor of the model, with their names,
  # so its tests between tensors ran (issue 26).
  check = json.loads(open(rd.file(run_dir.NOISE_CHECK)).read())
  assert check["kind"] == "tree" and len(check["tensor_sizes"]) > 1
  assert sum(check["tensor_sizes"]) == check["dim"]
  assert not check["tensor_names"][0].startswith("tensor")
  assert any(t["family"] == "prefix" for t in check["tests"])


@pytest.mark.tff
@pytest.mark.slow
def test_the_rounds_scores_add_up_to_the_final_models(tree_run):
  # Each round's score is <c_j, S_t> / (z C), S_t the noised SUM; with
  # server SGD at learning rate 1, theta_{t-1} - theta_t = S_t / n, so the
  # rounds' scores sum to n <c_j, theta_0 - theta_T> / (z C): an end-to-end
  # check of the saved scores' rounds, units and canary order.
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  from tff_canary.federated.insertion import orthogonal_transform  # pylint: disable=g-import-not-at-top
  _, rd = tree_run
  config = rd.load_config()
  dim, seed = config["dim"], config["canary_seed"]
  delta = (np.load(rd.file(run_dir.INITIAL_WEIGHTS)).astype(np.float64)
           - np.load(rd.file(run_dir.FINAL_WEIGHTS)))
  rows = orthogonal_transform.rows(seed, dim, 24)
  final = orthogonal_transform.scores(
      seed, tf.constant(delta, tf.float32), dim, rows).numpy()
  expected = PER_ROUND * final / (Z * CLIP)
  assert np.abs(expected).max() > 1.0  # node-noise units: O(1) per round
  # float32 weights over 6 rounds: the sums agree to float32 rounding of
  # scores of size ~1-10 (a wrong round, scale or order is off by O(1)).
  np.testing.assert_allclose(rd.load_tree_scores(24).sum(axis=0), expected,
                             atol=2e-2)


@pytest.mark.tff
@pytest.mark.slow
def test_a_tree_run_resumes_from_its_checkpoint(tree_run, tmp_path):
  # The run directory as a kill after round 3's checkpoint leaves it: the
  # last checkpoint, the report and the final weights gone. --resume redoes
  # rounds 4-6 from the checkpoint (tree_scores.npy cut back to 3 rows) and
  # must give the same scores (seeded noise) and report.
  from tff_canary.harness.runner import experiment  # pylint: disable=g-import-not-at-top
  report, rd = tree_run
  copy = tmp_path / "run"
  shutil.copytree(rd.path, copy)
  checkpoints = copy / run_dir.CHECKPOINTS
  last = sorted(checkpoints.iterdir(), key=lambda p: int(
      "".join(c for c in p.name if c.isdigit()) or 0))[-1]
  assert last.name.endswith("6")
  shutil.rmtree(last)
  for name in (run_dir.REPORT_JSON, run_dir.REPORT_MD, run_dir.FINAL_WEIGHTS):
    os.remove(copy / name)
  resumed = experiment.run_experiment(
      _tiny(copy, resume=True), progress=False, log=lambda *a: None)
  np.testing.assert_array_equal(run_dir.RunDir(copy).load_tree_scores(24),
                                rd.load_tree_scores(24))
  assert resumed.terminal_text() == report.terminal_text()
