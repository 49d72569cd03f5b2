"""DP-FTRL with canary clients (`--aggregator=tree --insertion=clients`):
what it needs, the clip of a tree query's state, the scores' units through
TFF's own factory (exactly, with seeded tree noise), and a tiny EMNIST run
with its report (tff_canary.harness: preflight, dp_fedavg, client_insertion,
training, tree_report)."""

import collections
import json
import os
import subprocess
import sys
import warnings

import numpy as np
import pytest

import repo_paths
from tff_canary.harness.config import experiment_config
from tff_canary.harness.recording import run_dir

# The in-process runs train tests/small_model.py's CNN (tests/conftest.py).
pytestmark = pytest.mark.usefixtures("small_emnist_model")


REPO = str(repo_paths.REPO)
TREE_CLIENTS = dict(aggregator="tree", clip=0.1, insertion="clients",
                    seeded_noise=False)
CHOICE = (r"aggregator='tree' with insertion='clients' \(--aggregator=tree "
          r"--insertion=clients\) needs ")


def _config(path, **overrides):
  args = dict(output_dir=str(path), **TREE_CLIENTS)
  args.update(overrides)
  return experiment_config.ExperimentConfig(**args)


# Config -------------------------------------------------------------------


def test_dp_ftrl_takes_canary_clients(tmp_path):
  config = _config(tmp_path)
  assert config.insertion == "clients" and config.aggregator == "tree"
  assert config.canary_norm == 10.0 and config.record_aggregates is False


@pytest.mark.parametrize("kwargs, match", [
    # TFF's own factory cannot seed its noise.
    (dict(seeded_noise=True), CHOICE + r"1 more setting; add "
     r"--noseeded_noise \(seeded_noise=False, noise_seed=None: TFF's own DP "
     r"aggregators cannot seed their noise\)\.$"),
    (dict(noise_seed=3), CHOICE + r"1 more setting; add --noseeded_noise "
     r"and no --noise_seed "),
    # The scores count a canary client at the clip.
    (dict(canary_norm=0.05), CHOICE + r"1 more setting; add "
     r"--canary_norm=0.1 or more \(got 0.05\) \(canary_norm >= clip = 0.1: "),
    # Every missing setting, each once.
    (dict(seeded_noise=True, directions="gaussian", zeroing=True),
     CHOICE + r"3 more settings; add --noseeded_noise "
     r"--directions=orthogonal --nozeroing \("),
])
def test_what_tree_clients_cannot_do_is_refused(tmp_path, kwargs, match):
  with pytest.raises(ValueError, match=match) as error:
    _config(tmp_path, **kwargs)
  message = str(error.value)
  for flag in ("--noseeded_noise", "--directions", "--nozeroing",
               "--server_optimizer", "--insertion=server"):
    assert message.count(flag) <= 1, message
  assert "--insertion=server" not in message  # no longer refused


def test_a_bad_tree_clients_flag_is_answered_before_tensorflow_loads(
    tmp_path):
  out = tmp_path / "run"
  proc = subprocess.run(
      [sys.executable, os.path.join(REPO, "experiments", "emnist.py"),
       "--aggregator=tree", "--insertion=clients", "--clip=0.1",
       f"--output_dir={out}"], capture_output=True, text=True, timeout=120)
  assert proc.returncode == 2
  assert proc.stderr.strip().splitlines()[-1].startswith(
      "error: aggregator='tree' with insertion='clients' (--aggregator=tree "
      "--insertion=clients) needs 1 more setting; add --noseeded_noise"
  ), proc.stderr
  assert "tensorflow" not in proc.stderr and not out.exists()


# The clip of a tree query's state ----------------------------------------


def _dp_state(query):
  """A TFF DPAggregatorState-like node around `query`'s initial state."""
  state = collections.namedtuple(
      "DPAggregatorState", "query_state agg_state dp_event is_init_state")
  return {"aggregator": state(query.initial_global_state(), (), None, True)}


