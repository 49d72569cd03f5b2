"""Banded and BLT DP-FTRL in the experiments (`--aggregator=banded`,
`--aggregator=blt`): their settings and refusals, the DP-FTRL report over
their claimed noise from simulated scores, and a tiny EMNIST run through the
BLT aggregator with its noise self-test (tff_canary.mechanisms: matrix,
banded, blt; mechanisms.matrix.tff)."""

from __future__ import annotations

import json
import warnings

import numpy as np
import pytest

from tff_canary.harness.config import experiment_config
from tff_canary.harness.recording import run_dir
from tff_canary.mechanisms import registry
from tff_canary.stats.accounting import gaussian_accounting
from tff_canary.stats.canaries import schedules
from tff_canary.stats.matrix import toeplitz
import fake_runs

# The in-process runs train tests/small_model.py's CNN (tests/conftest.py).
pytestmark = pytest.mark.usefixtures("small_emnist_model")


def test_each_matrix_mechanism_fills_its_setting_and_refuses_the_other():
  banded = experiment_config.ExperimentConfig(aggregator="banded", clip=0.1)
  assert banded.bands == registry.get("banded").settings["bands"].default
  assert banded.blt_buffers is None
  with pytest.raises(ValueError, match=r"bands=2 is for aggregator="
                     r"'banded'; got aggregator='blt'"):
    experiment_config.ExperimentConfig(aggregator="blt", clip=0.1, bands=2)
  with pytest.raises(ValueError, match=r"aggregator='blt' needs "
                     r"noise_multiplier > 0.*got noise_multiplier=0.0"):
    experiment_config.ExperimentConfig(aggregator="blt", clip=0.1,
                                       noise_multiplier=0.0)


def test_matrix_mechanisms_take_canary_clients_as_the_tree_does():
  for name in ("banded", "blt"):
    with pytest.raises(ValueError, match=(
        rf"aggregator='{name}' with insertion='clients' \(--aggregator={name} "
        r"--insertion=clients\) needs 2 more settings; add --noseeded_noise "
        r"--clip=C")):
      experiment_config.ExperimentConfig(aggregator=name, insertion="clients")
    with pytest.raises(ValueError, match=r"--canary_norm=0.1 or more .*the "
                       r"strategy's scores count a canary client"):
      experiment_config.ExperimentConfig(
          aggregator=name, insertion="clients", seeded_noise=False,
          clip=0.1, canary_norm=0.05)
    config = experiment_config.ExperimentConfig(
        aggregator=name, insertion="clients", seeded_noise=False, clip=0.1)
    assert config.insertion == "clients"


def _simulated_run(path, z=1.0, seed=0, placement="random",
                   sampling="shuffle"):
  """A banded run directory (3 bands, 4 epochs of 8 rounds, 400 candidates)
  whose scores are drawn here: u_j ~ N(a_j / z, K), K = C^-1 C^-T per epoch
  (built here from the closed-form coefficients, not by strategy_noise);
  with cyclic sampling one C over all 32 rounds and canaries in cyclic
  slots. With placement "worst_case" every canary is in the first round of
  every epoch (C's coefficients are nonnegative and non-increasing: its
  first column is its largest)."""
  from tff_canary.stats.canaries import canary_config  # pylint: disable=g-import-not-at-top
  config = dict(task="emnist", data="synthetic", seed=seed, canary_seed=7,
                dim=10_000, noise_multiplier=z, clip=0.1, clients_per_round=4,
                num_rounds=32, num_inserted=200, num_held_out=200,
                sampling=sampling, num_clients=32, delta=1e-5,
                presentations=4, assignment="coin", directions="orthogonal",
                aggregator="banded", bands=3, placement=placement)
  cyclic = sampling == "cyclic"
  canaries = canary_config.CanaryConfig(
      seed=7, num_inserted=200, num_held_out=200,
      schedule=(schedules.SharedRounds(32, (0, 8, 16, 24))
                if placement == "worst_case" else
                schedules.CyclicRounds(32, 8) if cyclic else
                schedules.ShuffledEpochs(32, 8, partial_last_epoch=True)),
      assignment="coin", directions="orthogonal")
  a = canaries.schedule_matrix() & canaries.inserted[:, None]
  size = 32 if cyclic else 8   # one C over the run, or one per epoch
  c = np.zeros((size, size))
  for i, ci in enumerate(toeplitz.square_root_coefficients(3)):
    c += ci * np.eye(size, k=-i)
  b = np.linalg.inv(c) if cyclic else np.kron(np.eye(4), np.linalg.inv(c))
  rng = np.random.default_rng(seed)
  u = a / z + rng.standard_normal((400, 32)) @ b.T
  return fake_runs.save_scored_run(path, config, canaries, u), c


