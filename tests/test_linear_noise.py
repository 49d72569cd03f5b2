"""The correlated-noise statistics hold for any known B, not only the tree's.

A matrix mechanism in DP-FTRL's streaming form releases y = x + C^-1 xi
(docs/method/dp-ftrl.md): a square B = C^-1, one node per round. These tests
run such a B (a random lower-triangular one, and the inverse of the banded
square-root strategy, restarted every epoch) through the statistics, the
targets and the audit, against closed forms that do not use K.
"""

import itertools
import math

import numpy as np
import pytest
from scipy import special

from tff_canary.stats.correlated import (linear_noise, tree_audit,
                                         tree_noise, tree_statistics,
                                         tree_targets)


def _banded_sqrt_strategy(n: int, bands: int) -> np.ndarray:
  """C, [n, n] lower-triangular Toeplitz, c_i = binom(2i, i) / 4^i for
  i < bands (the square root of the prefix-sum matrix, banded)."""
  c = np.array([special.comb(2 * i, i) / 4.0**i if i < bands else 0.0
                for i in range(n)])
  return np.array([[c[t - s] if t >= s else 0.0 for s in range(n)]
                   for t in range(n)])


def _toeplitz_inverse(strategy: np.ndarray) -> np.ndarray:
  """C^-1 from the coefficients of 1 / c(x) (a Toeplitz C's inverse)."""
  c = strategy[:, 0]
  d = np.zeros_like(c)
  d[0] = 1.0 / c[0]
  for i in range(1, c.size):
    d[i] = -np.dot(c[1:i + 1], d[i - 1::-1][:i]) / c[0]
  n = c.size
  return np.array([[d[t - s] if t >= s else 0.0 for s in range(n)]
                   for t in range(n)])


def _restarted(block: np.ndarray, epochs: int) -> np.ndarray:
  """The mechanism restarted every epoch: block-diagonal."""
  n = block.shape[0]
  out = np.zeros((n * epochs, n * epochs))
  for e in range(epochs):
    out[e * n:(e + 1) * n, e * n:(e + 1) * n] = block
  return out


_PER, _EPOCHS = 8, 3
_C = _banded_sqrt_strategy(_PER, bands=4)
_B = _restarted(_toeplitz_inverse(_C), _EPOCHS)


def test_the_toeplitz_inverse_is_the_inverse():
  np.testing.assert_allclose(_toeplitz_inverse(_C) @ _C, np.eye(_PER),
                             atol=1e-12)


def test_scheduled_mu_is_the_norm_of_b_inverse_a():
  # mu_j = sqrt(a^T K^-1 a) / z = ||B^-1 a|| / z for a square invertible B,
  # here a random lower-triangular one (diagonal kept away from 0).
  rng = np.random.default_rng(0)
  n, z = 12, 1.7
  b = np.tril(rng.normal(size=(n, n)))
  b[np.diag_indices(n)] = 1.0 + rng.random(n)
  noise = linear_noise.linear_noise(b)
  assert noise.num_blocks == 1 and noise.num_nodes == n
  schedule = rng.random((20, n)) < 0.3
  schedule[:, 0] = True
  mu = tree_statistics.schedule_mu(schedule, noise.covariance,
                                   noise_multiplier=z)
  expected = np.linalg.norm(np.linalg.solve(b, schedule.T.astype(float)),
                            axis=0) / z
  np.testing.assert_allclose(mu, expected, rtol=1e-9)


