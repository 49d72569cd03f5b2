"""Sensitivity under b-min-separated participation: structure against enumeration.

The structural worst case (k participations b apart from round 0; Kalinin &
Lampert 2024, Thm 2) must equal the exhaustive maximum over all allowed
patterns on every small case, and its conditions are checked, not assumed.
The reference numbers are jax_privacy 2.0.0's
`toeplitz.minsep_sensitivity_squared` (docs/method/matrix-mechanisms.md),
printed to 4 decimals. Also: a canary's mu_a = ||C a|| / z equals the GLS
sqrt(a^T K^-1 a) / z of the strategy's `LinearNoise`, and the analytical
epsilon is the exact GDP epsilon of sens / z.
"""

import numpy as np
import pytest

from tff_canary.stats.accounting import gaussian_accounting
from tff_canary.stats.correlated import gls_statistics, tree_noise
from tff_canary.stats.matrix import (analytical, blt, sensitivity,
                                     strategy_noise, toeplitz)

_STRATEGIES = {
    "sqrt, 1 band": toeplitz.square_root_coefficients(1),
    "sqrt, 2 bands": toeplitz.square_root_coefficients(2),
    "sqrt, 5 bands": toeplitz.square_root_coefficients(5),
    "sqrt, full": toeplitz.square_root_coefficients(16),
    "blt, 2 buffers": blt.blt([0.3, 0.1], [0.5, 0.95]).coefficients(16),
    "blt, 3 buffers": blt.blt([0.2, 0.15, 0.05],
                              [0.3, 0.8, 0.99]).coefficients(16),
}


@pytest.mark.parametrize("name", sorted(_STRATEGIES))
def test_structure_equals_enumeration_on_small_cases(name):
  c = _STRATEGIES[name]
  for n in (6, 11, 16):
    dense = toeplitz.strategy_matrix(c, n)
    for k in (1, 2, 3, 5):
      for b in (1, 2, 3, 5, 8):
        fast = sensitivity.toeplitz_sensitivity(
            c, rounds=n, participations=k, separation=b)
        slow = sensitivity.enumerated_sensitivity(
            dense, participations=k, separation=b)
        assert fast.method == "structure"
        assert fast.value == pytest.approx(slow.value, rel=1e-12), (n, k, b)
        # The returned pattern is allowed and attains the value.
        rounds = np.flatnonzero(fast.pattern)
        assert rounds.size <= k and np.all(np.diff(rounds) >= b)
        assert np.linalg.norm(dense @ fast.pattern) == pytest.approx(
            fast.value, rel=1e-12)


def test_structure_equals_enumeration_for_random_nonincreasing_coefficients():
  # The theorem's condition alone (nonnegative, non-increasing), on
  # sequences no strategy family produces: sorted uniforms, some with zeros
  # (banded) and plateaus (ties).
  rng = np.random.default_rng(5)
  for trial in range(12):
    c = np.sort(rng.random(13))[::-1]
    c[rng.integers(1, 13):] *= trial % 2  # every other trial banded
    if trial % 3 == 0:
      c[2:5] = c[2]  # a plateau
    for n in (7, 13):
      dense = toeplitz.strategy_matrix(c, n)
      for k in (2, 3, 4):
        for b in (1, 2, 4):
          fast = sensitivity.toeplitz_sensitivity(
              c, rounds=n, participations=k, separation=b, fallback=False)
          slow = sensitivity.enumerated_sensitivity(
              dense, participations=k, separation=b)
          assert fast.value == pytest.approx(slow.value, rel=1e-12), (
              trial, n, k, b)


def test_allowed_patterns_are_exactly_the_rules():
  patterns = sensitivity.allowed_patterns(7, 2, 3)
  # One round: 7; two rounds >= 3 apart: pairs (i, j), j - i >= 3: 4+3+2+1.
  assert patterns.shape == (7 + 10, 7)
  assert len({p.tobytes() for p in patterns}) == patterns.shape[0]
  for p in patterns:
    rounds = np.flatnonzero(p)
    assert 1 <= rounds.size <= 2 and np.all(np.diff(rounds) >= 3)