@pytest.mark.parametrize("sampling", ["shuffle", "cyclic"])
def test_the_report_of_a_banded_run_claims_its_strategy_sensitivity(
    tmp_path, sampling):
  from tff_canary.harness.reporting import report as report_lib  # pylint: disable=g-import-not-at-top
  rd, c = _simulated_run(tmp_path / "run", sampling=sampling)
  report = report_lib.build_report(rd.path)
  # The claim, independently. C's coefficients are nonnegative and
  # non-increasing. Shuffled: one participation per epoch of 4 restarted
  # epochs, the worst round of an epoch is its first, ||C e_0||. Cyclic: 4
  # participations 8 rounds apart of one 3-banded C, a* = rounds 0, 8, 16,
  # 24, whose columns do not overlap (bands <= b: a restart changes
  # nothing). Either way mu = 2 ||C e_0|| / z.
  mu = np.sqrt(4 * np.sum(c[:, 0] ** 2))
  assert report.audit.claim.epsilon == pytest.approx(
      gaussian_accounting.gaussian_epsilon_of_mu(mu, 1e-5), rel=1e-9)
  assert report.targets.worst_case_epsilon == pytest.approx(
      report.audit.claim.epsilon, rel=1e-9)
  assert not report.audit.refuted, str(report.audit)
  # Scores drawn with the claimed K: the scheduled statistic's estimate
  # covers its target (a 95% interval, fixed seed).
  interval = report.estimates.scheduled.interval
  assert interval.low <= report.targets.schedules_epsilon <= interval.high
  text, markdown = report.terminal_text(), report.to_markdown()
  assert text.splitlines()[0].startswith("analytical ε")
  assert "banded square-root strategy of 3 bands" in markdown
  if sampling == "shuffle":
    assert "DP-FTRL, 4 epochs (exact GDP" in text
    assert report.audit.participation is None
  else:  # the rule's claim, and every canary's schedule checked against it
    assert ("DP-FTRL, at most 4 participations at least 8 rounds apart (exact GDP"
            in text)
    assert report.audit.participation.startswith("every candidate")
    assert "never restarted (cyclic sampling" in markdown


def test_worst_case_placement_targets_the_analytical_epsilon(tmp_path):
  from tff_canary.harness.reporting import report as report_lib  # pylint: disable=g-import-not-at-top
  rd, _ = _simulated_run(tmp_path / "run", placement="worst_case")
  report = report_lib.build_report(rd.path)
  # Every canary on the worst-case pattern: the schedules' epsilon is the
  # claim's, and the scheduled estimate (400 candidates, fixed seed) covers it.
  claimed = report.audit.claim.epsilon
  assert report.targets.schedules_epsilon == pytest.approx(claimed, rel=1e-9)
  interval = report.estimates.scheduled.interval
  assert interval.low <= claimed <= interval.high
  assert not report.audit.refuted, str(report.audit)


def test_placement_worst_case_is_the_noise_s_worst_rounds_or_refused():
  config = experiment_config.ExperimentConfig(
      aggregator="blt", clip=0.1, placement="worst_case", num_rounds=12,
      clients_per_round=2)
  resolved = experiment_config.resolve(config, 8, 100)  # epochs of 4 rounds
  assert resolved.canary_schedule == schedules.SharedRounds(12, (0, 4, 8))
  assert resolved.values["placement"] == "worst_case"
  with pytest.raises(ValueError, match=(
      r"needs 1 more setting; add --placement=random .*every canary on the "
      r"rounds of the accounting's worst case under noise correlated across "
      r"rounds \(tree, banded, blt\)")):
    experiment_config.ExperimentConfig(placement="worst_case")
  with pytest.raises(ValueError, match="placement must be one of"):
    experiment_config.ExperimentConfig(placement="worst")


