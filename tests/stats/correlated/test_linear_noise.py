"""The correlated-noise statistics hold for any known B, not only the tree's.

A matrix mechanism in DP-FTRL's streaming form releases y = x + C^-1 xi
(docs/method/dp-ftrl.md): a square B = C^-1, one node per round. These tests
run such a B (a random lower-triangular one, and the inverse of the banded
square-root strategy, restarted every epoch) through the statistics, the
targets and the audit, against closed forms that do not use K.
"""

import dataclasses
import itertools
import math

import numpy as np
import pytest
from scipy import special, stats

from tff_canary.stats.correlated import (gls_statistics, linear_noise,
                                         tree_audit, tree_noise,
                                         tree_simulation, tree_targets)


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


def _random_lower_triangular(n: int, seed: int) -> np.ndarray:
  """A random lower-triangular invertible B (diagonal kept away from 0)."""
  rng = np.random.default_rng(seed)
  b = np.tril(rng.normal(size=(n, n)))
  b[np.diag_indices(n)] = 1.0 + rng.random(n)
  return b


def test_scheduled_mu_is_the_norm_of_b_inverse_a():
  # mu_j = sqrt(a^T K^-1 a) / z = ||B^-1 a|| / z for a square invertible B.
  rng = np.random.default_rng(0)
  n, z = 12, 1.7
  b = _random_lower_triangular(n, seed=0)
  noise = linear_noise.linear_noise(b)
  assert noise.num_blocks == 1 and noise.num_nodes == n
  schedule = rng.random((20, n)) < 0.3
  schedule[:, 0] = True
  mu = gls_statistics.schedule_mu(schedule, noise, noise_multiplier=z)
  expected = np.linalg.norm(np.linalg.solve(b, schedule.T.astype(float)),
                            axis=0) / z
  np.testing.assert_allclose(mu, expected, rtol=1e-9)


def test_gls_statistics_of_a_random_b_follow_their_law_in_a_simulated_run():
  # A non-tree B (random lower-triangular, 12 rounds, one block: the noise
  # correlates every round with the ones before) through the functions the
  # tree's audit uses: the simulated run (tree_simulation.simulate), T_j and
  # mu_j. T_j is exactly N(mu_j, 1) for an inserted canary, N(0, 1) for a
  # held-out one, mu_j = sqrt(a_j^T K^-1 a_j) / z.
  noise = linear_noise.linear_noise(_random_lower_triangular(12, seed=5))
  setting = tree_simulation.FtrlSetting(
      epochs=3, rounds_per_epoch=4, noise_multiplier=0.5,
      num_candidates=4000, self_test_dim=2)
  run = tree_simulation.simulate(setting, noise=noise, seed=6)
  t_stat = gls_statistics.scheduled_statistic(run.scores, run.schedule, noise)
  mu = gls_statistics.schedule_mu(run.schedule, noise, noise_multiplier=0.5)
  inserted = run.inserted
  # The canaries' means differ (their schedules reveal different amounts),
  # so this is a real check of mu_j, not of one common shift.
  assert mu[inserted].std() > 0.5
  # About 2000 canaries each: a mean is off by 0.09 (4 standard errors of
  # 1 / sqrt(2000) = 0.022) with probability 6e-5, a variance by 0.15 (4.7
  # of its sqrt(2 / 2000) = 0.032) less often, and a KS p-value of an exact
  # N(0, 1) sample is below 1e-3 with probability 1e-3; the seed is fixed.
  for values in (t_stat[~inserted], t_stat[inserted] - mu[inserted]):
    assert abs(values.mean()) < 0.09
    assert abs(values.var() - 1.0) < 0.15
    assert stats.kstest(values, "norm").pvalue > 1e-3
  # The round statistics: N(0, 1) per round under the null (2000 held out:
  # variance SE 0.032 per round; 0.15 over 12 rounds).
  g = gls_statistics.round_statistics(run.scores[~inserted], noise)
  np.testing.assert_allclose(g.var(axis=0), 1.0, atol=0.15)


