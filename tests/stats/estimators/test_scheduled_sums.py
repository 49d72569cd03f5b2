"""Tests of the schedule-aware estimate (tff_canary.stats.estimators.scheduled_sums).

Coverage is checked on the exact orthogonal-canary simulator
(`orthogonal_mechanism.simulate_scheduled`) with a known per-round noise, so
the true epsilon is that of (sqrt(P) / sigma)-GDP. A nominal 95% interval
covering in n seeded runs has a Binomial(n, 0.95) count; the bands below are
4 standard errors of it, so a correct interval fails a check with probability
about 1e-4, while an interval that ignored the held-out std's uncertainty or
used z instead of t would not move the rate enough to matter (what these
guard against is a wrong mapping or a biased mu, which would drop coverage
far below the band).
"""

from __future__ import annotations

import dataclasses
import math
import warnings

import numpy as np
import pytest

from tff_canary.stats.accounting import gaussian_accounting
from tff_canary.stats.estimators import scheduled_sums as ss
from tff_canary.stats import results
from tff_canary.stats.simulation import orthogonal_mechanism as om


def _true_epsilon(participations, sigma, delta):
  return gaussian_accounting.gaussian_epsilon_of_mu(
      math.sqrt(participations) / sigma, delta)


# ---------------------------------------------------------------- validation


@pytest.mark.parametrize("kwargs, error, needle", [
    (dict(inserted_T="abc"), TypeError, "inserted_T"),
    (dict(inserted_T=[1.0]), ValueError, "inserted_T"),
    (dict(inserted_T=[1.0, np.nan]), ValueError, "inserted_T"),
    (dict(inserted_T=[1.0, 1.0]), ValueError, "inserted_T"),
    (dict(held_out_T=[[0.0, 1.0]]), ValueError, "held_out_T"),
    (dict(held_out_T=[0.5, 0.5]), ValueError, "held_out_T"),
    (dict(delta=0.0), ValueError, "delta"),
    (dict(delta="1e-6"), TypeError, "delta"),
    (dict(confidence=1.0), ValueError, "confidence"),
])
def test_errors_name_the_argument(kwargs, error, needle):
  args = dict(inserted_T=[1.0, 2.0, 3.0], held_out_T=None, delta=1e-6)
  args.update(kwargs)
  inserted = args.pop("inserted_T")
  held_out = args.pop("held_out_T")
  with pytest.raises(error, match=needle):
    ss.epsilon_scheduled(inserted, held_out, **args)


@pytest.mark.parametrize("kwargs, error, needle", [
    (dict(dim=1), ValueError, "dim"),
    (dict(cosines=np.zeros(3)), ValueError, "cosines"),
    (dict(cosines=np.full((2, 3), 2.0)), ValueError, "cosines"),
    (dict(schedule=np.ones((2, 3))), TypeError, "schedule"),
    (dict(schedule=np.ones((2, 4), bool)), ValueError, "schedule"),
    (dict(schedule=np.array([[True] * 3, [False] * 3])), ValueError,
     r"schedule\[1\]"),
])
def test_scheduled_statistic_errors_name_the_argument(kwargs, error, needle):
  args = dict(cosines=np.zeros((2, 3)), schedule=np.ones((2, 3), bool),
              dim=100)
  args.update(kwargs)
  with pytest.raises(error, match=needle):
    ss.scheduled_statistic(**args)


# ------------------------------------------------------------------ basics


def test_scheduled_statistic_matches_the_simulator():
  run = om.simulate_scheduled(dim=10_000, num_candidates=50, num_rounds=8,
                              participations=3, noise_std=1.0, seed=4)
  # Rebuild T from a [m, R] matrix holding the simulator's own T / sqrt(d/P)
  # in the first scheduled round: the sum and the scaling are what is tested.
  schedule = np.zeros((50, 8), bool)
  schedule[np.arange(50)[:, None], run.schedule] = True
  cosines = np.zeros((50, 8))
  cosines[np.arange(50), run.schedule[:, 0]] = run.statistics / math.sqrt(
      10_000 / 3)
  np.testing.assert_allclose(
      ss.scheduled_statistic(cosines, schedule, dim=10_000), run.statistics,
      rtol=1e-12)


def test_known_values_and_summary():
  rng = np.random.default_rng(0)
  x = rng.standard_normal(4000) + 3.0
  est = ss.epsilon_scheduled(x, delta=1e-5)
  assert est.mu == pytest.approx(x.mean())
  assert est.epsilon == pytest.approx(
      gaussian_accounting.gaussian_epsilon_of_mu(x.mean(), 1e-5))
  assert est.interval.low < est.epsilon < est.interval.high
  assert est.null == "exact" and est.interval_method == "t"
  assert "ε-scheduled" in str(est) and "not a bound" in str(est)
  assert est.as_dict()["interval"] == list(est.interval)
  with pytest.raises(dataclasses.FrozenInstanceError):
    est.epsilon = 0.0  # frozen
  y = rng.standard_normal(4000)
  held = ss.epsilon_scheduled(x, y, delta=1e-5)
  assert held.null == "held_out" and held.interval_method == "projection"
  assert held.mu == pytest.approx((x.mean() - y.mean()) / y.std(ddof=1))
  assert "Gaussian model consistent" in held.trust


def test_trust_flags_a_bad_null_and_a_bad_variance():
  rng = np.random.default_rng(1)
  x = 2.0 * rng.standard_normal(2000) + 3.0  # variance 4 against 1
  est = ss.epsilon_scheduled(x, 1.3 * rng.standard_normal(2000) + 0.5,
                             delta=1e-6)
  assert "held-out T are not N(0, 1)" in est.trust
  assert "GDP reading of mu is doubtful" in est.trust