@pytest.mark.tff
def test_a_tiny_blt_run_reports_its_claim_scores_and_noise_check(tmp_path):
  from tff_canary.harness.runner import experiment  # pylint: disable=g-import-not-at-top
  path = tmp_path / "run"
  # Cyclic sampling: one BLT over the 6 rounds, never restarted (the
  # restarted BLT runs in the canary-clients run below).
  config = experiment_config.ExperimentConfig(
      aggregator="blt", clip=0.1, output_dir=str(path), num_rounds=6,
      num_clients=18, clients_per_round=6, examples_per_client=8,
      num_inserted=4, num_held_out=4, noise_multiplier=1.0, eval_every=0,
      checkpoint_every=6, eval_examples=16, allow_large_canary_fraction=True,
      sampling="cyclic")
  # 8 candidates cannot reach the claim: said before training.
  from tff_canary.harness.config import preflight  # pylint: disable=g-import-not-at-top
  with pytest.warns(preflight.BeyondReachWarning, match="about 128 "
                    "candidates"):
    report = experiment.run_experiment(config, progress=False,
                                       log=lambda *a: None)
  rd = run_dir.RunDir(str(path))
  saved = rd.load_config()
  assert saved["aggregator"] == "blt" and saved["blt_buffers"] == 3
  assert not rd.exists(run_dir.LEDGER)
  assert rd.load_tree_scores(8).shape == (6, 8)
  # Two epochs of 3 rounds, never restarted: the claim is the worst case
  # of the BLT fitted to 2 participations 3 rounds apart in 6 rounds.
  from tff_canary.stats.matrix import separation  # pylint: disable=g-import-not-at-top
  rule = separation.MinSeparation(rounds=6, participations=2, separation=3)
  strategy = registry.get("blt").strategy(saved, 3)
  assert report.audit.claim.epsilon == pytest.approx(
      rule.claim(strategy.coefficients(6), noise_multiplier=1.0,
                 delta=saved["delta"]).epsilon, rel=1e-12)
  assert report.audit.participation.startswith("every candidate")
  assert "never restarted" in report.to_markdown()
  check = json.loads(open(rd.file(run_dir.NOISE_CHECK)).read())
  assert check["kind"] == "matrix" and check["passed"]
  assert check["claim"].startswith("matrix covariance (whitened)")
  assert "claimed linear noise" in check["claim"]
  assert check["summary"].startswith("matrix noise check passed")
  assert "tree" not in report.audit.contribution_text()
  assert "noise self-test: passed" in report.terminal_text()


@pytest.mark.parametrize("name", ["banded", "blt"])
def test_the_claimed_noise_gives_the_matrix_accounting(name):
  from tff_canary.stats.matrix import analytical, sensitivity  # pylint: disable=g-import-not-at-top
  mechanism = registry.get(name)
  values = {"bands": 3, "blt_buffers": 2, "sampling": "shuffle"}
  noise = mechanism.round_noise(values, 20, 8)  # epochs of 8, 8 and 4 rounds
  assert noise.rounds_per_block == (8, 8, 4)
  matrix = analytical.matrix_epsilon(
      sensitivity.restarted_sensitivity(noise), noise_multiplier=0.7,
      delta=1e-5)
  assert noise.claim(0.7, delta=1e-5).epsilon == pytest.approx(
      matrix.epsilon, rel=1e-12)
  # One participation per epoch of a nonincreasing C: each epoch's worst
  # round is its first, ||C_E e_0||^2 = sum of c_t^2 over the epoch.
  c = mechanism.coefficients(values, 8)
  expected = np.sqrt(2 * np.sum(c**2) + np.sum(c[:4]**2))
  assert matrix.sensitivity.value == pytest.approx(expected, rel=1e-9)


