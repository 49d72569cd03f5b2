"""tree_simulation and tree_audit: each planted bug caught by its check.

Small seeded settings (2 epochs of 32 rounds, 600 candidates): the bench
(bench/ftrl_audit.py) measures the rates; these tests check that each check
catches what it is for and stays quiet on the correct mechanism.
"""

import dataclasses
import warnings

import numpy as np
import pytest
from scipy import stats

from tff_canary.stats import results
from tff_canary.stats.estimators import scheduled_sums
from tff_canary.stats.correlated import (gls_statistics, linear_noise,
                                         tree_audit, tree_noise,
                                         tree_simulation, tree_targets)

_SETTING = tree_simulation.FtrlSetting(
    epochs=2, rounds_per_epoch=32, noise_multiplier=2.0, num_candidates=600,
    efficient=True, self_test_dim=600)
_PLAIN = tree_simulation.FtrlSetting(
    epochs=2, rounds_per_epoch=32, noise_multiplier=2.0, num_candidates=600,
    efficient=False, self_test_dim=600)


def _audit(setting, run, **kwargs):
  return tree_audit.audit_ftrl(
      run.scores, run.schedule, run.inserted, noise=setting.claimed_noise(),
      rounds_per_epoch=setting.rounds_per_epoch,
      noise_multiplier=setting.noise_multiplier, delta=1e-5,
      self_test_noise=run.self_test_noise, **kwargs)


def test_simulated_run_shapes_and_schedules():
  run = tree_simulation.simulate(_SETTING, seed=1)
  assert run.scores.shape == (600, 64)
  e = linear_noise.epoch_matrix(64, 32)
  np.testing.assert_array_equal(run.schedule.astype(int) @ e, 1)
  np.testing.assert_array_equal(run.participations,
                                run.schedule & run.inserted[:, None])
  assert 0.4 < run.inserted.mean() < 0.6
  with pytest.raises(ValueError):
    run.scores[0, 0] = 1.0  # frozen
  again = tree_simulation.simulate(_SETTING, seed=1)
  np.testing.assert_array_equal(again.scores, run.scores)


def test_double_participation_adds_a_round_per_epoch():
  run = tree_simulation.simulate(_SETTING, bug="double_participation", seed=2)
  e = linear_noise.epoch_matrix(64, 32)
  counts = run.participations.astype(int) @ e
  np.testing.assert_array_equal(counts[run.inserted], 2)
  np.testing.assert_array_equal(counts[~run.inserted], 0)


@pytest.mark.parametrize("setting", [_SETTING, _PLAIN])
def test_correct_mechanism_raises_no_alarm(setting):
  # Family-wise level 0.05 per run: 5 seeded runs all quiet unless the
  # checks are miscalibrated (each quiet with probability >= 0.95).
  alarms = sum(_audit(setting, tree_simulation.simulate(setting, seed=s))
               .refuted for s in range(5))
  assert alarms <= 1


@pytest.mark.parametrize("bug,check,setting", [
    ("restart_reuse", "self-test", _PLAIN),
    ("missing_level", "self-test", _PLAIN),
    ("efficient_scale", "self-test", _SETTING),
    ("double_participation", "contribution", _SETTING),
])
def test_each_bug_is_caught_by_its_check(bug, check, setting):
  verdict = _audit(setting, tree_simulation.simulate(setting, bug=bug,
                                                     seed=3))
  assert verdict.refuted
  assert check in verdict.caught_by
  assert "REFUTED" in str(verdict)


def test_bounds_refute_a_claim_far_too_small():
  # Claim z = 20 for a run with z = 2: scores are divided by the claimed
  # node noise, 10x the real one. The claim's epsilon is about 1, the run's
  # about 17; the one-run bounds exceed the claim (self-test skipped here).
  run = tree_simulation.simulate(_SETTING, seed=4)
  verdict = tree_audit.audit_ftrl(
      run.scores * 0.1, run.schedule, run.inserted,
      noise=_SETTING.claimed_noise(), rounds_per_epoch=32,
      noise_multiplier=20.0, delta=1e-5)
  assert verdict.self_test is None
  assert "bounds" in verdict.caught_by


def test_estimates_track_what_the_rounds_reveal():
  run = tree_simulation.simulate(_SETTING, seed=5)
  est = tree_audit.ftrl_estimates(
      run.scores, run.schedule, run.inserted, noise=_SETTING.claimed_noise(),
      noise_multiplier=2.0, delta=1e-5)
  # The GLS statistic's mean is the mean schedule mu (test_gls_statistics),
  # the target `tree_targets` names; its interval should hold it (95%, fixed
  # seed).
  targets = tree_targets.tree_targets(
      _SETTING.claimed_noise(), run.schedule, run.inserted,
      rounds_per_epoch=32, noise_multiplier=2.0, delta=1e-5)
  low, high = est.scheduled.mu_interval
  assert low <= targets.schedules_mu <= high
  low, high = est.final.mu_interval
  assert low <= targets.final_mu <= high
  assert est.final.epsilon < est.scheduled.epsilon


