"""Epsilon of two Gaussians (docs/method/two-gaussians.md) against independent methods."""

import itertools

import mpmath
import numpy as np
import pytest
from dp_accounting.pld import privacy_loss_mechanism
from scipy import optimize, stats

from tff_canary.stats.estimators import two_gaussians as tg


def _dp_accounting_noise_for(epsilon, delta):
  """The noise multiplier whose exact epsilon is `epsilon`, via dp_accounting."""

  def gap(log_z):
    loss = privacy_loss_mechanism.GaussianPrivacyLoss(
        standard_deviation=float(np.exp(log_z)), sensitivity=1.0)
    with np.errstate(divide="ignore"):  # delta underflows at the bracket's ends
      return np.log(loss.get_delta_for_epsilon(epsilon)) - np.log(delta)

  return float(np.exp(optimize.brentq(gap, np.log(1e-4), np.log(1e4),
                                      xtol=1e-15, rtol=1e-15)))


@pytest.mark.parametrize("delta", [1e-10, 1e-8, 1e-6, 1e-4, 1e-2])
def test_equal_variances_match_the_exact_gaussian_mechanism(delta):
  # Balle & Wang's exact epsilon, evaluated by dp_accounting's own code.
  for epsilon in [0.05, 0.1, 0.3, 1.0, 3.0, 10.0, 30.0, 100.0, 300.0]:
    z = _dp_accounting_noise_for(epsilon, delta)
    ours = tg.epsilon_for_delta(delta, 0.0, z, 1.0, z)
    # Both sides solve to ~1e-15; the calibration's tolerance on z, amplified
    # by d(eps)/d(z) * z / eps (at most ~2 on this grid), sets 1e-9.
    assert ours == pytest.approx(epsilon, rel=1e-9), (epsilon, delta, z)
    # Scale invariance: sensitivity 1 and noise z is the same as 0.3 and 0.3 z.
    assert tg.epsilon_for_delta(delta, 5.0, 0.3 * z, 5.3, 0.3 * z) == \
        pytest.approx(epsilon, rel=1e-9)


def _monte_carlo_delta(epsilon, mu0, s0, mu1, s1, n, rng):
  """max(H(P||Q), H(Q||P)) as E_P[(1 - e^(eps - L))_+] by sampling; returns (value, std error)."""
  out = []
  for (ma, sa), (mb, sb) in [((mu0, s0), (mu1, s1)), ((mu1, s1), (mu0, s0))]:
    y = ma + sa * rng.standard_normal(n)
    loss = stats.norm.logpdf(y, ma, sa) - stats.norm.logpdf(y, mb, sb)
    h = np.maximum(0.0, -np.expm1(epsilon - loss))
    out.append((h.mean(), h.std() / np.sqrt(n)))
  return max(out)


@pytest.mark.parametrize("mu0, s0, mu1, s1, epsilon", [
    (0.0, 1.0, 1.0, 1.3, 1.0),
    (0.0, 1.0, 1.5, 0.7, 2.0),
    (0.0, 1.0, 0.5, 2.0, 0.5),
    (0.2, 0.5, -0.4, 0.45, 1.5),
    (0.0, 1.0, 0.0, 1.5, 0.3),   # equal means, only the variances differ
])
def test_unequal_variances_match_monte_carlo(mu0, s0, mu1, s1, epsilon):
  rng = np.random.default_rng(12345)
  mc, se = _monte_carlo_delta(epsilon, mu0, s0, mu1, s1, 2_000_000, rng)
  ours = tg.delta_for_epsilon(epsilon, mu0, s0, mu1, s1)
  assert mc > 1e-3  # chosen so the Monte Carlo has a few digits
  # Fixed seed; 5 standard errors leaves a 6e-7 chance for a correct formula.
  assert abs(ours - mc) < 5 * se, (ours, mc, se)


