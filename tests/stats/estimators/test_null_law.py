"""The exact null law of a canary cosine (docs/method/null-law.md) against independent methods."""

import mpmath
import numpy as np
import pytest
from scipy import integrate, stats

from tff_canary.stats.estimators.null_law import CosineNull


def _reference_logsf(dim, t):
  """log P(T >= t) by 40-digit quadrature of the density (independent of SciPy)."""
  with mpmath.workdps(40):
    d, t = mpmath.mpf(dim), mpmath.mpf(t)
    e = (d - 3) / 2
    slope = abs(e * 2 * t / (1 - t * t)) + 1  # decay rate of the integrand at t
    points = [t + k / slope for k in (0, 0.3, 1, 3, 10, 30, 100, 300, 1000, 3000)]
    points = [p for p in points if p < 1] + [mpmath.mpf(1)]
    integrand = lambda s: mpmath.exp(e * (mpmath.log1p(-s * s) - mpmath.log1p(-t * t)))
    value = mpmath.quad(integrand, points)
    return float(mpmath.log(value) + e * mpmath.log1p(-t * t)
                 - mpmath.log(mpmath.beta(mpmath.mpf(1) / 2, (d - 1) / 2)))


@pytest.mark.parametrize("dim", [2, 3, 5, 50, 999, 20_000, 1_000_000, 4_050_748])
def test_logsf_matches_high_precision_quadrature(dim):
  null = CosineNull(dim)
  for z in [1e-6, 0.01, 0.5, 1.0, 2.0, 3.0, 5.0, 10.0, 20.0, 40.0, 80.0]:
    t = min(z / np.sqrt(dim), 0.999)
    reference = _reference_logsf(dim, t)
    # SciPy's incomplete beta takes x = 1 - t^2 rounded to double precision;
    # the tail's sensitivity to x makes the relative error about d * 5e-17
    # (measured worst: 5.4e-16 * d over this grid). Allow 2e-15 * d.
    tolerance = max(2e-15 * dim, 1e-13) * max(1.0, abs(reference))
    assert abs(null.logsf(t) - reference) <= tolerance, (dim, t)


def test_deep_tail_reference_number_from_method():
  # docs/method/null-law.md: d = 999, t = 0.3: exact 1.5e-22, normal approximation 1.3e-21.
  null = CosineNull(999)
  assert null.sf(0.3) == pytest.approx(1.5e-22, rel=0.02)
  assert stats.norm.sf(0.3 * np.sqrt(999)) == pytest.approx(1.3e-21, rel=0.05)


def test_logsf_does_not_underflow_where_sf_does():
  null = CosineNull(1_000_000)
  assert null.sf(0.04) == 0.0  # e^-805 underflows a double
  assert null.logsf(0.04) == pytest.approx(_reference_logsf(1_000_000, 0.04),
                                           rel=1e-12)
  assert np.isfinite(null.logsf(0.5)) and null.logsf(0.5) < -1e5


@pytest.mark.parametrize("dim", [3, 10, 100])
def test_cdf_matches_monte_carlo_of_normalized_gaussians(dim):
  # Independent sampling route: c = g / |g| with g ~ N(0, I_d), T = c_1.
  rng = np.random.default_rng(dim)
  g = rng.standard_normal((20_000, dim))
  t = g[:, 0] / np.linalg.norm(g, axis=1)
  # With a fixed seed the KS p-value is a fixed number; a wrong law (even the
  # N(0, 1/d) approximation at d = 3) gives p ~ 0 at n = 20000.
  assert stats.kstest(t, CosineNull(dim).cdf).pvalue > 0.01


def test_normal_approximation_is_wrong_at_small_dim_but_right_at_large_dim():
  rng = np.random.default_rng(1)
  g = rng.standard_normal((20_000, 3))
  t = g[:, 0] / np.linalg.norm(g, axis=1)
  assert stats.kstest(t, stats.norm(scale=1 / np.sqrt(3)).cdf).pvalue < 1e-6
  # Large d: the exact law and N(0, 1/d) agree in the body (Theorem 3.2).
  null = CosineNull(1_000_000)
  grid = np.linspace(-4, 4, 33) / 1000.0
  assert np.max(np.abs(null.cdf(grid) - stats.norm.cdf(grid * 1000.0))) < 1e-5


@pytest.mark.parametrize("dim", [2, 3, 7, 200, 100_000])
def test_density_integrates_to_one_with_variance_one_over_dim(dim):
  null = CosineNull(dim)
  width = min(1.0, 40 / np.sqrt(dim))
  points = np.linspace(-width, width, 9)
  mass = sum(integrate.quad(null.pdf, a, b, epsabs=1e-13)[0]
             for a, b in zip(points[:-1], points[1:]))
  var = sum(integrate.quad(lambda x: x * x * null.pdf(x), a, b, epsabs=1e-16)[0]
            for a, b in zip(points[:-1], points[1:]))
  assert mass == pytest.approx(1.0, abs=1e-9)
  assert var == pytest.approx(1.0 / dim, rel=1e-7)
  assert null.var() == 1.0 / dim and null.mean() == 0.0


def test_cdf_is_the_integral_of_the_pdf():
  null = CosineNull(50)
  for t in [-0.9, -0.2, 0.0, 0.05, 0.4]:
    area = integrate.quad(null.pdf, -1, t, epsabs=1e-14)[0]
    assert null.cdf(t) == pytest.approx(area, rel=1e-10, abs=1e-14)