def test_bad_arguments():
  run = tree_simulation.simulate(_SETTING, seed=6)
  with pytest.raises(TypeError, match="TreeNoise"):
    tree_audit.audit_ftrl(run.scores, run.schedule, run.inserted,
                          noise=np.eye(64), rounds_per_epoch=32,
                          noise_multiplier=2.0, delta=1e-5)
  with pytest.raises(ValueError, match="inserted"):
    tree_audit.audit_ftrl(run.scores, run.schedule, run.inserted[:5],
                          noise=_SETTING.claimed_noise(), rounds_per_epoch=32,
                          noise_multiplier=2.0, delta=1e-5)
  with pytest.raises(ValueError, match="self_test_noise"):
    tree_audit.audit_ftrl(
        run.scores, run.schedule, run.inserted,
        noise=_SETTING.claimed_noise(), rounds_per_epoch=32,
        noise_multiplier=2.0, delta=1e-5, self_test_noise=np.zeros((3, 4)))
  with pytest.raises(ValueError, match="restart after every epoch"):
    tree_audit.audit_ftrl(run.scores, run.schedule, run.inserted,
                          noise=tree_noise.tree_noise(64, restart_period=16),
                          rounds_per_epoch=32, noise_multiplier=2.0,
                          delta=1e-5)
  with pytest.raises(ValueError, match="both inserted and held-out"):
    tree_audit.ftrl_estimates(run.scores, run.schedule,
                              np.ones(600, bool),
                              noise=_SETTING.claimed_noise(),
                              noise_multiplier=2.0, delta=1e-5)
  with pytest.raises(ValueError, match="bug"):
    tree_simulation.simulate(_SETTING, bug="typo")
  with pytest.raises(ValueError, match="efficient"):
    tree_simulation.simulate(_PLAIN, bug="efficient_scale")
  with pytest.raises(ValueError, match="noise_multiplier"):
    tree_simulation.FtrlSetting(epochs=1, rounds_per_epoch=4,
                                noise_multiplier=0.0)


def test_self_test_per_tensor_finds_one_tensors_noise_in_another():
  # The simulated run's 600 self-test coordinates as tensors of 500 and 100,
  # and the same run with the second tensor's noise a copy of the first's
  # first 100 values in every round (what one noise seed for every tensor
  # does): cosine 1 over 64 x 100 values, p = 0, against a threshold of
  # 0.05 / 3 / (number of tests); the copy has the claimed law per
  # coordinate, so no variance test fires.
  run = tree_simulation.simulate(_SETTING, seed=7)
  sizes = (500, 100)
  correct = _audit(_SETTING, run, self_test_sizes=sizes).self_test
  assert correct.passed and correct.tensor_sizes == sizes
  copied = np.array(run.self_test_noise)
  copied[:, 500:] = copied[:, :100]
  reused = dataclasses.replace(run, self_test_noise=copied)
  check = _audit(_SETTING, reused, self_test_sizes=sizes).self_test
  assert check.test("prefix[tensor0,tensor1]").rejected
  assert check.test("prefix[tensor0,tensor1]").statistic == pytest.approx(1.0)
  assert not any(t.rejected for t in check.tests if t.family == "variance")
  with pytest.raises(ValueError, match="self_test_sizes"):
    _audit(_SETTING, run, self_test_sizes=(500, 99))


# --- the variance check of the estimates (issue 26, item 3) ----------------

# The main job's tree setting: 80 rounds of 50 clients, one tree (one epoch),
# z = 0.1, 80 fair-coin candidates, the efficient tree.
_MAIN = tree_simulation.FtrlSetting(
    epochs=1, rounds_per_epoch=80, noise_multiplier=0.1, num_candidates=80,
    efficient=True, self_test_dim=2)
_MAIN_NOISE = _MAIN.claimed_noise()
_DOUBTFUL = "GDP reading of mu is doubtful"


def _scheduled_estimates(run, known_spread=True):
  """What `ftrl_estimates` computes for T (its variance check included),
  without its costly fit to the maxima."""
  t = gls_statistics.scheduled_statistic(run.scores, run.schedule,
                                         _MAIN_NOISE)
  shape = gls_statistics.schedule_mu(run.schedule[run.inserted], _MAIN_NOISE,
                                     noise_multiplier=1.0)
  return scheduled_sums.epsilon_scheduled(
      t[run.inserted], t[~run.inserted], delta=1e-5,
      inserted_mu=shape if known_spread else None)


