"""Tests of stats.ddp_accounting and stats.ddp_parameters.

Independent references: exact Renyi divergences and hockey-stick divergences
of shifted discrete distributions summed on an integer grid (sums of discrete
Gaussians by convolution, Skellam from scipy.stats), dp_accounting's RDP
accountant, and the exact Gaussian epsilon of stats.gaussian_accounting.
"""

from __future__ import annotations

import math

import dp_accounting
import numpy as np
import pytest
from scipy import special

from tff_canary.stats.accounting import ddp_accounting as acc
from tff_canary.stats.accounting import ddp_parameters as params
from tff_canary.stats.simulation import discrete_noise
from tff_canary.stats.accounting import gaussian_accounting

DELTA = 1e-5


# ------------------------------------------------------------ exact references


def _log_convolve(a, b):
  """log of the convolution of exp(a) and exp(b) (full length), in log space."""
  grid = a[:, None] + np.full((a.size, a.size + b.size - 1), -np.inf)
  for i in range(a.size):
    grid[i, i: i + b.size] = a[i] + b
  return special.logsumexp(grid, axis=0)


def dgauss_sum_logpmf(sigma, shares, half_width):
  """log pmf of the sum of `shares` N_Z(0, sigma^2), grid [-n W, n W], exact."""
  x = np.arange(-half_width, half_width + 1, dtype=float)
  one = -x**2 / (2 * sigma**2)
  one -= special.logsumexp(one)
  out = one
  for _ in range(shares - 1):
    out = _log_convolve(out, one)
  return out


def renyi(logpmf, shift, alpha):
  """D_alpha(X + shift || X) for X with this log pmf on an integer grid."""
  log_p, log_q = logpmf[:-shift], logpmf[shift:]
  return float(special.logsumexp(alpha * log_p + (1 - alpha) * log_q)
               / (alpha - 1))


def exact_epsilon(logpmf, shift, delta):
  """Smallest epsilon with the hockey-stick divergences <= delta (bisection)."""
  p, q = np.exp(logpmf[:-shift]), np.exp(logpmf[shift:])
  def hockey(eps):
    return max(np.sum(np.maximum(p - math.exp(eps) * q, 0)),
               np.sum(np.maximum(q - math.exp(eps) * p, 0)))
  lo, hi = 0.0, 60.0
  if hockey(0.0) <= delta:
    return 0.0
  for _ in range(100):
    mid = (lo + hi) / 2
    lo, hi = (lo, mid) if hockey(mid) <= delta else (mid, hi)
  return hi


# Small parameters where the discrete Gaussian's sum is far from Gaussian.
DDG_CASES = [(0.5, 2, 1), (0.5, 8, 1), (0.5, 3, 2), (0.75, 4, 1), (1.0, 3, 3), (2.0, 2, 4)]


@pytest.mark.parametrize("sigma,shares,shift", DDG_CASES)
def test_ddg_rdp_bounds_the_exact_renyi_divergence(sigma, shares, shift):
  logpmf = dgauss_sum_logpmf(sigma, shares, int(40 * sigma) + 10)
  for alpha in (1.5, 2.0, 4.0, 10.0):
    exact = renyi(logpmf, shift, alpha)
    bound = acc.ddg_rdp([alpha], l2_sensitivity=shift, l1_sensitivity=shift,
                        sigma=sigma, num_shares=shares, dim=1)[0]
    assert exact <= bound * (1 + 1e-9), (alpha, exact, bound)


def test_the_renyi_check_can_fail_without_tau():
  # Without Proposition 14's tau term (the continuous Gaussian's RDP with the
  # same total std), the exact divergence of a sum of 8 discrete Gaussians
  # with sigma = 1/2 is larger (by 14% at alpha = 1.5): the check above would
  # catch a missing tau.
  exact = renyi(dgauss_sum_logpmf(0.5, 8, 30), 1, 1.5)
  gaussian = acc.gaussian_rdp([1.5], math.sqrt(8) * 0.5)[0]
  assert exact > 1.1 * gaussian


@pytest.mark.parametrize("sigma,shares,shift", DDG_CASES)
def test_ddg_epsilon_is_at_least_the_exact_epsilon(sigma, shares, shift):
  logpmf = dgauss_sum_logpmf(sigma, shares, int(40 * sigma) + 10)
  exact = exact_epsilon(logpmf, shift, DELTA)
  rdp = acc.ddg_rdp(acc.REAL_ORDERS, l2_sensitivity=shift,
                    l1_sensitivity=shift, sigma=sigma, num_shares=shares,
                    dim=1)
  bound, _ = acc.rdp_epsilon(acc.REAL_ORDERS, rdp, DELTA)
  rho = acc.ddg_zcdp_rho(l2_sensitivity=shift, sigma=sigma,
                         num_shares=shares, dim=1)
  zcdp, _ = acc.rdp_epsilon(acc.REAL_ORDERS, rho * acc.REAL_ORDERS, DELTA)
  assert exact <= bound <= zcdp * (1 + 1e-12)
  assert exact > 0.3 * bound  # the reference is not trivially small


