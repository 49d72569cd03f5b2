"""tree_targets: the three epsilons of a DP-FTRL run, each checked two ways."""

import numpy as np
import pytest

from tff_canary.stats.accounting import gaussian_accounting
from tff_canary.stats.correlated import (gls_statistics, tree_accounting,
                                         tree_noise, tree_simulation,
                                         tree_targets)

_SETTING = tree_simulation.FtrlSetting(
    epochs=4, rounds_per_epoch=64, noise_multiplier=2.0, num_candidates=200,
    self_test_dim=2)


def _targets(setting, seed=0):
  run = tree_simulation.simulate(setting, seed=seed)
  return run, tree_targets.tree_targets(
      setting.claimed_noise(), run.schedule, run.inserted,
      rounds_per_epoch=setting.rounds_per_epoch,
      noise_multiplier=setting.noise_multiplier, delta=1e-5)


@pytest.mark.parametrize("efficient", [True, False])
def test_the_three_epsilons_are_ordered_and_are_what_they_say(efficient):
  setting = tree_simulation.FtrlSetting(
      epochs=4, rounds_per_epoch=64, noise_multiplier=2.0, num_candidates=200,
      efficient=efficient, self_test_dim=2)
  run, t = _targets(setting)
  claim = tree_accounting.tree_epsilons(2.0, [64] * 4, delta=1e-5)
  assert t.node_epsilon == pytest.approx(claim.epsilon, rel=1e-12)
  mu_j = gls_statistics.schedule_mu(
      run.schedule[run.inserted], setting.claimed_noise(),
      noise_multiplier=2.0)
  assert t.schedules_mu == pytest.approx(mu_j.mean(), rel=1e-12)
  assert t.largest_schedule_mu == pytest.approx(mu_j.max(), rel=1e-12)
  assert t.schedules_mu < t.largest_schedule_mu <= t.worst_case_mu
  assert t.worst_case_mu <= t.node_mu + 1e-12
  # The plain tree's accounting is exact for the rounds; the efficient
  # tree's has slack (test_gls_statistics).
  assert (t.worst_case_mu < t.node_mu) == efficient
  eps = t.epsilons()
  assert list(eps) == [tree_targets.NODES, tree_targets.WORST_CASE,
                       tree_targets.SCHEDULES, tree_targets.FINAL]
  for name, mu in t.mus().items():
    assert eps[name] == pytest.approx(
        gaussian_accounting.gaussian_epsilon_of_mu(mu, 1e-5), rel=1e-12)
  assert t.as_dict()["worst_case_epsilon"] == t.worst_case_epsilon


def test_final_model_of_plain_trees_of_64_rounds():
  # The plain tree's prefix noise after 64 = 2^6 rounds is one node (the
  # root), so the final model of 4 such trees has noise variance 4 sigma^2
  # and holds a canary's 4 participations: mu = 4 / (2 z) = 2 / z.
  plain = tree_simulation.FtrlSetting(
      epochs=4, rounds_per_epoch=64, noise_multiplier=2.0, num_candidates=200,
      efficient=False, self_test_dim=2)
  _, t = _targets(plain)
  assert t.final_mu == pytest.approx(2.0 / 2.0, rel=1e-12)


def test_bad_arguments():
  run = tree_simulation.simulate(_SETTING, seed=1)
  noise = _SETTING.claimed_noise()
  kw = dict(rounds_per_epoch=64, noise_multiplier=2.0, delta=1e-5)
  with pytest.raises(TypeError, match="LinearNoise"):
    tree_targets.tree_targets(noise.covariance, run.schedule, run.inserted,
                              **kw)
  with pytest.raises(ValueError, match="inserted"):
    tree_targets.tree_targets(noise, run.schedule, run.inserted[:3], **kw)
  with pytest.raises(ValueError, match="inserted"):
    tree_targets.tree_targets(noise, run.schedule,
                              np.zeros(run.inserted.size, bool), **kw)
  with pytest.raises(ValueError, match="restart after every epoch"):
    tree_targets.tree_targets(tree_noise.tree_noise(256), run.schedule,
                              run.inserted, **kw)
  with pytest.raises(ValueError, match="delta"):
    tree_targets.tree_targets(noise, run.schedule, run.inserted,
                              rounds_per_epoch=64, noise_multiplier=2.0,
                              delta=0.0)