def _mpmath_delta(epsilon, mu0, s0, mu1, s1):
  """max(H(P||Q), H(Q||P)) = max of int (p - e^eps q)_+ by 50-digit quadrature."""
  with mpmath.workdps(50):
    eps = mpmath.mpf(epsilon)
    args = [mpmath.mpf(v) for v in (mu0, s0, mu1, s1)]
    m0, v0, m1, v1 = args

    def logpdf(y, m, s):
      return -((y - m) / s) ** 2 / 2 - mpmath.log(s) - mpmath.log(2 * mpmath.pi) / 2

    values = []
    for (ma, sa), (mb, sb) in [((m0, v0), (m1, v1)), ((m1, v1), (m0, v0))]:
      # Roots of L(y) = eps: L is a quadratic; find them numerically.
      loss = lambda y: logpdf(y, ma, sa) - logpdf(y, mb, sb) - eps
      centre = (ma + mb) / 2
      width = 60 * max(sa, sb) + abs(ma - mb)
      grid = [centre - width + k * 2 * width / 4000 for k in range(4001)]
      roots = [mpmath.findroot(loss, (a, b), solver="anderson")
               for a, b in zip(grid[:-1], grid[1:]) if loss(a) * loss(b) < 0]
      points = sorted([grid[0]] + roots + [grid[-1]])
      integrand = lambda y: max(mpmath.mpf(0), mpmath.exp(logpdf(y, ma, sa))
                                - mpmath.exp(eps + logpdf(y, mb, sb)))
      values.append(mpmath.quad(integrand, points))
    return max(values)


@pytest.mark.parametrize("delta, mu1, s1", [
    (1e-6, 0.5, 1.02),     # a variance ratio of 1.02 (docs/method/estimates.md)
    (1e-10, 3.0, 0.6),
    (1e-3, 1.0, 1.0),      # equal variances through the quadratic code path
    (1e-6, 300.0, 1.3),    # epsilon in the tens of thousands (paper: 45800)
    (1e-6, 300.0, 0.7),
])
def test_round_trip_against_high_precision_quadrature(delta, mu1, s1):
  epsilon = tg.epsilon_for_delta(delta, 0.0, 1.0, mu1, s1)
  assert epsilon > 0
  reference = float(_mpmath_delta(epsilon, 0.0, 1.0, mu1, s1))
  # delta(epsilon) is a difference of two masses; its condition number at
  # these points is < 1e3, so 1e-9 relative is ~1e4 ulps of margin.
  assert reference == pytest.approx(delta, rel=1e-9), epsilon


def test_epsilon_in_the_tens_of_thousands_is_stable():
  # Continuity and monotonicity where e^eps overflows a double many times over.
  mus = np.linspace(290.0, 310.0, 21)
  eps = [tg.epsilon_for_delta(1e-6, 0.0, 1.0, mu, 1.2) for mu in mus]
  assert all(np.isfinite(eps)) and min(eps) > 40_000
  assert np.all(np.diff(eps) > 0)
  np.testing.assert_allclose(np.diff(eps, 2), 0.0, atol=1e-3 * max(eps))


@pytest.mark.parametrize("delta", [1e-10, 1e-6, 1e-2])
def test_delta_round_trip_grid(delta):
  for mu1, s1 in itertools.product([0.01, 0.3, 2.0, 40.0], [0.5, 0.98, 1.0, 1.3, 5.0]):
    epsilon = tg.epsilon_for_delta(delta, 0.0, 1.0, mu1, s1)
    if epsilon == 0.0:
      # Then even the total variation distance is within delta.
      assert tg.delta_for_epsilon(0.0, 0.0, 1.0, mu1, s1) <= delta
      continue
    assert tg.delta_for_epsilon(epsilon, 0.0, 1.0, mu1, s1) == pytest.approx(
        delta, rel=1e-10)
    # And epsilon is the smallest such: slightly less breaks delta.
    assert tg.delta_for_epsilon(epsilon * (1 - 1e-7), 0.0, 1.0, mu1, s1) > delta


def test_symmetry_and_affine_invariance():
  base = tg.epsilon_for_delta(1e-6, 0.0, 1.0, 0.8, 1.1)
  assert tg.epsilon_for_delta(1e-6, 0.8, 1.1, 0.0, 1.0) == pytest.approx(base, rel=1e-12)
  assert tg.epsilon_for_delta(1e-6, 3.0, 2.0, 4.6, 2.2) == pytest.approx(base, rel=1e-12)
  assert tg.epsilon_for_delta(1e-6, 0.0, 1.0, -0.8, 1.1) == pytest.approx(base, rel=1e-12)