@pytest.mark.parametrize("dim", [2, 10, 999, 1_000_000])
def test_quantiles_round_trip_in_t(dim):
  null = CosineNull(dim)
  # From the centre to deep tails (z = t sqrt(d) up to 60, sf ~ e^-1800).
  t = np.concatenate([np.linspace(0.0, 0.999, 40),
                      np.linspace(0.0, 60.0, 41)[1:] / np.sqrt(dim)])
  t = t[t < 0.999]
  q = np.exp(null.logsf(t))
  keep = q > 0  # isf takes q itself, so it cannot go below the smallest double
  np.testing.assert_allclose(null.isf(q[keep]), t[keep], rtol=1e-9, atol=1e-15)
  np.testing.assert_allclose(null.ppf(q[keep]), -t[keep], rtol=1e-9, atol=1e-15)


@pytest.mark.parametrize("dim", [10, 999, 1_000_000])
def test_quantiles_round_trip_in_q(dim):
  null = CosineNull(dim)
  # At d = 10, P(T >= t) ~ (1 - t^2)^3.5, so q = 1e-30 needs 1 - t ~ 1e-9,
  # where the spacing of doubles near 1 alone costs 1e-7 of q: keep q >= 1e-6.
  q = np.array([1e-300, 1e-30, 1e-12, 1e-4, 0.01, 0.2, 0.3, 0.5, 0.7, 0.99])
  if dim == 10:
    q = q[q >= 1e-6]
  # The round trip cannot beat sf's own accuracy, about d * 5e-17 relative
  # (test_logsf_matches_high_precision_quadrature); allow 2e-15 * d.
  rtol = max(1e-12, 2e-15 * dim)
  np.testing.assert_allclose(null.sf(null.isf(q)), q, rtol=rtol)
  np.testing.assert_allclose(null.cdf(null.ppf(q)), q, rtol=rtol)


def test_quantile_where_one_is_not_representable():
  # d = 2: P(T >= t) = arccos(t)/pi, so q = 1e-12 needs t = 1 - 5e-24.
  null = CosineNull(2)
  assert null.isf(1e-12) == np.nextafter(1.0, 0.0)
  assert null.isf(0.0) == 1.0 and null.isf(1.0) == -1.0
  with pytest.raises(ValueError, match="q must lie in"):
    null.isf(1.5)


def test_symmetry_support_and_shapes():
  null = CosineNull(20)
  t = np.array([[0.1, -0.3], [0.7, 0.0]])
  np.testing.assert_allclose(null.sf(t), null.cdf(-t), rtol=1e-14)
  np.testing.assert_allclose(null.sf(t) + null.cdf(t), 1.0, rtol=1e-14)
  assert null.sf(t).shape == (2, 2) and np.ndim(null.sf(0.2)) == 0
  assert null.pdf(1.5) == 0.0 and null.sf(1.5) == 0.0 and null.cdf(-1.5) == 0.0
  assert null.sf(0.0) == pytest.approx(0.5, abs=1e-16)
  assert null.logsf(-2.0) == 0.0


def test_rvs_follows_the_law():
  null = CosineNull(30)
  draws = null.rvs(size=20_000, seed=3)
  assert stats.kstest(draws, null.cdf).pvalue > 0.01


@pytest.mark.parametrize("dim", [2, 3, 5])
def test_rvs_moments_at_small_dim(dim):
  # At d = 30 a sampler off by one dimension (Beta(d/2, d/2): the law of
  # d + 1) is within KS's noise at 20000 draws; at small d the moments tell:
  # E[T^2] = 1/d and E[T^4] = 3/(d(d + 2)) exactly (T^2 ~ Beta(1/2,
  # (d - 1)/2)), against 1/(d + 1) and 3/((d + 1)(d + 3)) one dimension up.
  # Var(T^2) = 2(d - 1)/(d^2 (d + 2)) <= 1/8, so over 50000 draws the mean
  # of T^2 has standard error <= 0.0016; 5 SE passes every correct seed and
  # fails the off-by-one law (gap 1/(d(d + 1)) >= 0.033, >= 20 SE). The
  # mean of T^4 has relative standard error at most 0.8% here (E[T^8] =
  # 105/(d(d + 2)(d + 4)(d + 6))), so 3% is > 3.5 SE; the off-by-one law's
  # E[T^4] is 14% (d = 5) to 37% (d = 2) smaller.
  null = CosineNull(dim)
  t = null.rvs(size=50_000, seed=dim)
  se = np.sqrt(2.0 * (dim - 1) / (dim ** 2 * (dim + 2)) / t.size)
  assert abs(np.mean(t ** 2) - 1.0 / dim) < 5 * se
  assert np.mean(t ** 4) == pytest.approx(3.0 / (dim * (dim + 2)), rel=0.03)
  assert stats.kstest(t, null.cdf).pvalue > 0.001


@pytest.mark.parametrize("dim, error", [(1, ValueError), (0, ValueError),
                                        (2.5, TypeError), ("100", TypeError),
                                        (True, TypeError), (None, TypeError)])
def test_bad_dim_is_named(dim, error):
  with pytest.raises(error, match="dim"):
    CosineNull(dim)


def test_frozen():
  null = CosineNull(10)
  with pytest.raises(Exception):
    null.dim = 11
  assert "dim=10" in str(null)