@pytest.mark.tff
@pytest.mark.slow
def test_a_tiny_blt_clients_run_scores_canary_clients_in_units_of_z_c(
    tmp_path):
  # tests/mechanisms/tree/test_end_to_end_clients.py's tiny run with BLT DP-FTRL: 2 epochs of 2
  # rounds, 3 clients a round, z = 0.1, so a canary client's 1 / z = 10
  # stands out of the noise, whose per-round std is sqrt(K_tt), K = C^-1
  # C^-T: between 1 and 1.2 here (C's inverse coefficients after d_0 = 1
  # are small), so every residual lies within 5 of it.
  from tff_canary.harness.runner import experiment  # pylint: disable=g-import-not-at-top
  from tff_canary.stats.canaries import canary_config  # pylint: disable=g-import-not-at-top
  z, rounds, candidates = 0.1, 4, 12
  config = experiment_config.ExperimentConfig(
      aggregator="blt", insertion="clients", seeded_noise=False, clip=0.1,
      output_dir=str(tmp_path / "run"), num_rounds=rounds, num_clients=6,
      clients_per_round=3, examples_per_client=8,
      num_inserted=candidates // 2, num_held_out=candidates // 2,
      noise_multiplier=z, server_momentum=0.0, eval_every=0,
      eval_examples=64, allow_large_canary_fraction=True)
  with warnings.catch_warnings():  # half the participants are canaries
    warnings.simplefilter("ignore", experiment.CanaryFractionWarning)
    report = experiment.run_experiment(config, progress=False,
                                       log=lambda *a: None)
  rd = run_dir.RunDir(str(tmp_path / "run"))
  saved = rd.load_config()
  scores = rd.load_tree_scores(candidates)
  canaries = canary_config.CanaryConfig(
      seed=saved["canary_seed"], num_inserted=candidates // 2,
      num_held_out=candidates // 2,
      schedule=schedules.ShuffledEpochs(rounds, 2, partial_last_epoch=True),
      assignment=saved["assignment"], directions="orthogonal")
  np.testing.assert_array_equal(rd.load_participation(),
                                canaries.participation.events)
  a = (canaries.schedule_matrix() & canaries.inserted[:, None]).T
  assert a.sum() >= 4
  residual = scores - a / z
  assert np.abs(residual).max() < 5.0, residual
  # The clip of every round is the BLT query's, read from TFF's state.
  assert all(o["dp_clip"] == pytest.approx(0.1) and o["dp_clipped"]
             for o in json.load(open(rd.file(
                 run_dir.CANARY_OUTCOMES)))["outcomes"])
  noise = rd.load_noise_check()
  assert noise["kind"] == "matrix" and noise["passed"], noise["summary"]
  text = report.terminal_text(details=True)
  assert ("canary clients of norm 10 through TFF's own DP aggregator "
          "(DP-FTRL matrix mechanism)") in text
  assert not report.audit.refuted, str(report.audit)


def test_a_blt_of_given_parameters_replaces_the_fitted_one():
  from tff_canary.stats.matrix import blt as blt_lib  # pylint: disable=g-import-not-at-top
  config = experiment_config.ExperimentConfig(
      aggregator="blt", clip=0.1, blt_output_scale="0.3, 0.15",
      blt_buf_decay="0.4,0.9")
  assert config.blt_output_scale == "0.3,0.15"  # canonical text
  assert config.blt_buffers == 2  # the given BLT's
  mechanism = registry.get("blt")
  given = blt_lib.blt([0.3, 0.15], [0.4, 0.9])
  strategy = mechanism.strategy(config, 8)
  np.testing.assert_array_equal(strategy.output_scale, given.output_scale)
  np.testing.assert_array_equal(strategy.buf_decay, given.buf_decay)
  np.testing.assert_array_equal(mechanism.coefficients(config, 8),
                                given.coefficients(8))
  assert "BLT of output scales 0.3,0.15 and buffer decays 0.4,0.9 (given)" \
      in mechanism.section_settings(config)[0]
  # Without them, the fitted BLT of blt_buffers buffers.
  fitted = experiment_config.ExperimentConfig(aggregator="blt", clip=0.1)
  assert fitted.blt_output_scale is None and fitted.blt_buffers == 3
  assert mechanism.strategy(fitted, 8).num_buffers == 3


@pytest.mark.parametrize("kwargs, match", [
    (dict(blt_output_scale="0.3"), "give both blt_output_scale and "
     "blt_buf_decay"),
    (dict(blt_output_scale="0.3,x", blt_buf_decay="0.5,0.4"),
     r"blt_output_scale must be comma-separated numbers \(e.g. 0.3,0.15\), "
     "got '0.3,x'"),
    (dict(blt_output_scale="0.3", blt_buf_decay="1.5"),
     r"blt_buf_decay must lie in \(-1, 1\)"),
    (dict(blt_output_scale="0.3", blt_buf_decay="0.5,0.4"),
     "blt_output_scale and blt_buf_decay must have one value per buffer"),
    (dict(blt_output_scale="0.3", blt_buf_decay="0.5", blt_buffers=3),
     "blt_buffers=3 differs from the given BLT's 1 buffers"),
])
def test_bad_blt_parameters_are_named(kwargs, match):
  with pytest.raises(ValueError, match=match):
    experiment_config.ExperimentConfig(aggregator="blt", clip=0.1, **kwargs)
  with pytest.raises(ValueError, match="is for aggregator='blt'"):
    experiment_config.ExperimentConfig(aggregator="tree", clip=0.1,
                                       blt_output_scale="0.3",
                                       blt_buf_decay="0.5")
