"""gls_statistics on the tree, and tree_accounting: null laws, signals, and
the accounting.

Scores are drawn from their exact law u_j = a_j / z + B xi_j
(`gls_statistics` module docstring) with fixed seeds.
"""

import math

import dp_accounting
import numpy as np
import pytest
from scipy import stats
import tensorflow_privacy as tfp

from tff_canary.stats.accounting import gaussian_accounting
from tff_canary.stats.correlated import (gls_statistics, linear_noise,
                                         tree_accounting, tree_noise)

_NOISE = tree_noise.tree_noise(48, efficient=True, restart_period=16)


def _scores(participations, z, seed):
  rng = np.random.default_rng(seed)
  b = _NOISE.released
  return participations / z + rng.standard_normal(
      (participations.shape[0], b.shape[1])) @ b.T


def _one_per_epoch(m, seed):
  rng = np.random.default_rng(seed)
  a = np.zeros((m, 48), bool)
  for e in range(3):
    a[np.arange(m), 16 * e + rng.integers(0, 16, m)] = True
  return a


def test_scheduled_statistic_null_is_standard_normal():
  a = _one_per_epoch(20000, 1)
  t = gls_statistics.scheduled_statistic(_scores(np.zeros_like(a), 1.0, 2),
                                          a, _NOISE)
  # Exact N(0, 1) law: a KS p-value below 1e-3 would be a 1-in-1000 event.
  assert stats.kstest(t, "norm").pvalue > 1e-3


def test_scheduled_statistic_mean_is_schedule_mu():
  a = _one_per_epoch(20000, 3)
  z = 2.0
  t = gls_statistics.scheduled_statistic(_scores(a, z, 4), a, _NOISE)
  mu = gls_statistics.schedule_mu(a, _NOISE, noise_multiplier=z)
  # T - mu_j is exactly N(0, 1): its mean over 20000 has SE 0.007; 4 SE.
  assert abs(np.mean(t - mu)) < 4 / math.sqrt(a.shape[0])
  assert np.std(t - mu) == pytest.approx(1.0, abs=0.03)


def test_gls_reduces_to_independent_sums_for_independent_rounds():
  # With K = I the GLS statistic is sum_{S} u / sqrt(P), the statistic of
  # independent rounds (estimators.scheduled_sums), computed another way.
  rng = np.random.default_rng(5)
  u = rng.standard_normal((50, 12))
  a = rng.random((50, 12)) < 0.3
  a[:, 0] = True
  eye = linear_noise.linear_noise(np.eye(12))
  np.testing.assert_allclose(
      gls_statistics.scheduled_statistic(u, a, eye),
      (u * a).sum(axis=1) / np.sqrt(a.sum(axis=1)), rtol=1e-12)
  np.testing.assert_allclose(
      gls_statistics.independent_scheduled_statistic(u, a, eye),
      (u * a).sum(axis=1) / np.sqrt(a.sum(axis=1)), rtol=1e-12)


def test_round_statistics_are_unit_normal_per_round():
  u = _scores(np.zeros((20000, 48)), 1.0, 6)
  g = gls_statistics.round_statistics(u, _NOISE)
  # Per-round variance of 20000 N(0, 1): SE sqrt(2/20000) = 0.01; 5 SE over
  # 48 rounds.
  np.testing.assert_allclose(g.var(axis=0), 1.0, atol=0.05)
  np.testing.assert_allclose(
      gls_statistics.max_statistic(u, _NOISE), g.max(axis=1))


def test_independent_statistic_null_variance_is_not_one_within_a_tree():
  # Two rounds of the same tree: the released noises are correlated, so
  # the statistic of independent rounds has null variance 1_S^T R 1_S / 2.
  a = np.zeros((20000, 48), bool)
  a[:, [0, 1]] = True
  t = gls_statistics.independent_scheduled_statistic(
      _scores(np.zeros_like(a), 1.0, 7), a, _NOISE)
  claimed = gls_statistics.independent_null_variance(a, _NOISE)[0]
  assert abs(claimed - 1.0) > 0.2
  # Sample variance of 20000 normals: relative SE 1%; 5%.
  assert t.var() == pytest.approx(claimed, rel=0.05)