def test_one_per_epoch_is_not_epoch_min_separation():
  n, e, k = 16, 4, 4
  patterns = sensitivity.allowed_patterns(n, k, 1, rounds_per_epoch=e)
  counts = patterns.reshape(-1, n // e, e).sum(axis=2)
  assert counts.max() == 1 and patterns.shape[0] == 5**4 - 1  # 4 or none
  c = toeplitz.square_root_coefficients(4)
  per_epoch = sensitivity.enumerated_sensitivity(
      toeplitz.strategy_matrix(c, n), participations=k, separation=1,
      rounds_per_epoch=e)
  separated = sensitivity.toeplitz_sensitivity(
      c, rounds=n, participations=k, separation=e)
  # The worst participant ends one epoch and starts the next.
  assert np.min(np.diff(np.flatnonzero(per_epoch.pattern))) == 1
  assert per_epoch.value > 1.2 * separated.value  # 3.03 against 2.44
  assert "one per epoch of 4" in str(per_epoch)


def test_one_participation_is_the_largest_column_norm():
  rng = np.random.default_rng(3)
  dense = np.tril(rng.normal(size=(9, 9)))  # any C, not Toeplitz
  single = sensitivity.enumerated_sensitivity(dense, participations=1,
                                              separation=1)
  assert single.value == pytest.approx(np.linalg.norm(dense, axis=0).max())
  for name, c in _STRATEGIES.items():
    fast = sensitivity.toeplitz_sensitivity(c, rounds=16, participations=1,
                                            separation=4)
    assert fast.value == pytest.approx(toeplitz.column_norms(c, 16).max(),
                                       rel=1e-14), name
    assert np.flatnonzero(fast.pattern).tolist() == [0]


@pytest.mark.parametrize("bands,expected", [(4, 2.4399), (16, 2.7885),
                                            (64, 3.0912), (256, 4.1810)])
def test_jax_privacy_reference_numbers(bands, expected):
  c = toeplitz.square_root_coefficients(bands)
  found = sensitivity.toeplitz_sensitivity(c, rounds=256, participations=4,
                                           separation=64)
  assert found.value == pytest.approx(expected, abs=5e-5)  # 4 decimals
  assert np.flatnonzero(found.pattern).tolist() == [0, 64, 128, 192]
  if bands <= 64:  # the columns of the pattern do not overlap
    assert found.value == pytest.approx(2 * np.linalg.norm(c), rel=1e-14)


def test_conditions_are_checked_not_assumed():
  # Rising coefficients: the greedy pattern is not the worst case here.
  c = [1.0, 0.0, 0.0, 0.9]
  n = 10
  found = sensitivity.toeplitz_sensitivity(c, rounds=n, participations=2,
                                           separation=1)
  assert found.method == "enumeration"
  exact = sensitivity.enumerated_sensitivity(
      toeplitz.strategy_matrix(c, n), participations=2, separation=1)
  assert found.value == exact.value
  greedy = np.linalg.norm(toeplitz.strategy_matrix(c, n) @ np.eye(n)[0:2].sum(
      axis=0))
  assert found.value > greedy + 0.1
  with pytest.raises(ValueError, match="rise from c_2 = 0.0 to c_3 = 0.9; "
                     "enumeration needs rounds <= 20, got 40"):
    sensitivity.toeplitz_sensitivity(c, rounds=40, participations=2,
                                     separation=1)
  with pytest.raises(ValueError, match=r"c_1 = -0.5 is negative; enumeration "
                     r"was not allowed \(fallback=False\)"):
    sensitivity.toeplitz_sensitivity([1.0, -0.5], rounds=6, participations=2,
                                     separation=1, fallback=False)
  with pytest.raises(ValueError, match="rounds must be at most 20"):
    sensitivity.allowed_patterns(21, 1, 1)
  with pytest.raises(ValueError, match="separation must be at least 1"):
    sensitivity.toeplitz_sensitivity([1.0], rounds=4, participations=1,
                                     separation=0)


@pytest.mark.parametrize("name", ["sqrt, 5 bands", "blt, 3 buffers"])
def test_pattern_mu_is_the_gls_mu_of_the_linear_noise(name):
  c, n, z = _STRATEGIES[name], 16, 0.8
  noise = strategy_noise.strategy_noise(c, n)
  patterns = np.random.default_rng(4).random((20, n)) < 0.3
  patterns[:, 0] = True  # no empty pattern
  gls = gls_statistics.schedule_mu(patterns, noise, noise_multiplier=z)
  direct = [strategy_noise.pattern_mu(c, a, noise_multiplier=z)
            for a in patterns]
  np.testing.assert_allclose(gls, direct, rtol=1e-9)
  # One participation per epoch (one epoch): the worst round's mu is the
  # one-participation sensitivity over z.
  single = sensitivity.toeplitz_sensitivity(c, rounds=n, participations=1,
                                            separation=1)
  assert noise.release_mu(z) == pytest.approx(
      single.value / z, rel=1e-9)


def test_restarted_strategy_noise_is_block_diagonal_with_per_epoch_accounting():
  c, z = toeplitz.square_root_coefficients(4), 1.5
  noise = strategy_noise.strategy_noise(c, 10, restart_every=4)
  assert noise.block_starts() == [0, 4, 8]
  np.testing.assert_allclose(noise.released[4:8, 4:8],
                             toeplitz.noise_matrix(c, 4), atol=1e-15)
  assert not noise.released[4:, :4].any() and not noise.released[8:, :8].any()
  # One participation per epoch: each epoch's worst round is its first, with
  # the column norm of C over that epoch's length (4, 4 and 2 rounds).
  norms = [toeplitz.column_norms(c, size)[0] for size in (4, 4, 2)]
  assert noise.release_mu(z) == pytest.approx(
      np.sqrt(np.sum(np.square(norms))) / z, rel=1e-9)


def test_covariance_strategy_recovers_c_and_finds_the_trees_worst_round():
  c = _STRATEGIES["blt, 2 buffers"]
  k = strategy_noise.strategy_noise(c, 12).covariance
  np.testing.assert_allclose(sensitivity.covariance_strategy(k),
                             toeplitz.strategy_matrix(c, 12), atol=1e-9)
  # The plain tree over 16 rounds (no restart): round 0 is on a path of
  # h = ceil(log2(17)) = 5 nodes, each released alone, the accounting's own
  # value; the efficient tree releases less about its worst round.
  plain = tree_noise.tree_noise(16, efficient=False).covariance
  worst = sensitivity.enumerated_sensitivity(
      sensitivity.covariance_strategy(plain), participations=1, separation=1)
  assert worst.value**2 == pytest.approx(5.0, rel=1e-9)
  assert np.flatnonzero(worst.pattern).tolist() == [0]
  efficient = tree_noise.tree_noise(16, efficient=True).covariance
  assert sensitivity.enumerated_sensitivity(
      sensitivity.covariance_strategy(efficient), participations=1,
      separation=1).value**2 < 5.0 - 0.1
  with pytest.raises(ValueError, match="covariance must be positive definite"):
    sensitivity.covariance_strategy(np.zeros((3, 3)))


def test_restarted_sensitivity_is_the_per_epoch_worst_round():
  z = 2.0
  plain = tree_noise.tree_noise(64, efficient=False, restart_period=16)
  worst = sensitivity.restarted_sensitivity(plain)
  # Round 0 of each of the 4 trees, on a path of h = 5 nodes each.
  assert np.flatnonzero(worst.pattern).tolist() == [0, 16, 32, 48]
  assert worst.value**2 == pytest.approx(4 * 5.0, rel=1e-9)
  for noise in (plain, tree_noise.tree_noise(64, efficient=True,
                                             restart_period=16),
                strategy_noise.strategy_noise(
                    toeplitz.square_root_coefficients(6), 64,
                    restart_every=16)):
    found = sensitivity.restarted_sensitivity(noise)
    assert found.value / z == pytest.approx(noise.worst_case_mu(z),
                                            rel=1e-9)
    # Canaries on a* have exactly that mu.
    np.testing.assert_allclose(
        gls_statistics.schedule_mu(found.schedule(2), noise,
                                   noise_multiplier=z),
        found.value / z, rtol=1e-8)
  small = strategy_noise.strategy_noise(toeplitz.square_root_coefficients(3),
                                        12, restart_every=4)
  exact = sensitivity.enumerated_sensitivity(
      sensitivity.covariance_strategy(small.covariance), participations=3,
      separation=1, rounds_per_epoch=4)
  assert sensitivity.restarted_sensitivity(small).value == pytest.approx(
      exact.value, rel=1e-9)
  with pytest.raises(TypeError, match="noise must be a LinearNoise"):
    sensitivity.restarted_sensitivity(np.eye(3))


def test_analytical_epsilon_is_exact_gdp_of_sensitivity_over_z():
  c = toeplitz.square_root_coefficients(16)
  worst = sensitivity.toeplitz_sensitivity(c, rounds=256, participations=4,
                                           separation=64)
  claim = analytical.matrix_epsilon(worst, noise_multiplier=3.0, delta=1e-5)
  assert claim.mu == pytest.approx(worst.value / 3.0)
  # mu-GDP with mu = sens / z is the Gaussian mechanism of multiplier z / sens.
  assert claim.epsilon == pytest.approx(gaussian_accounting.gaussian_epsilon(
      3.0 / worst.value, 1e-5), rel=1e-9)
  # Canaries on the worst-case schedule face exactly the analytical mu.
  noise = strategy_noise.strategy_noise(c, 256)
  placed = gls_statistics.schedule_mu(worst.schedule(3), noise,
                                      noise_multiplier=3.0)
  np.testing.assert_allclose(placed, claim.mu, rtol=1e-8)
  with pytest.raises(ValueError, match="delta must be strictly between"):
    analytical.matrix_epsilon(worst, noise_multiplier=3.0, delta=1.0)
  with pytest.raises(TypeError, match="sensitivity must be a Sensitivity"):
    analytical.matrix_epsilon(2.0, noise_multiplier=3.0, delta=1e-5)