SKELLAM_CASES = [(0.5, 1), (2.0, 1), (2.0, 3), (10.0, 2), (50.0, 5)]


def skellam_logpmf(variance, half_width):
  """Sk(mu/2, mu/2): pmf(k) = exp(-mu) I_k(mu) = ive(k, mu), in logs."""
  k = np.abs(np.arange(-half_width, half_width + 1))
  return np.log(special.ive(k, variance))


@pytest.mark.parametrize("variance,shift", SKELLAM_CASES)
def test_skellam_rdp_bounds_the_exact_renyi_divergence(variance, shift):
  logpmf = skellam_logpmf(variance, int(30 * math.sqrt(variance)) + 40)
  assert math.isclose(np.exp(logpmf).sum(), 1.0, rel_tol=1e-12)
  for alpha in (2, 3, 8, 20):
    exact = renyi(logpmf, shift, alpha)
    bound = acc.skellam_rdp([alpha], l2_sensitivity=shift,
                            l1_sensitivity=shift, variance=variance)[0]
    assert exact <= bound * (1 + 1e-9), (alpha, exact, bound)
  exact_eps = exact_epsilon(logpmf, shift, DELTA)
  rdp = acc.skellam_rdp(acc.INTEGER_ORDERS, l2_sensitivity=shift,
                        l1_sensitivity=shift, variance=variance)
  assert exact_eps <= acc.rdp_epsilon(acc.INTEGER_ORDERS, rdp, DELTA)[0]


def test_the_skellam_check_can_fail_on_a_parametrization_slip():
  # Reading mu as each Poisson's mean (variance 2 mu, TFF's lam = std^2/2
  # confused) would halve the bound; the exact divergence is above that.
  exact = renyi(skellam_logpmf(10.0, 200), 1, 2)
  slipped = acc.skellam_rdp([2], l2_sensitivity=1, l1_sensitivity=1,
                            variance=20.0)[0]
  assert exact > 1.5 * slipped


# ------------------------------------------------------------ the conversion


@pytest.mark.parametrize("z", [0.3, 1.0, 4.0])
def test_rdp_epsilon_matches_dp_accountings_rdp_accountant(z):
  orders = acc.REAL_ORDERS
  accountant = dp_accounting.rdp.RdpAccountant(list(orders))
  accountant.compose(dp_accounting.GaussianDpEvent(z), 3)
  ours, _ = acc.rdp_epsilon(orders, 3 * acc.gaussian_rdp(orders, z), DELTA)
  assert ours == pytest.approx(accountant.get_epsilon(DELTA), rel=1e-12)


# ------------------------------------------------------------ limits


@pytest.mark.parametrize("mechanism", params.MECHANISMS)
def test_fine_rounding_and_large_shares_reach_the_gaussian(mechanism):
  # As bits grow the granularity 1/s shrinks and the shares' total variance
  # (integer units) grows: the DDG/Skellam epsilon tends to the continuous
  # Gaussian's RDP epsilon with the same sensitivity C and std z C.
  z, n, dim = 1.0, 10, 1000
  gauss_rdp, _ = acc.rdp_epsilon(acc.INTEGER_ORDERS,
                                 acc.gaussian_rdp(acc.INTEGER_ORDERS, z),
                                 DELTA)
  gaps = []
  for bits in (8, 12, 16, 20, 22):
    p = params.ddp_parameters(z, n, bits, 1.0, dim, mechanism=mechanism)
    gaps.append(acc.ddp_epsilon(p, delta=DELTA).epsilon - gauss_rdp)
  assert all(g >= -1e-9 for g in gaps)
  assert all(a >= b - 1e-9 for a, b in zip(gaps, gaps[1:]))
  assert gaps[-1] < 2e-3 * gauss_rdp
  # The RDP route costs a little against the exact Gaussian epsilon (Balle &
  # Wang): between 0 and 15% at these epsilons, the conversion's known slack.
  exact = gaussian_accounting.gaussian_epsilon(z, DELTA)
  assert exact < gauss_rdp < 1.15 * exact


@pytest.mark.parametrize("mechanism", params.MECHANISMS)
def test_epsilon_falls_with_noise_and_bits(mechanism):
  def eps(z, bits, beta=0.0):
    p = params.ddp_parameters(z, 40, bits, 0.5, 4096, beta=beta,
                              mechanism=mechanism)
    return acc.ddp_epsilon(p, delta=DELTA).epsilon
  by_noise = [eps(z, 16) for z in (0.3, 0.6, 1.0, 2.0, 4.0, 8.0)]
  assert all(a > b for a, b in zip(by_noise, by_noise[1:]))
  by_bits = [eps(1.0, b) for b in (7, 8, 10, 12, 16, 20)]
  assert all(a >= b for a, b in zip(by_bits, by_bits[1:]))
  assert by_bits[0] > 2 * by_bits[-1]  # coarse rounding inflates a lot
  # Conditional rounding (beta > 0) inflates the sensitivity less.
  assert eps(1.0, 8, beta=math.exp(-0.5)) < eps(1.0, 8)