def test_the_variance_check_rarely_warns_on_correct_runs():
  # At z = 0.1 the inserted canaries' mu_j = sqrt(a_j^T K^-1 a_j) / z run
  # from about 12 to 25, so Var T = 1 + Var mu_j: the check that ignored it
  # warned in 197 of 200 runs. With the known spread the check is at
  # two-sided level 1e-3, so about 0.1 of 100 runs warn; 5 (5%) is far above
  # that (the seeds are fixed: the count is deterministic). The premise, on
  # the first 20 runs: without the known spread it warns in most.
  warned = ignored = 0
  with warnings.catch_warnings():
    warnings.simplefilter("ignore", results.SignConventionWarning)
    for seed in range(100):
      run = tree_simulation.simulate(_MAIN, seed=seed)
      warned += _DOUBTFUL in _scheduled_estimates(run).trust
      if seed < 20:
        ignored += _DOUBTFUL in _scheduled_estimates(run, False).trust
  assert warned <= 5, warned
  assert ignored >= 10, ignored


def test_the_variance_check_still_warns_when_rounds_are_doubled():
  # A client counted twice per epoch: each inserted T gains a^T K^-1 b / z /
  # sqrt(a^T K^-1 a) for its extra round b, which differs by canary (K^-1
  # is not constant off its diagonal) by several null sds at z = 0.1: a
  # spread the schedules do not explain. It warned in 50 of 50 runs.
  warned = sum(
      _DOUBTFUL in _scheduled_estimates(tree_simulation.simulate(
          _MAIN, bug="double_participation", seed=seed)).trust
      for seed in range(10))
  assert warned >= 9, warned


def test_ftrl_estimates_check_each_variance_with_its_known_spread():
  run = tree_simulation.simulate(_MAIN, seed=7)
  est = tree_audit.ftrl_estimates(
      run.scores, run.schedule, run.inserted, noise=_MAIN_NOISE,
      noise_multiplier=0.1, delta=1e-5)
  assert est.scheduled.known_spread and est.final.known_spread
  assert est.scheduled.variance_p_value == pytest.approx(
      _scheduled_estimates(run).variance_p_value, rel=1e-9)
  assert _DOUBTFUL not in est.scheduled.trust
  doubled = tree_simulation.simulate(_MAIN, bug="double_participation",
                                     seed=7)
  est = tree_audit.ftrl_estimates(
      doubled.scores, doubled.schedule, doubled.inserted,
      noise=_MAIN_NOISE, noise_multiplier=0.1, delta=1e-5)
  assert _DOUBTFUL in est.scheduled.trust


# The clients' data along the canaries -------------------------------------

_RUN = tree_simulation.FtrlSetting(
    epochs=1, rounds_per_epoch=32, noise_multiplier=0.1, num_candidates=80,
    self_test_dim=2)  # the EMNIST tree run's shape: 32 rounds, z = 0.1


def _tree_noise_variance(setting):
  """v0: the variance of a canary's excess per epoch from the tree noise."""
  e = linear_noise.epoch_matrix(setting.num_rounds,
                                   setting.rounds_per_epoch)
  v = gls_statistics.epoch_count_covariance(
      setting.claimed_noise(), e,
      noise_multiplier=setting.noise_multiplier)
  return 1.0 / float(np.ones(len(v)) @ np.linalg.solve(v, np.ones(len(v))))


def _with_data(setting, run, spread, seed, extra=0.0):
  """run's scores plus the clients' updates along each canary: a random
  projection x_j of their summed updates, the same share in every round (a
  persistent direction adds up over the epoch), with variance (spread - 1)
  v0, so a canary's excess per epoch scatters `spread` times the tree
  noise's variance. `extra`: inserted canaries' updates (1 + extra) times
  the clip (per-tensor clipping lets through 2C: extra = 1)."""
  rng = np.random.default_rng(seed)
  x = rng.standard_normal(setting.num_candidates) * np.sqrt(
      (spread - 1.0) * _tree_noise_variance(setting))
  z, per = setting.noise_multiplier, setting.rounds_per_epoch
  return (run.scores + x[:, None] / (z * per)
          + extra * run.participations / z)


