"""tree_simulation and tree_audit: each planted bug caught by its check.

Small seeded settings (2 epochs of 32 rounds, 600 candidates): the bench
(bench/ftrl_audit.py) measures the rates; these tests check that each check
catches what it is for and stays quiet on the correct mechanism.
"""

import dataclasses

import numpy as np
import pytest

from tff_canary.stats.tree import (tree_audit, tree_noise, tree_simulation,
                                   tree_statistics)

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
  e = tree_statistics.epoch_matrix(64, 32)
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
  e = tree_statistics.epoch_matrix(64, 32)
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
    ("double_participation", "participations", _SETTING),
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
  # The GLS statistic's mean is the mean schedule mu (test_tree_statistics);
  # its interval should hold it (95%, fixed seed).
  low, high = est.scheduled.mu_interval
  assert low <= est.attack_mu <= high
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