def test_epoch_counts_are_unbiased_with_the_stated_covariance():
  a = _one_per_epoch(20000, 8)
  a[:, 20] = True  # a second participation in epoch 1
  z = 1.5
  e = linear_noise.epoch_matrix(48, 16)
  n = gls_statistics.epoch_counts(_scores(a, z, 9), e, noise_multiplier=z)
  expected = a.astype(float) @ e
  cov = gls_statistics.epoch_count_covariance(_NOISE, e, noise_multiplier=z)
  residual = n - expected
  # Means: SE sqrt(cov_ee / 20000); 4 SE.
  assert np.all(np.abs(residual.mean(axis=0))
                < 4 * np.sqrt(np.diag(cov) / 20000))
  np.testing.assert_allclose(np.cov(residual.T), cov, rtol=0.05, atol=0.05)


def test_schedule_mu_is_below_the_node_release():
  # The released rounds are a post-processing of the node values.
  z = 1.3
  a = _one_per_epoch(500, 10)
  mu = gls_statistics.schedule_mu(a, _NOISE, noise_multiplier=z)
  assert np.all(mu <= tree_accounting.node_mu(z, [16, 16, 16]) + 1e-12)
  assert np.all(mu > 0)


def test_a_float_or_integer_0_1_schedule_is_the_boolean_one():
  a = _one_per_epoch(30, 11)
  u = _scores(a, 2.0, 12)
  for same in (a.astype(np.float32), a.astype(np.float64), a.astype(int)):
    np.testing.assert_array_equal(
        gls_statistics.schedule_mu(same, _NOISE, noise_multiplier=2.0),
        gls_statistics.schedule_mu(a, _NOISE, noise_multiplier=2.0))
    np.testing.assert_array_equal(
        gls_statistics.scheduled_statistic(u, same, _NOISE),
        gls_statistics.scheduled_statistic(u, a, _NOISE))


def test_worst_case_mu_is_the_largest_schedule_mu():
  # Every schedule of one round per epoch (16 x 16 x 16 = 4096), enumerated:
  # its largest schedule_mu is worst_case_mu (another method: no
  # block-diagonal shortcut).
  rounds = np.array(np.meshgrid(np.arange(16), 16 + np.arange(16),
                                32 + np.arange(16))).reshape(3, -1).T
  a = np.zeros((rounds.shape[0], 48), bool)
  a[np.arange(rounds.shape[0])[:, None], rounds] = True
  z = 1.7
  assert _NOISE.worst_case_mu(z) == pytest.approx(
      gls_statistics.schedule_mu(a, _NOISE, noise_multiplier=z).max(),
      rel=1e-12)


@pytest.mark.parametrize("rounds,per", [(64, 64), (100, 100), (48, 16),
                                        (40, 16), (7, 7)])