def test_blocks_are_read_from_b_and_the_release_is_the_worst_case():
  noise = linear_noise.linear_noise(_B)
  np.testing.assert_array_equal(noise.round_block,
                                np.arange(_PER * _EPOCHS) // _PER)
  assert noise.block_starts() == [0, 8, 16]
  epochs = tree_statistics.epoch_matrix(_PER * _EPOCHS, _PER)
  z = 0.9
  # The b-min-sep / once-per-epoch worst case of a restarted strategy,
  # enumerated: max over one round per epoch of ||C a|| / z (METHOD.md §13),
  # which for this Toeplitz C with non-increasing coefficients is round 0.
  full_c = _restarted(_C, _EPOCHS)
  best = max(np.linalg.norm(full_c @ np.isin(np.arange(24), [t, 8 + s,
                                                             16 + r]))
             for t, s, r in itertools.product(range(_PER), repeat=3))
  assert math.isclose(best, math.sqrt(3) * np.linalg.norm(_C[:, 0]),
                      rel_tol=1e-12)
  assert math.isclose(noise.release_mu(z, epochs), best / z, rel_tol=1e-9)
  claim = noise.claim(z, epochs, delta=1e-5)
  assert claim.mu == noise.release_mu(z, epochs)
  assert claim.rounds_per_block == (8, 8, 8)


def test_targets_of_a_square_b_put_the_node_release_at_the_worst_case():
  noise = linear_noise.linear_noise(_B)
  rng = np.random.default_rng(1)
  schedule = np.zeros((40, 24), bool)
  for e in range(_EPOCHS):
    schedule[np.arange(40), e * _PER + rng.integers(0, _PER, 40)] = True
  inserted = rng.random(40) < 0.5
  targets = tree_targets.tree_targets(noise, schedule, inserted,
                                      rounds_per_epoch=_PER,
                                      noise_multiplier=1.0, delta=1e-5)
  assert math.isclose(targets.node_mu, targets.worst_case_mu, rel_tol=1e-9)
  assert targets.largest_schedule_mu <= targets.worst_case_mu * (1 + 1e-9)


def _simulated_run(b, m, z, seed):
  """u_j = a_j / z + B xi_j, one round per epoch, fair coins."""
  rng = np.random.default_rng(seed)
  schedule = np.zeros((m, b.shape[0]), bool)
  for e in range(b.shape[0] // _PER):
    schedule[np.arange(m), e * _PER + rng.integers(0, _PER, m)] = True
  inserted = rng.random(m) < 0.5
  scores = (schedule & inserted[:, None]) / z + rng.standard_normal(
      (m, b.shape[1])) @ b.T
  return scores, schedule, inserted, rng


def test_the_statistics_follow_their_laws_under_a_matrix_mechanism():
  noise = linear_noise.linear_noise(_B)
  z = 1.0
  scores, schedule, inserted, _ = _simulated_run(_B, 4000, z, seed=2)
  t_stat = tree_statistics.scheduled_statistic(scores, schedule,
                                               noise.covariance)
  mu = tree_statistics.schedule_mu(schedule, noise.covariance,
                                   noise_multiplier=z)
  # Held-out T ~ N(0, 1), inserted T - mu_j ~ N(0, 1), about 2000 each: a
  # mean is off by 4 / sqrt(2000) = 0.09 (4 standard errors) with
  # probability 6e-5, a variance by 0.15 (about 4.7 of its standard errors,
  # sqrt(2 / 2000) = 0.032) far less often; the seed is fixed.
  for values in (t_stat[~inserted], t_stat[inserted] - mu[inserted]):
    assert abs(values.mean()) < 0.09
    assert abs(values.var() - 1.0) < 0.15


def test_whitening_b_xi_gives_iid_standard_normal():
  noise = linear_noise.linear_noise(_B)
  rng = np.random.default_rng(3)
  d = 4000
  white = noise.whiten(_B @ rng.standard_normal((_B.shape[1], d)))
  # 24 x 24 sample covariance of 4000 iid N(0, 1) columns: each entry's
  # standard error is 1 / sqrt(4000) = 0.016 (the diagonal's 0.022); 0.1 is
  # 4.5 of the diagonal's and 6 of the others', for 300 distinct entries.
  np.testing.assert_allclose(white @ white.T / d, np.eye(24), atol=0.1)
  assert abs(white.mean()) < 0.01   # 96000 values: standard error 0.0032


def test_the_audit_of_a_matrix_mechanism_catches_a_wrong_b():
  noise = linear_noise.linear_noise(_B)
  z = 1.0
  scores, schedule, inserted, rng = _simulated_run(_B, 400, z, seed=4)
  kw = dict(noise=noise, rounds_per_epoch=_PER, noise_multiplier=z,
            delta=1e-5)
  right = _B @ rng.standard_normal((24, 1000))
  verdict = tree_audit.audit_ftrl(scores, schedule, inserted,
                                  self_test_noise=right, **kw)
  # A correct mechanism: each check at level 0.05 / 3; the seed is fixed.
  assert not verdict.refuted, str(verdict)
  assert isinstance(verdict.claim, linear_noise.LinearEpsilons)
  # The unbanded square root (a different C) released instead: the same
  # per-round scale at round 0, other correlations.
  unbanded = _restarted(_toeplitz_inverse(_banded_sqrt_strategy(_PER, 8)),
                        _EPOCHS)
  wrong = unbanded @ rng.standard_normal((24, 1000))
  verdict = tree_audit.audit_ftrl(scores, schedule, inserted,
                                  self_test_noise=wrong, **kw)
  assert "self-test" in verdict.caught_by, str(verdict)


def test_the_tree_is_a_linear_noise_with_its_blocks():
  tree = tree_noise.tree_noise(24, restart_period=8)
  assert isinstance(tree, linear_noise.LinearNoise)
  inferred = linear_noise.linear_noise(tree.released)
  np.testing.assert_array_equal(inferred.round_block, tree.round_tree)
  # The tree's release is its nodes' (its own accounting), above the rounds'
  # worst case for the efficient tree.
  epochs = tree_statistics.epoch_matrix(24, 8)
  assert tree.release_mu(1.0, epochs) > tree_statistics.worst_case_mu(
      tree.covariance, epochs, noise_multiplier=1.0)


def test_bad_arguments():
  with pytest.raises(ValueError, match="released"):
    linear_noise.linear_noise(np.ones(3))
  with pytest.raises(ValueError, match="round_block"):
    linear_noise.linear_noise(np.eye(3), round_block=[0, 1])
  with pytest.raises(ValueError, match="share node 0"):
    linear_noise.linear_noise(np.ones((2, 1)), round_block=[0, 1])
  wide = linear_noise.linear_noise(np.hstack([np.eye(4), np.eye(4)]))
  with pytest.raises(ValueError, match="own"):
    wide.release_mu(1.0, tree_statistics.epoch_matrix(4, 4))