def test_blocks_are_read_from_b_and_the_release_is_the_worst_case():
  noise = linear_noise.linear_noise(_B)
  np.testing.assert_array_equal(noise.round_block,
                                np.arange(_PER * _EPOCHS) // _PER)
  assert noise.block_starts() == [0, 8, 16]
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
  assert math.isclose(noise.release_mu(z), best / z, rel_tol=1e-9)
  claim = noise.claim(z, delta=1e-5)
  assert claim.mu == noise.release_mu(z) == noise.worst_case_mu(z)
  assert claim.rounds_per_block == (8, 8, 8)


def test_blocks_of_a_b_whose_blocks_interleave():
  # Rounds 0 and 2 share a node, 1 and 3 another: two blocks, numbered in
  # order of their first round, not contiguous.
  b = np.array([[1.0, 0.0], [0.0, 1.0], [2.0, 0.0], [0.0, 3.0]])
  np.testing.assert_array_equal(linear_noise.linear_noise(b).round_block,
                                [0, 1, 0, 1])


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


_MATRIX = tree_simulation.FtrlSetting(
    epochs=_EPOCHS, rounds_per_epoch=_PER, noise_multiplier=1.0,
    num_candidates=4000, self_test_dim=1000)


def test_the_statistics_follow_their_laws_under_a_matrix_mechanism():
  noise = linear_noise.linear_noise(_B)
  run = tree_simulation.simulate(_MATRIX, noise=noise, seed=2)
  t_stat = gls_statistics.scheduled_statistic(run.scores, run.schedule, noise)
  mu = gls_statistics.schedule_mu(run.schedule, noise, noise_multiplier=1.0)
  # Held-out T ~ N(0, 1), inserted T - mu_j ~ N(0, 1), about 2000 each: a
  # mean is off by 4 / sqrt(2000) = 0.09 (4 standard errors) with
  # probability 6e-5, a variance by 0.15 (about 4.7 of its standard errors,
  # sqrt(2 / 2000) = 0.032) far less often; the seed is fixed.
  for values in (t_stat[~run.inserted],
                 t_stat[run.inserted] - mu[run.inserted]):
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
  setting = dataclasses.replace(_MATRIX, num_candidates=400)
  run = tree_simulation.simulate(setting, noise=noise, seed=4)
  kw = dict(noise=noise, rounds_per_epoch=_PER, noise_multiplier=1.0,
            delta=1e-5)
  verdict = tree_audit.audit_ftrl(run.scores, run.schedule, run.inserted,
                                  self_test_noise=run.self_test_noise, **kw)
  # A correct mechanism: each check at level 0.05 / 3; the seed is fixed.
  assert not verdict.refuted, str(verdict)
  assert isinstance(verdict.claim, linear_noise.LinearEpsilons)
  # The unbanded square root (a different C) released instead: the same
  # per-round scale at round 0, other correlations.
  unbanded = _restarted(_toeplitz_inverse(_banded_sqrt_strategy(_PER, 8)),
                        _EPOCHS)
  wrong = unbanded @ np.random.default_rng(4).standard_normal((24, 1000))
  verdict = tree_audit.audit_ftrl(run.scores, run.schedule, run.inserted,
                                  self_test_noise=wrong, **kw)
  assert "self-test" in verdict.caught_by, str(verdict)
  # A client counted twice per epoch, under the same B: the contribution.
  twice = tree_simulation.simulate(setting, noise=noise, seed=4,
                                   bug="double_participation")
  verdict = tree_audit.audit_ftrl(twice.scores, twice.schedule,
                                  twice.inserted, **kw)
  assert "contribution" in verdict.caught_by, str(verdict)


def test_the_tree_is_a_linear_noise_with_its_blocks():
  tree = tree_noise.tree_noise(24, restart_period=8)
  assert isinstance(tree, linear_noise.LinearNoise)
  inferred = linear_noise.linear_noise(tree.released)
  np.testing.assert_array_equal(inferred.round_block, tree.round_block)
  # The tree's release is its nodes' (its own accounting), above the rounds'
  # worst case for the efficient tree.
  assert tree.release_mu(1.0) > tree.worst_case_mu(1.0)


def test_bad_arguments():
  with pytest.raises(ValueError, match="released"):
    linear_noise.linear_noise(np.ones(3))
  with pytest.raises(ValueError, match="round_block"):
    linear_noise.linear_noise(np.eye(3), round_block=[0, 1])
  with pytest.raises(ValueError, match="share node 0"):
    linear_noise.linear_noise(np.ones((2, 1)), round_block=[0, 1])
  wide = linear_noise.linear_noise(np.hstack([np.eye(4), np.eye(4)]))
  with pytest.raises(ValueError, match="own"):
    wide.release_mu(1.0)
  noise = linear_noise.linear_noise(_B)
  with pytest.raises(ValueError, match="restart after every epoch"):
    noise.epochs(12)
  with pytest.raises(ValueError, match="plants a bug in the tree"):
    tree_simulation.simulate(_MATRIX, noise=noise, bug="missing_level")
  with pytest.raises(ValueError, match="noise has 24 rounds"):
    tree_simulation.simulate(dataclasses.replace(_MATRIX, epochs=2),
                             noise=noise)