@pytest.mark.tff
def test_the_clip_of_every_query_state_tff_builds():
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  import tensorflow_privacy as tfp  # pylint: disable=g-import-not-at-top
  from tff_canary.federated.insertion import adaptive_clip  # pylint: disable=g-import-not-at-top
  from tff_canary.federated.insertion import client_round_state  # pylint: disable=g-import-not-at-top
  from tff_canary.mechanisms.tree import aggregation  # pylint: disable=g-import-not-at-top
  specs = [tf.TensorSpec([3], tf.float32)]
  adaptive = adaptive_clip.AdaptiveClip(0.5, 0.2, 1.0, 5.0)
  queries = {
      # TFF's tree_aggregation, and ours restarted (RestartQuery inside).
      0.3: tfp.NormalizedQuery(tfp.TreeResidualSumQuery.build_l2_gaussian_query(
          0.3, 1.0, specs), denominator=5.0),
      0.4: tfp.NormalizedQuery(aggregation.TreeAggregation(
          1.0, 0.4, restart_period=3).sum_query(specs), denominator=5.0),
      # tree_adaptive's: QAdaClipTreeResSumQuery in a RestartQuery.
      0.7: aggregation.TreeAggregation(
          1.0, 0.7, restart_period=3, adaptive=adaptive).sum_query(specs),
      # The Gaussian ones, fixed and adaptive (its quantile estimator's own
      # GaussianSumQuery state comes after the sum's: not taken).
      0.5: tfp.NormalizedQuery(tfp.GaussianSumQuery(0.5, 0.5), 5.0),
      0.2: tfp.QuantileAdaptiveClipSumQuery(0.2, 1.0, 0.5, 0.2, 1.0, 5.0),
  }
  for clip, query in queries.items():
    assert client_round_state.query_clip(_dp_state(query)) == pytest.approx(
        clip), type(query).__name__
  with pytest.raises(ValueError, match=r"the DP query state at "
                     r"query_state.numerator_state is neither a Gaussian sum "
                     r"query's \(l2_norm_clip\) nor a DP-FTRL tree query's "
                     r"\(clip_value, tree_state\).*its fields are none"):
    client_round_state.query_clip(_dp_state(tfp.NormalizedQuery(
        tfp.NoPrivacySumQuery(), 5.0)))


# The scores' units through TFF's own factory ------------------------------


@pytest.mark.tff
def test_dot_products_need_a_known_mode_and_orthogonal_canaries():
  import tensorflow_federated as tff  # pylint: disable=g-import-not-at-top
  from tff_canary.federated.insertion import canary_clients  # pylint: disable=g-import-not-at-top
  from tff_canary.federated.insertion import scoring_factory  # pylint: disable=g-import-not-at-top
  from tff_canary.stats.canaries import canary_config, schedules  # pylint: disable=g-import-not-at-top
  schedule = schedules.FixedPresentations(num_rounds=2, presentations=1)
  orthogonal = canary_config.CanaryConfig(seed=1, num_inserted=2,
                                          num_held_out=2, schedule=schedule,
                                          directions="orthogonal")
  with pytest.raises(ValueError, match=r"scores must be one of \('cosines', "
                     r"'dot_products'\), got 'dots'"):
    scoring_factory.CanaryScoringFactory(
        tff.aggregators.UnweightedMeanFactory(), orthogonal, scores="dots")
  gaussian = canary_config.CanaryConfig(seed=1, num_inserted=2,
                                        num_held_out=2, schedule=schedule,
                                        directions="gaussian")
  with pytest.raises(ValueError, match=r"scores='dot_products' needs "
                     r"orthogonal canaries"):
    canary_clients.build_canary_client_fedavg(
        lambda: None, tff.learning.optimizers.build_sgdm(0.1),
        canary_seed=1, canaries=gaussian, scores="dot_products")