def test_negative_mean_warns_and_gives_zero():
  x = np.random.default_rng(2).standard_normal(1000) - 1.0
  with pytest.warns(results.SignConventionWarning):
    est = ss.epsilon_scheduled(x, delta=1e-6)
  assert est.epsilon == 0.0 and est.inserted_below_null
  assert "sign convention" in est.trust


# ------------------------------------------------- coverage (round trip)


@pytest.mark.parametrize("held_out", [False, True])
def test_interval_covers_the_composed_epsilon(held_out):
  """200 simulated runs, 400 candidates over 60 rounds, P = 6, sigma = 2:
  true mu = sqrt(6)/2 = 1.22, epsilon 6.16 at delta 1e-6 (measured over 400
  other seeds: exact-null coverage 0.950, held-out projection 0.995)."""
  delta, p, sigma, reps = 1e-6, 6, 2.0, 200
  truth = _true_epsilon(p, sigma, delta)
  covered, estimates = 0, []
  with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    for seed in range(reps):
      run = om.simulate_scheduled(dim=1_000_000, num_candidates=400,
                                  num_rounds=60, participations=p,
                                  noise_std=sigma, seed=seed)
      t, mask = np.asarray(run.statistics), np.asarray(run.inserted_mask)
      est = ss.epsilon_scheduled(t[mask], t[~mask] if held_out else None,
                                 delta=delta)
      covered += est.interval.low <= truth <= est.interval.high
      estimates.append(est.epsilon)
  # Binomial(200, 0.95): sd 0.0154, so 4 sd is [0.888, 1]. The held-out
  # interval is a projection (joint level >= 95%), so it may sit higher.
  rate = covered / reps
  assert rate >= 0.95 - 4 * math.sqrt(0.95 * 0.05 / reps), rate
  if not held_out:
    assert rate <= 0.95 + 4 * math.sqrt(0.95 * 0.05 / reps), rate
  # Unbiased in mu up to O(1e-3) relative; epsilon is nearly linear here, so
  # the mean estimate is within 4 standard errors of the truth (sd of one
  # estimate ~ 0.3, se of the mean of 200 ~ 0.02) plus a 1% allowance for the
  # curvature of mu -> epsilon.
  estimates = np.asarray(estimates)
  se = estimates.std(ddof=1) / math.sqrt(reps)
  assert abs(estimates.mean() - truth) < 4 * se + 0.01 * truth


# ---------------------------------------- variance check with known spread


def test_variance_check_allows_for_a_known_spread_of_means():
  # Inserted T_j ~ N(s m_j, 1) with m_j spread from 1 to 4 (Var s m_j = 6.75
  # at s = 3): the raw variance is 7.75, not 1, yet the Gaussian model
  # holds. Given the shape m_j the check fits s (here also a smaller scale
  # than any claim, s = 1.5) and finds the residual variance 1.
  rng = np.random.default_rng(3)
  m = rng.uniform(1.0, 4.0, 400)
  y = rng.standard_normal(400)
  for s in (3.0, 1.5):
    x = s * m + rng.standard_normal(400)
    raw = ss.epsilon_scheduled(x, y, delta=1e-5)
    known = ss.epsilon_scheduled(x, y, delta=1e-5, inserted_mu=m)
    assert "GDP reading of mu is doubtful" in raw.trust
    assert "doubtful" not in known.trust and known.known_spread
    assert known.residual_std == pytest.approx(1.0, abs=0.1)  # SE 0.035
    assert known.mu == raw.mu  # only the check uses the shape
  # A spread the shape does not explain: noise of std 1.5 on the inserted T
  # only (per-canary randomness in what entered), or means off the shape.
  x = 3.0 * m + 1.5 * rng.standard_normal(400)
  est = ss.epsilon_scheduled(x, y, delta=1e-5, inserted_mu=m)
  assert "doubtful" in est.trust and "known spread" in est.trust
  x = 3.0 * m + 2.0 * rng.permutation(m) + rng.standard_normal(400)
  assert "doubtful" in ss.epsilon_scheduled(x, delta=1e-5,
                                            inserted_mu=m).trust
  # Equal means: the same check as without a shape.
  x = 2.0 + rng.standard_normal(400)
  np.testing.assert_allclose(
      ss.epsilon_scheduled(x, y, delta=1e-5,
                           inserted_mu=np.full(400, 2.0)).variance_p_value,
      ss.epsilon_scheduled(x, y, delta=1e-5).variance_p_value)


def test_variance_check_includes_the_held_out_variance_sampling_error():
  # With 40 held-out T the null's sample variance is itself off by about
  # sqrt(2/39) = 23%. The F test's p-value for two samples of one law is
  # uniform, so of 100 seeded pairs Binomial(100, 0.05) fall below 0.05:
  # mean 5, sd 2.2, and 12 is 3 sd above. A chi-square test that took the
  # held-out variance as exact puts about a fifth of them below 0.05.
  rng = np.random.default_rng(4)
  small = sum(
      ss.epsilon_scheduled(rng.standard_normal(40) + 2.0,
                           rng.standard_normal(40),
                           delta=1e-5).variance_p_value < 0.05
      for _ in range(100))
  assert small <= 12, small


def test_inserted_mu_is_checked():
  with pytest.raises(ValueError, match="inserted_mu has 2 values"):
    ss.epsilon_scheduled([1.0, 2.0, 3.0], delta=1e-5, inserted_mu=[1.0, 2.0])
  with pytest.raises(ValueError, match="inserted_mu"):
    ss.epsilon_scheduled([1.0, 2.0, 3.0], delta=1e-5,
                         inserted_mu=[1.0, np.nan, 2.0])
