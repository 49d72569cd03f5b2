"""Tests of removing the other inserted canaries (stats layer, no TensorFlow).

tff_canary.stats.estimators.known_canaries (the formula), its use in the Gaussian-
mechanism simulators (`remove_known_canaries`) and the multi-round simulator
tff_canary.stats.simulation.round_simulation, and the estimates on them.
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest
from scipy import stats

from tff_canary.stats.estimators import estimates
from tff_canary.stats.accounting import gaussian_accounting
from tff_canary.stats.simulation import gaussian_mechanism as gm
from tff_canary.stats.estimators import known_canaries
from tff_canary.stats.simulation import round_simulation
from tff_canary.stats.estimators import two_gaussians

_P_MIN = 1e-3


def _cos(a, b):
  return a @ b / (np.linalg.norm(a) * np.linalg.norm(b))


# ------------------------------------------------------------- the formula


def test_corrected_cosines_match_the_vectors():
  # Independent check: build a'_r and b = a'_r + [own] s c_j as vectors.
  rng = np.random.default_rng(0)
  d, m, rounds = 50, 6, 4
  c = rng.standard_normal((m, d))
  c /= np.linalg.norm(c, axis=1, keepdims=True)
  residual = rng.standard_normal((rounds, d)) * 0.3
  scales = rng.uniform(0.1, 2.0, rounds)
  own = rng.random((m, rounds)) < 0.4
  got = known_canaries.corrected_cosines(
      c @ residual.T, np.linalg.norm(residual, axis=1), scales, own)
  for j in range(m):
    for r in range(rounds):
      b = residual[r] + (scales[r] * c[j] if own[j, r] else 0.0)
      assert got[j, r] == pytest.approx(_cos(c[j], b), abs=1e-12)


def test_corrected_cosines_at_zero_vectors():
  # A canary alone (a' = 0): cosine 1; nothing at all: the convention 0.
  got = known_canaries.corrected_cosines([0.0, 0.0], [0.0, 0.0], [0.5, 0.5],
                                         [True, False])
  np.testing.assert_array_equal(got, [1.0, 0.0])
  # s = 0 and own: the canary was inserted at scale 0, b = a'.
  got = known_canaries.corrected_cosines(0.3, 2.0, 0.0, True)
  assert got == pytest.approx(0.15)


@pytest.mark.parametrize("kwargs, needle", [
    (dict(dots=[np.nan]), r"dots must be finite, but dots\[0\] = nan"),
    (dict(residual_norms=[-1.0]), "residual_norms must be finite and "
                                  "nonnegative"),
    (dict(scales=[np.inf]), "scales must be finite and nonnegative"),
])
def test_corrected_cosines_refuse_bad_input(kwargs, needle):
  args = dict(dots=[0.1], residual_norms=[1.0], scales=[1.0], own=[True])
  args.update(kwargs)
  with pytest.raises(ValueError, match=needle):
    known_canaries.corrected_cosines(**args)


# --------------------------------------------------- the simulators, exact


def test_brute_corrected_statistics_are_the_lone_canary_cosines():
  # Regenerate the brute simulator's vectors from its documented streams
  # and compute cos(c_j, c_j + sigma z) and cos(h, sigma z) directly.
  d, k, h, sigma, seed = 300, 5, 3, 0.4, 9
  run = gm.simulate(dim=d, num_inserted=k, num_held_out=h, noise_std=sigma,
                    seed=seed, simulator="brute")
  assert run.remove_known_canaries
  z = np.random.default_rng([seed, 1]).standard_normal(d)
  c = np.stack([np.random.default_rng([seed, 0, j]).standard_normal(d)
                for j in range(k + h)])
  c /= np.linalg.norm(c, axis=1, keepdims=True)
  np.testing.assert_allclose(
      run.inserted, [_cos(c[j], c[j] + sigma * z) for j in range(k)],
      atol=1e-12)
  np.testing.assert_allclose(
      run.held_out, [_cos(c[j], z) for j in range(k, k + h)], atol=1e-12)
  plain = gm.simulate(dim=d, num_inserted=k, num_held_out=h, noise_std=sigma,
                      seed=seed, simulator="brute",
                      remove_known_canaries=False)
  rho = c[:k].sum(axis=0) + sigma * z
  np.testing.assert_allclose(plain.inserted, [_cos(c[j], rho)
                                              for j in range(k)], atol=1e-12)


@pytest.mark.parametrize("simulator", gm.SIMULATORS)
def test_noiseless_corrected_canaries_are_alone(simulator):
  run = gm.simulate(dim=40, num_inserted=6, num_held_out=2, noise_std=0.0,
                    seed=1, simulator=simulator)
  np.testing.assert_allclose(run.inserted, 1.0, atol=1e-14)
  np.testing.assert_array_equal(run.held_out, 0.0)


def test_fast_and_brute_corrected_agree_at_d_6():
  # d = 6, k = 4: far from Gaussian; one canary per run (they share z).
  args = dict(dim=6, num_inserted=4, num_held_out=1, noise_std=0.3)
  brute = [gm.simulate(seed=s, simulator="brute", **args)
           for s in range(1500)]
  fast = [gm.simulate(seed=50000 + s, **args) for s in range(1500)]
  for column in (0, 3):
    assert stats.ks_2samp([r.inserted[column] for r in brute],
                          [r.inserted[column] for r in fast]).pvalue > _P_MIN
  assert stats.ks_2samp([r.held_out[0] for r in brute],
                        [r.held_out[0] for r in fast]).pvalue > _P_MIN


def test_simulate_refuses_a_non_bool_flag():
  with pytest.raises(TypeError, match="remove_known_canaries must be a bool"):
    gm.simulate(dim=100, num_inserted=2, num_held_out=2, noise_std=1.0,
                seed=0, remove_known_canaries="no")


# ------------------------------------------------ the estimate, unbiased


@pytest.fixture(scope="module")
def ten_percent():
  """epsilon 10, k / d = 10% (d = 5000, 500 canaries), 60 paired runs."""
  d, k, delta = 5000, 500, 1e-6
  sigma = gaussian_accounting.gaussian_noise_multiplier(10.0, delta)
  out = {True: [], False: []}
  with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    for seed in range(60):
      for remove in (True, False):
        run = gm.simulate(dim=d, num_inserted=k, num_held_out=0,
                          noise_std=sigma, seed=seed,
                          remove_known_canaries=remove)
        out[remove].append(estimates.epsilon_final(run.inserted, dim=d,
                                                   delta=delta))
  return out


def test_corrected_mean_only_epsilon_final_is_unbiased(ten_percent):
  # Plain: mean cosine 1 / sqrt(sigma^2 + 0.1) / sqrt(d), the epsilon of
  # noise 0.627 instead of 0.541, about 8.4. Corrected: the lone canary's
  # 1 / sqrt(sigma^2 d + 1), epsilon 10 up to 1e-4. One run's estimate has sd
  # ~0.2 (mu-hat sqrt(d) has sd 1/sqrt(500) on 1.85), so the mean of 60 is
  # known to ~0.03; 4 SE plus 1% of the target (the convexity bias at 500
  # canaries) bound a correct estimator, and the plain one misses by > 1.
  fixed = np.array([e.epsilon for e in ten_percent[True]])
  plain = np.array([e.epsilon for e in ten_percent[False]])
  se = fixed.std(ddof=1) / np.sqrt(fixed.size)
  assert abs(fixed.mean() - 10.0) < 4 * se + 0.1
  assert plain.mean() < 9.0


def test_corrected_interval_covers(ten_percent):
  # 60 trials at nominal 95%: SE 0.028; at least 0.95 - 3 SE = 0.865 (52 of
  # 60) has probability 0.998 for a correct interval. The plain interval
  # sits around 8.4 with half-width ~0.4 and almost never reaches 10.
  fixed = np.mean([e.interval.low <= 10.0 <= e.interval.high
                   for e in ten_percent[True]])
  plain = np.mean([e.interval.low <= 10.0 <= e.interval.high
                   for e in ten_percent[False]])
  assert fixed >= 0.865
  assert plain < 0.5


# ------------------------------------------------ max over rounds


def test_rounds_max_is_the_max_of_its_parts():
  run = round_simulation.simulate_rounds(
      dim=2000, num_rounds=1, inserted_per_round=10, num_held_out=4,
      noise_std=1.0, seed=3)
  np.testing.assert_array_equal(run.inserted, run.inserted_own)
  # The own-round cosines are those of `simulate` for that round.
  many = round_simulation.simulate_rounds(
      dim=2000, num_rounds=4, inserted_per_round=10, num_held_out=4,
      noise_std=1.0, seed=3)
  assert many.inserted.shape == (40,) and many.held_out.shape == (4,)
  assert np.all(many.inserted >= many.inserted_own)
  assert np.any(many.inserted > many.inserted_own)


def test_held_out_max_has_the_law_of_r_nulls():
  # CDF of the max of R independent exact nulls: F^R, with (1 + T)/2 ~
  # Beta((d - 1)/2, (d - 1)/2) (docs/method/null-law.md).
  d, rounds = 50, 5
  run = round_simulation.simulate_rounds(
      dim=d, num_rounds=rounds, inserted_per_round=2, num_held_out=4000,
      noise_std=1.0, seed=8)
  law = stats.beta((d - 1) / 2, (d - 1) / 2)
  assert stats.kstest(run.held_out,
                      lambda t: law.cdf((1 + t) / 2) ** rounds).pvalue > _P_MIN


@pytest.mark.parametrize("dim", [3, 4, 6])
def test_null_cosines_second_moment_at_small_dim(dim):
  # E[T^2] = 1/d exactly for the null law (T^2 ~ Beta(1/2, (d - 1)/2),
  # docs/method/null-law.md). At d = 50 a law off by one dimension (1/51) is
  # within a KS test's reach only with ~10^5 draws; at small d it is 1/(d+1)
  # against 1/d, 17-25% apart. Var(T^2) = 2(d - 1)/(d^2 (d + 2)), so over n =
  # 40000 held-out canaries (R = 1: pure nulls) the mean of T^2 has standard
  # error < 0.0015 at d = 3 (0.22% of 1/3 .. 0.4% of 1/6): 5 SE leaves every
  # correct seed passing and a law of d + 1 (gap 0.083 at d = 3, 0.024 at
  # d = 6, >= 16 SE) failing.
  n = 40_000
  run = round_simulation.simulate_rounds(
      dim=dim, num_rounds=1, inserted_per_round=2, num_held_out=n,
      noise_std=1.0, seed=dim)
  t2 = run.held_out ** 2
  se = np.sqrt(2.0 * (dim - 1) / (dim ** 2 * (dim + 2)) / n)
  assert abs(t2.mean() - 1.0 / dim) < 5 * se
  # The same draws against the law by an independent route: the first
  # coordinate of a normalized Gaussian vector in R^d.
  g = np.random.default_rng(100 + dim).standard_normal((n, dim))
  reference = g[:, 0] / np.linalg.norm(g, axis=1)
  assert stats.ks_2samp(run.held_out, reference).pvalue > _P_MIN


@pytest.mark.parametrize("kwargs, error, needle", [
    (dict(num_rounds=0), ValueError, "num_rounds"),
    (dict(inserted_per_round=0), ValueError, "inserted_per_round"),
    (dict(noise_std=0.0), ValueError, "noise_std"),
    (dict(num_held_out=-1), ValueError, "num_held_out"),
    (dict(dim=1.5), TypeError, "dim"),
])
def test_rounds_refuse_bad_input(kwargs, error, needle):
  args = dict(dim=100, num_rounds=2, inserted_per_round=2, num_held_out=2,
              noise_std=1.0, seed=0)
  args.update(kwargs)
  with pytest.raises(error, match=needle):
    round_simulation.simulate_rounds(**args)


def test_epsilon_all_interval_covers_on_max_of_rounds():
  # The interval claims to cover the epsilon of the Gaussians with the two
  # maxima's population moments. Those moments come from 2e6 draws of the
  # exact corrected laws (their Monte Carlo error, ~1e-3 in sd units, is
  # far below the 100-canary sampling error). 80 trials at nominal 95%: SE
  # 0.024; at least 0.95 - 3 SE = 0.877 has probability > 0.99.
  d, rounds, per_round, delta = 10000, 5, 20, 1e-5
  sigma = gaussian_accounting.gaussian_noise_multiplier(3.0, delta)
  rng = np.random.default_rng(123)
  n = 2_000_000
  t = round_simulation.null_cosines(d, (n,), rng)
  z = np.sqrt(rng.chisquare(d, n)) * sigma
  own = (1 + z * t) / np.sqrt(1 + 2 * z * t + z * z)
  ins = np.maximum(own, round_simulation.null_cosines(
      d, (n, rounds - 1), rng).max(axis=1))
  held = round_simulation.null_cosines(d, (n, rounds), rng).max(axis=1)
  truth = two_gaussians.epsilon_for_delta(delta, held.mean(), held.std(),
                                          ins.mean(), ins.std())
  covered = 0
  trials = 80
  with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    for seed in range(trials):
      run = round_simulation.simulate_rounds(
          dim=d, num_rounds=rounds, inserted_per_round=per_round,
          num_held_out=rounds * per_round, noise_std=sigma, seed=seed)
      low, high = estimates.epsilon_all(run.inserted, run.held_out,
                                        delta=delta).interval
      covered += low <= truth <= high
  assert covered / trials >= 0.877