@pytest.mark.tff
def test_a_canary_client_adds_exactly_one_over_z_to_its_rounds_score():
  # TFF's DifferentiallyPrivateFactory over a tree restarted every 3 rounds,
  # with SEEDED tree noise, run twice: with the scheduled canary clients (of
  # norm 10, clipped to C) and without. The scores u = <c_j, mean> n / (z C)
  # differ by exactly a_{j,t} / z: the server-side mode's units.
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  import tensorflow_federated as tff  # pylint: disable=g-import-not-at-top
  from tff_canary.federated.insertion import canary_clients  # pylint: disable=g-import-not-at-top
  from tff_canary.federated.insertion import measurement_keys  # pylint: disable=g-import-not-at-top
  from tff_canary.federated.insertion import orthogonal_transform  # pylint: disable=g-import-not-at-top
  from tff_canary.federated.insertion import scoring_factory  # pylint: disable=g-import-not-at-top
  from tff_canary.mechanisms.tree import aggregation  # pylint: disable=g-import-not-at-top
  from tff_canary.mechanisms.correlated import tff as correlated_tff  # pylint: disable=g-import-not-at-top
  from tff_canary.stats.canaries import canary_config, schedules  # pylint: disable=g-import-not-at-top
  z, clip, n, rounds = 0.5, 0.1, 4.0, 6
  shapes = ([40], [24])
  dim = sum(int(np.prod(s)) for s in shapes)
  canaries = canary_config.CanaryConfig(
      seed=3, num_inserted=5, num_held_out=5,
      schedule=schedules.ShuffledEpochs(rounds, 3), assignment="fixed",
      directions="orthogonal")
  specs = [tf.TensorSpec(s, tf.float32) for s in shapes]
  value_type = tff.StructWithPythonType(
      [tff.TensorType(np.float32, s) for s in shapes], list)
  tree = aggregation.TreeAggregation(z, clip, restart_period=3,
                                     noise_seed=11)
  rng = np.random.default_rng(0)
  real = [rng.normal(size=(3, dim)).astype(np.float32) for _ in range(rounds)]

  def split(flat):
    return [flat[:40], flat[40:]]

  def run(with_canaries):
    process = scoring_factory.CanaryScoringFactory(
        tree.tff_factory(specs, n), canaries,
        scores="dot_products").create(value_type)
    state, out = process.initialize(), []
    for t in range(rounds):
      values = [split(v) for v in real[t]]
      ids = canary_clients.scheduled_canary_ids(canaries, t)
      if with_canaries and ids.size:
        block = 10.0 * orthogonal_transform.canary_block(3, ids, dim)
        values += [split(v) for v in block]
      output = process.next(state, values)
      state = output.state
      assert set(output.measurements) == {
          "dp_query_metrics", "dp", measurement_keys.DOT_PRODUCTS_KEY}
      out.append(correlated_tff.client_scores_of(
          {"aggregator": output.measurements}, n, z, clip))
    return np.stack(out, axis=1)  # [m, rounds]

  a = canaries.schedule_matrix() & canaries.inserted[:, None]
  assert a.sum() >= 4  # inserted canaries took part
  u_with, u_without = run(True), run(False)
  assert np.abs(u_without).max() > 0.3  # the noise is there, in its units
  np.testing.assert_allclose(u_with - u_without, a / z, atol=1e-4)


# A tiny run: 2 epochs of 2 rounds (6 clients, 3 per round), so 2 trees and
# every candidate scheduled twice; server SGD at learning rate 1 without
# momentum, so theta_0 - theta_T is the sum of the rounds' noised means. The
# node noise multiplier is small enough that a canary client's 1 / z stands
# out of the unit noise in every round.
Z, CLIP, PER_ROUND, ROUNDS, CANDIDATES = 0.1, 0.1, 3, 4, 12


@pytest.fixture(scope="module")
def tree_clients_run(tmp_path_factory):
  from tff_canary.harness.runner import experiment  # pylint: disable=g-import-not-at-top
  path = tmp_path_factory.mktemp("tree_clients") / "run"
  config = _config(
      path, num_rounds=ROUNDS, num_clients=6, clients_per_round=PER_ROUND,
      examples_per_client=8, num_inserted=CANDIDATES // 2,
      num_held_out=CANDIDATES // 2, noise_multiplier=Z, clip=CLIP,
      server_momentum=0.0, server_learning_rate=1.0, eval_every=0,
      checkpoint_every=2, eval_examples=64, allow_large_canary_fraction=True)
  with warnings.catch_warnings():  # half the participants are canaries
    warnings.simplefilter("ignore", experiment.CanaryFractionWarning)
    report = experiment.run_experiment(config, progress=False,
                                       log=lambda *a: None)
  return report, run_dir.RunDir(path)