def test_nearly_equal_variances_are_continuous():
  # A is ~1e-12 here: the quadratic's far root is at ~1e12 and must not
  # swamp the near one.
  equal = tg.epsilon_for_delta(1e-6, 0.0, 1.0, 1 / 4.22, 1.0)
  for ratio in [1 + 1e-12, 1 - 1e-12, 1 + 1e-9]:
    near = tg.epsilon_for_delta(1e-6, 0.0, 1.0, 1 / 4.22, ratio)
    assert near == pytest.approx(equal, rel=1e-6)


def test_variance_ratio_sensitivity_from_method():
  # docs/method/estimates.md: at delta = 1e-6 a variance ratio of 1.02 moves epsilon = 1 to ~1.4.
  z = _dp_accounting_noise_for(1.0, 1e-6)
  assert tg.epsilon_for_delta(1e-6, 0.0, 1.0, 1 / z, 1.0) == pytest.approx(1.0, rel=1e-9)
  assert tg.epsilon_for_delta(1e-6, 0.0, 1.0, 1 / z, 1.02) == pytest.approx(1.4, abs=0.05)


def test_degenerate_ends():
  assert tg.epsilon_for_delta(1e-6, 0.0, 1.0, 0.0, 1.0) == 0.0
  assert tg.delta_for_epsilon(0.0, 0.0, 1.0, 0.0, 1.0) == 0.0
  # Total variation of N(0,1) vs N(0.001,1) is ~4e-4 < 1e-2.
  assert tg.epsilon_for_delta(1e-2, 0.0, 1.0, 1e-3, 1.0) == 0.0
  # Absurdly far apart: no finite epsilon below 1e7.
  assert tg.epsilon_for_delta(1e-6, 0.0, 1.0, 1e9, 1.0) == np.inf
  # epsilon increases with the separation.
  eps = [tg.epsilon_for_delta(1e-6, 0.0, 1.0, mu, 1.0) for mu in (0.1, 0.5, 1, 5)]
  assert np.all(np.diff(eps) > 0)


def test_vectorized_solver_agrees_with_scalar_brent():
  rng = np.random.default_rng(7)
  mu = rng.uniform(-3, 3, 300)
  sd = rng.uniform(0.3, 3, 300)
  many = tg.epsilon_for_delta_many(1e-6, 0.0, 1.0, mu, sd)
  scalar = np.array([tg.epsilon_for_delta(1e-6, 0.0, 1.0, m, s) for m, s in zip(mu, sd)])
  np.testing.assert_allclose(many, scalar, rtol=1e-10, atol=1e-14)
  out = tg.epsilon_for_delta_many(1e-6, 0.0, [1.0, 1.0, 1.0], [0.0, 1e9, 2.0], 1.0)
  assert out[0] == 0.0 and out[1] == np.inf and out[2] == pytest.approx(
      tg.epsilon_for_delta(1e-6, 0.0, 1.0, 2.0, 1.0), rel=1e-10)


@pytest.mark.parametrize("kwargs, error, name", [
    (dict(delta=0.0), ValueError, "delta"),
    (dict(delta=1.0), ValueError, "delta"),
    (dict(delta=float("nan")), ValueError, "delta"),
    (dict(delta="1e-6"), TypeError, "delta"),
    (dict(sigma0=0.0), ValueError, "sigma0"),
    (dict(sigma1=-1.0), ValueError, "sigma1"),
    (dict(mu1=float("inf")), ValueError, "mu1"),
    (dict(mu0=None), TypeError, "mu0"),
])
def test_bad_input_is_named(kwargs, error, name):
  args = dict(delta=1e-6, mu0=0.0, sigma0=1.0, mu1=1.0, sigma1=1.0)
  args.update(kwargs)
  with pytest.raises(error, match=name):
    tg.epsilon_for_delta(**args)


def test_negative_epsilon_is_refused():
  with pytest.raises(ValueError, match="epsilon"):
    tg.delta_for_epsilon(-0.1, 0.0, 1.0, 1.0, 1.0)