def test_the_clients_data_along_the_canaries_keeps_the_check_at_its_level():
  # The cause of the low and high readings on real runs: the clients'
  # updates project onto every canary direction, O(1/sqrt(d)) per round but
  # added up over an epoch, while the tree noise on an epoch's sum is about
  # one node's (v0). At spread 3 (the 32-round EMNIST runs measured
  # 1.3-1.7; more rounds sum more), the excess at the tree noise's scale
  # alone is N(0, 3): it passes the one-sided threshold at 0.05 / 3 in
  # P(N(0, 1) > 2.13 / sqrt(3)) = 11% of correct runs; the check, at the
  # scale the inserted canaries show, in 1.67%. 400 seeded runs: the old
  # scale's alarms >= 20 (expected 44; 3x the level), the check's <= 14
  # (expected 6.7; Binomial(400, 1/60) exceeds 14 with probability 0.003).
  threshold = stats.norm.isf(0.05 / 3)
  v0 = _tree_noise_variance(_RUN)
  old = new = 0
  for seed in range(400):
    run = tree_simulation.simulate(_RUN, seed=seed)
    check = tree_audit.contribution_check(
        _with_data(_RUN, run, 3.0, seed), run.schedule, run.inserted,
        noise=_RUN.claimed_noise(), rounds_per_epoch=32, noise_multiplier=0.1)
    old += check.excess / np.sqrt(v0 / check.inserted) > threshold
    new += check.p_value < 0.05 / 3
  assert old >= 20 and new <= 14, (old, new)


def test_the_spread_is_measured_and_the_bugs_are_still_caught():
  # Spread 3: the check reads it (from ~300 inserted canaries, its
  # relative SE is about sqrt(2 / 300) = 8%: bounds at 3 SE), and both
  # causes of a larger contribution are caught at full size: updates of 2C
  # (per-tensor clipping) and a client counted twice per epoch. Each adds 1
  # per epoch against a standard error of sqrt(3 v0 / 300), about 0.10 at
  # z = 2 (v0 = 1.02 over two epochs).
  run = tree_simulation.simulate(_SETTING, seed=8)
  correct = _audit(_SETTING, run)
  scores = _with_data(_SETTING, run, 3.0, 8)
  clean = tree_audit.audit_ftrl(
      scores, run.schedule, run.inserted, noise=_SETTING.claimed_noise(),
      rounds_per_epoch=32, noise_multiplier=2.0, delta=1e-5)
  assert not correct.refuted and "contribution" not in clean.caught_by
  assert 2.25 < clean.contribution_spread < 3.75
  assert 0.75 < correct.contribution_spread < 1.25
  twice = tree_simulation.simulate(_SETTING, bug="double_participation",
                                   seed=8)
  for bugged, scores in ((run, _with_data(_SETTING, run, 3.0, 8, extra=1.0)),
                         (twice, _with_data(_SETTING, twice, 3.0, 8))):
    verdict = tree_audit.audit_ftrl(
        scores, bugged.schedule, bugged.inserted,
        noise=_SETTING.claimed_noise(),
        rounds_per_epoch=32, noise_multiplier=2.0, delta=1e-5)
    assert "contribution" in verdict.caught_by
    assert verdict.contribution_excess == pytest.approx(1.0, abs=0.4)
    text = str(verdict)
    assert "more participations per epoch than their schedules" in text
    assert "updates larger than the clip" in text


def test_clients_pushing_back_along_a_canary_read_low_and_raise_no_alarm():
  # The other candidate cause: after a canary goes in, the model moves along
  # it and later clients' updates partly undo it, rho per round after the
  # insertion in its epoch (0.02 of a participation per round, 0.31 per
  # epoch on average, about 5 standard errors of 0.058 here). The reading
  # is then low, never an alarm (the check is one-sided); a bug on top
  # (updates of 2C) is still caught. Not seen in the EMNIST tree runs
  # (docs/method/dp-ftrl.md).
  run = tree_simulation.simulate(_SETTING, seed=9)
  part = run.participations.reshape(-1, _SETTING.epochs, 32)
  after = ((np.cumsum(part, axis=2) - part) > 0).reshape(part.shape[0], -1)
  pushed = run.scores - 0.02 * after / _SETTING.noise_multiplier
  low = tree_audit.contribution_check(
      pushed, run.schedule, run.inserted, noise=_SETTING.claimed_noise(),
      rounds_per_epoch=32, noise_multiplier=2.0)
  assert low.t < -2.0 and low.p_value > 0.9
  bugged = tree_audit.contribution_check(
      pushed + run.participations / _SETTING.noise_multiplier, run.schedule,
      run.inserted, noise=_SETTING.claimed_noise(), rounds_per_epoch=32,
      noise_multiplier=2.0)
  assert bugged.p_value < 1e-6