@pytest.mark.tff
@pytest.mark.slow
def test_a_tree_clients_run_saves_scores_in_node_noise_units(
    tree_clients_run):
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  from tff_canary.federated.insertion import orthogonal_transform  # pylint: disable=g-import-not-at-top
  from tff_canary.stats.canaries import canary_config, schedules  # pylint: disable=g-import-not-at-top
  report, rd = tree_clients_run
  config = rd.load_config()
  assert config["insertion"] == "clients" and config["aggregator"] == "tree"
  assert not rd.exists(run_dir.LEDGER) and not rd.exists(run_dir.COSINES_NPZ)
  scores = rd.load_tree_scores(CANDIDATES)
  assert scores.shape == (ROUNDS, CANDIDATES)
  # (1) The rounds' scores add up to the final model's, n <c_j, theta_0 -
  # theta_T> / (z C): the saved rows are the rounds', in the right unit and
  # canary order.
  dim, seed = config["dim"], config["canary_seed"]
  delta = (np.load(rd.file(run_dir.INITIAL_WEIGHTS)).astype(np.float64)
           - np.load(rd.file(run_dir.FINAL_WEIGHTS)))
  rows = orthogonal_transform.rows(seed, dim, CANDIDATES)
  final = orthogonal_transform.scores(
      seed, tf.constant(delta, tf.float32), dim, rows).numpy()
  np.testing.assert_allclose(scores.sum(axis=0),
                             PER_ROUND * final / (Z * CLIP), atol=1e-3)
  # (2) A canary client adds exactly 1 / z in each round it takes part in:
  # u - a / z is the tree's noise, N(0, K) with K_tt = 1 (and real clients'
  # projections of order n C / sqrt(d) / (z C), negligible), so every entry
  # lies within 5 of it, while a / z = 10.
  canaries = canary_config.CanaryConfig(
      seed=seed, num_inserted=CANDIDATES // 2, num_held_out=CANDIDATES // 2,
      schedule=schedules.ShuffledEpochs(ROUNDS, 2, partial_last_epoch=True),
      assignment=config["assignment"], directions="orthogonal")
  np.testing.assert_array_equal(rd.load_participation(),
                                canaries.participation.events)
  a = (canaries.schedule_matrix() & canaries.inserted[:, None]).T
  assert a.sum() >= 4
  residual = scores - a / Z
  assert np.abs(residual).max() < 5.0, residual
  assert abs(residual[a].mean()) < 2.5 and abs(residual[~a].mean()) < 1.5
  # The clip of every round is the tree's, read from TFF's state.
  assert all(o["dp_clip"] == pytest.approx(CLIP) and o["dp_clipped"]
             for o in json.load(open(rd.file(
                 run_dir.CANARY_OUTCOMES)))["outcomes"])


@pytest.mark.tff
@pytest.mark.slow
def test_a_tree_clients_run_reports_the_tree_accounting(tree_clients_run):
  report, rd = tree_clients_run
  text = report.terminal_text(details=True)
  assert "DP-FTRL, 2 trees" in text
  assert ("insertion: canary clients of norm 10 through TFF's own DP "
          "aggregator (DP-FTRL tree)") in text
  assert "the tree accounting (the analytical ε)" in text
  assert not report.audit.refuted, str(report.audit)
  # A canary adds 1 / z = 10 per participation: the inserted canaries are
  # found (the scheduled statistic's epsilon is far above zero).
  assert report.estimates.scheduled.epsilon > 1.0
  noise = rd.load_noise_check()
  assert noise["kind"] == "tree" and noise["passed"], noise["summary"]
  assert "claimed z = 0.1" in noise["summary"] + str(noise.get("claim"))
  assert open(rd.file(run_dir.REPORT_MD)).read().count("canary clients") >= 1