def test_participations_compose():
  p = params.ddp_parameters(2.0, 40, 16, 1.0, 4096)
  once = acc.ddp_epsilon(p, delta=DELTA)
  four = acc.ddp_epsilon(p, delta=DELTA, participations=4)
  assert four.epsilon > once.epsilon
  # 4 compositions of z equal one release at z / 2 in RDP: same epsilon as a
  # factory with half the noise multiplier, up to the rounding inflation.
  half = acc.ddp_epsilon(params.ddp_parameters(1.0, 40, 16, 1.0, 4096),
                         delta=DELTA)
  assert four.epsilon == pytest.approx(half.epsilon, rel=2e-2)
  assert four.nominal_epsilon == pytest.approx(
      gaussian_accounting.gaussian_epsilon(1.0, DELTA))


def test_fewer_shares_than_claimed_raise_epsilon():
  p = params.ddp_parameters(2.0, 40, 16, 1.0, 4096)
  full = acc.ddp_epsilon(p, delta=DELTA).epsilon
  assert acc.ddp_epsilon(p, delta=DELTA, num_shares=10).epsilon > 1.5 * full


# ------------------------------------------------------------ samplers


def test_discrete_gaussian_sampler_matches_its_pmf():
  rng = np.random.default_rng(3)
  draws = discrete_noise.discrete_gaussian(rng, 2, 200_000)
  x = np.arange(-30, 31)
  pmf = np.exp(-x**2 / 8.0)
  pmf /= pmf.sum()
  counts = np.array([np.count_nonzero(draws == v) for v in x[20:41]])
  expected = 200_000 * pmf[20:41]
  chi2 = np.sum((counts - expected)**2 / expected)
  # 21 cells: chi2 with 20 dof exceeds 45 with probability ~1e-3.
  assert chi2 < 45
  assert np.var(discrete_noise.discrete_gaussian_sum(rng, 1, 5, 100_000)) == (
      pytest.approx(5 * (1 - 2.1e-7), rel=0.02))  # 2% ~ 4.5 SEs of a variance


def test_discrete_gaussian_variance_is_sigma_squared_to_3e7():
  for sigma in (1.0, 1.5, 3.0):
    x = np.arange(-400, 401, dtype=float)
    w = np.exp(-x**2 / (2 * sigma**2))
    assert -1e-12 <= 1 - (w * x * x).sum() / w.sum() / sigma**2 < 3e-7


# ------------------------------------------------------------ bad input


@pytest.mark.parametrize("kwargs,error,match", [
    (dict(bits=0), ValueError, "bits"),
    (dict(bits=23), ValueError, "bits"),
    (dict(bits=4, clients_per_round=40), ValueError, "log2"),
    (dict(bits=2.5), TypeError, "bits"),
    (dict(mechanism="gauss"), ValueError, "mechanism"),
    (dict(beta=1.0), ValueError, "beta"),
    (dict(modclip_prob=0.0), ValueError, "modclip_prob"),
    (dict(l2_clip=0.0), ValueError, "l2_clip"),
    (dict(noise_multiplier=-1.0), ValueError, "noise_multiplier"),
    (dict(rotation="fft"), ValueError, "rotation"),
])
def test_bad_parameters(kwargs, error, match):
  args = dict(noise_multiplier=1.0, clients_per_round=10, bits=16,
              l2_clip=1.0, dim=100)
  args.update(kwargs)
  with pytest.raises(error, match=match):
    params.ddp_parameters(**args)


def test_bad_accounting_input():
  with pytest.raises(ValueError, match="sigma"):
    acc.ddg_rdp([2.0], l2_sensitivity=1, l1_sensitivity=1, sigma=0.3,
                num_shares=2, dim=1)
  with pytest.raises(ValueError, match="orders"):
    acc.skellam_rdp([2.5], l2_sensitivity=1, l1_sensitivity=1, variance=4)
  with pytest.raises(ValueError, match="rdp"):
    acc.rdp_epsilon([2.0, 3.0], [0.1], DELTA)
  with pytest.raises(ValueError, match="delta"):
    acc.rdp_epsilon([2.0], [0.1], 1.0)
  with pytest.raises(TypeError, match="parameters"):
    acc.ddp_epsilon({"bits": 16}, delta=DELTA)
  with pytest.raises(ValueError, match="participations"):
    acc.ddp_epsilon(params.ddp_parameters(1.0, 10, 16, 1.0, 100),
                    delta=DELTA, participations=0)


def test_no_noise_is_infinite_epsilon():
  p = params.ddp_parameters(0.0, 10, 16, 1.0, 100)
  assert acc.ddp_epsilon(p, delta=DELTA).epsilon == math.inf
  p = params.ddp_parameters(0.0, 10, 16, 1.0, 100,
                            mechanism="distributed_dgauss")
  assert acc.ddp_epsilon(p, delta=DELTA).epsilon == math.inf