def test_plain_tree_rounds_release_what_its_nodes_do(rounds, per):
  # The plain tree's accounting is exact for the rounds: round 0 of a tree
  # lies on a path of h nodes, each released alone. The efficient tree's
  # rounds release less than its nodes (Honaker's reweighting).
  sizes = [per] * (rounds // per) + [rounds % per] * (rounds % per > 0)
  node = tree_accounting.node_mu(1.0, sizes)
  for efficient in (False, True):
    k = tree_noise.tree_noise(rounds, efficient=efficient,
                              restart_period=per)
    assert k.release_mu(1.0) == node
    worst = k.worst_case_mu(1.0)
    if efficient:
      assert worst < node
    else:
      assert worst == pytest.approx(node, rel=1e-9)
      a = np.zeros((1, rounds), bool)
      a[0, ::per] = True  # round 0 of every tree
      assert gls_statistics.schedule_mu(
          a, k, noise_multiplier=1.0)[0] == pytest.approx(node, rel=1e-9)


def test_epoch_matrix():
  e = linear_noise.epoch_matrix(7, 3)
  np.testing.assert_array_equal(e.sum(axis=0), [3, 3, 1])
  np.testing.assert_array_equal(e.sum(axis=1), 1)


@pytest.mark.parametrize("call,error,match", [
    (lambda: gls_statistics.scheduled_statistic(
        np.zeros((2, 48)), np.full((2, 48), "1"), _NOISE), TypeError,
     "Boolean"),
    (lambda: gls_statistics.schedule_mu(
        np.full((2, 48), 0.5), _NOISE, noise_multiplier=1.0), ValueError,
     r"only 0 and 1.*schedule\[0, 0\] = 0.5"),
    (lambda: gls_statistics.schedule_mu(
        np.where(np.eye(2, 48) > 0, np.nan, 1.0), _NOISE,
        noise_multiplier=1.0),
     ValueError, r"schedule\[0, 0\] = nan"),
    (lambda: _NOISE.epochs(24), ValueError, "restart after every epoch"),
    (lambda: _NOISE.worst_case_mu(0.0), ValueError, "noise_multiplier"),
    (lambda: _NOISE.with_coefficients(np.ones((48, 1))).worst_case_mu(1.0),
     ValueError, "rounds of different blocks"),
    (lambda: gls_statistics.scheduled_statistic(
        np.zeros((2, 47)), np.ones((2, 47), bool), _NOISE), ValueError,
     "48 rounds"),
    (lambda: gls_statistics.scheduled_statistic(
        np.zeros((2, 48)), np.zeros((2, 48), bool), _NOISE), ValueError,
     r"schedule\[0\] has no round"),
    (lambda: gls_statistics.max_statistic(
        np.zeros((2, 2)), linear_noise.linear_noise(np.ones((2, 1)))),
     ValueError, "positive definite"),
    (lambda: gls_statistics.max_statistic(np.zeros((2, 48)), _NOISE.covariance),
     TypeError, "LinearNoise"),
    (lambda: gls_statistics.scheduled_statistic(
        np.zeros((2, 48)), np.ones((3, 48), bool), _NOISE), ValueError,
     r"expected \[2, 48\]"),
    (lambda: gls_statistics.schedule_mu(
        np.ones((2, 48), bool), _NOISE, noise_multiplier=0.0), ValueError,
     "noise_multiplier"),
])
def test_bad_arguments(call, error, match):
  with pytest.raises(error, match=match):
    call()


# --- tree_accounting -------------------------------------------------------

@pytest.mark.parametrize("steps", [1, 2, 3, 7, 8, 9, 1024])
def test_tree_depth_matches_tensorflow_privacy(steps):
  # tensorflow_privacy's worst-case count of a sample's nodes (a dynamic
  # program, another method): one participation gives rho = depth / (2 z^2).
  rho = tfp.compute_zcdp_single_tree(1.0, steps, 1, 0)
  assert tree_accounting.tree_depth(steps) == pytest.approx(2 * rho)


def test_epsilons_agree_with_independent_computations():
  z, steps, delta = 2.5, [64, 64, 64, 32], 1e-5
  result = tree_accounting.tree_epsilons(z, steps, delta=delta)
  depth = 7 + 7 + 7 + 6
  assert result.mu == pytest.approx(math.sqrt(depth) / z, rel=1e-12)
  # The node release is a Gaussian mechanism of noise multiplier
  # z / sqrt(depth): its exact epsilon, another way.
  assert result.epsilon == pytest.approx(
      gaussian_accounting.gaussian_epsilon(z / math.sqrt(depth), delta),
      rel=1e-9)
  # RDP: the same mechanism as one Gaussian event under dp-accounting.
  rdp = dp_accounting.rdp.RdpAccountant()
  rdp.compose(dp_accounting.GaussianDpEvent(z / math.sqrt(depth)))
  assert result.rdp_epsilon == pytest.approx(rdp.get_epsilon(delta),
                                             rel=1e-9)
  assert result.epsilon < result.rdp_epsilon


def test_tree_epsilons_bad_arguments():
  with pytest.raises(TypeError, match="rounds_per_tree"):
    tree_accounting.tree_epsilons(1.0, 64, delta=1e-5)
  with pytest.raises(ValueError, match="noise_multiplier"):
    tree_accounting.tree_epsilons(0.0, [64], delta=1e-5)
  with pytest.raises(ValueError, match="delta"):
    tree_accounting.tree_epsilons(1.0, [64], delta=1.0)
