"""Worst-case canary placement: a* by structure equals enumeration, and the
simulator, schedule and targets put every canary on it.

A canary on pattern a has GLS statistic N(mu_a, 1), mu_a = sqrt(a^T K^-1 a)
/ z; with one participation per epoch and the noise restarted every epoch,
a* is the round of each block with the largest (K^-1)_tt
(`LinearNoise.worst_case_rounds`). Enumeration over every allowed pattern
(`sensitivity.enumerated_sensitivity` of the covariance's strategy) is the
independent check on small cases.
"""

import numpy as np
import pytest

from tff_canary.stats.canaries import canary_config, schedules
from tff_canary.stats.correlated import (gls_statistics, tree_noise,
                                         tree_simulation, tree_targets)
from tff_canary.stats.matrix import blt, sensitivity, strategy_noise, toeplitz

_BLT = blt.blt([0.3, 0.1], [0.5, 0.95])


def _restarted(name, rounds, per):
  if name.startswith("tree"):
    return tree_noise.tree_noise(rounds, efficient=name == "tree efficient",
                                 restart_period=per)
  c = (toeplitz.square_root_coefficients(3) if name == "banded"
       else _BLT.coefficients(per))
  return strategy_noise.strategy_noise(c, rounds, restart_every=per)


@pytest.mark.parametrize("name", ["tree plain", "tree efficient", "banded",
                                  "blt"])
@pytest.mark.parametrize("rounds,per", [(12, 4), (15, 5), (16, 8)])
def test_worst_case_rounds_equal_enumeration(name, rounds, per):
  noise = _restarted(name, rounds, per)
  found = sensitivity.restarted_sensitivity(noise)
  exact = sensitivity.enumerated_sensitivity(
      sensitivity.covariance_strategy(noise.covariance),
      participations=rounds // per, separation=1, rounds_per_epoch=per)
  assert found.value == pytest.approx(exact.value, rel=1e-9)
  # a* is one round per epoch and its own mu is the worst case's.
  rounds_found = noise.worst_case_rounds()
  np.testing.assert_array_equal(rounds_found // per, np.arange(rounds // per))
  assert np.flatnonzero(found.pattern).tolist() == rounds_found.tolist()
  np.testing.assert_allclose(
      gls_statistics.schedule_mu(found.pattern[None], noise,
                                 noise_multiplier=2.0),
      noise.worst_case_mu(2.0), rtol=1e-9)
  if name != "tree efficient":  # round 0 of each block, the claim's mu
    assert rounds_found.tolist() == list(range(0, rounds, per))
    assert noise.worst_case_mu(2.0) == pytest.approx(
        noise.release_mu(2.0), rel=1e-9)


def test_shared_rounds_schedule_puts_inserted_and_held_out_on_a_star():
  noise = tree_noise.tree_noise(48, efficient=True, restart_period=16)
  schedule = sensitivity.restarted_sensitivity(noise).as_schedule()
  a_star = tuple(noise.worst_case_rounds().tolist())
  assert schedule == schedules.SharedRounds(48, a_star)
  assert schedule.expected_participation() == 3.0
  config = canary_config.CanaryConfig(seed=3, num_inserted=5,
                                      num_held_out=4, schedule=schedule)
  for part in (config.participation, config.held_out_participation):
    counts = part.per_round()
    ids = np.unique(part.events[:, 1])
    assert set(np.flatnonzero(counts).tolist()) == set(a_star)
    assert np.all(counts[list(a_star)] == ids.size)
  with pytest.raises(ValueError, match=r"rounds must lie in \[0, 8\), but "
                     r"rounds\[1\] = 8"):
    schedules.SharedRounds(8, (0, 8))
  with pytest.raises(ValueError, match="rounds must be distinct"):
    schedules.SharedRounds(8, (2, 2))
  with pytest.raises(ValueError, match="rounds must be a nonempty sequence"):
    schedules.SharedRounds(8, ())


_SETTING = tree_simulation.FtrlSetting(
    epochs=3, rounds_per_epoch=16, noise_multiplier=1.5, num_candidates=4000,
    efficient=False, self_test_dim=2)


def _targets(run, noise, setting=_SETTING):
  return tree_targets.tree_targets(
      noise, run.schedule, run.inserted,
      rounds_per_epoch=setting.rounds_per_epoch,
      noise_multiplier=setting.noise_multiplier, delta=1e-5)


def test_simulated_worst_case_canaries_face_the_analytical_mu():
  noise = _SETTING.claimed_noise()
  run = tree_simulation.simulate(_SETTING, seed=2, placement="worst_case")
  random = tree_simulation.simulate(_SETTING, seed=2)
  np.testing.assert_array_equal(run.inserted, random.inserted)  # same coins
  assert np.all(run.schedule == run.schedule[0])
  assert np.flatnonzero(run.schedule[0]).tolist() == [0, 16, 32]
  t = _targets(run, noise)
  assert t.scheduled_target == tree_targets.NODES
  assert t.schedules_mu == pytest.approx(t.node_mu, rel=1e-9)
  assert _targets(random, noise).scheduled_target == tree_targets.SCHEDULES
  # T of the ~2000 inserted canaries ~ N(mu, 1): the mean's SE is
  # 1/sqrt(2000) = 0.022; 4 SE (fixed seed). Random rounds reveal less.
  statistic = gls_statistics.scheduled_statistic(run.scores, run.schedule,
                                                 noise)
  assert abs(statistic[run.inserted].mean() - t.node_mu) < 4 * 0.022
  assert abs(statistic[~run.inserted].mean()) < 4 * 0.022
  assert _targets(random, noise).schedules_mu < t.node_mu - 0.3


def test_worst_case_placement_of_a_given_noise_and_of_the_efficient_tree():
  blt_noise = strategy_noise.strategy_noise(_BLT.coefficients(16), 48,
                                            restart_every=16)
  run = tree_simulation.simulate(_SETTING, seed=1, noise=blt_noise,
                                 placement="worst_case")
  assert np.flatnonzero(run.schedule[5]).tolist() == [0, 16, 32]
  assert _targets(run, blt_noise).scheduled_target == tree_targets.NODES
  efficient = tree_simulation.FtrlSetting(
      epochs=3, rounds_per_epoch=16, noise_multiplier=1.5, num_candidates=8,
      efficient=True, self_test_dim=2)
  run = tree_simulation.simulate(efficient, placement="worst_case")
  t = _targets(run, efficient.claimed_noise(), efficient)
  # The efficient tree's rounds reveal less than its nodes: ε-all by T then
  # targets the worst case, below the analytical ε.
  assert t.scheduled_target == tree_targets.WORST_CASE
  assert t.worst_case_mu < t.node_mu
  given = tree_simulation.simulate(efficient, placement=[3, 20, 47])
  assert np.flatnonzero(given.schedule[0]).tolist() == [3, 20, 47]
  for bad in ([3, 20], [3, 3, 47], "worst"):
    with pytest.raises(ValueError, match="placement"):
      tree_simulation.simulate(efficient, placement=bad)
  with pytest.raises(ValueError, match="restart after every epoch"):
    tree_simulation.simulate(
        efficient, placement="worst_case",
        noise=strategy_noise.strategy_noise(_BLT.coefficients(48), 48))
