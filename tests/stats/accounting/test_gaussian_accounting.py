"""Tests of tff_canary.stats.accounting.gaussian_accounting: the exact Gaussian epsilon.

Independent references used here: mpmath at 50 digits for the Balle-Wang
delta (mpmath ships with dp-accounting), dp_accounting's GaussianPrivacyLoss,
and dp_accounting's PLD accountant composing Gaussians by convolution
(`pld_reference`).
"""

from __future__ import annotations

import math
import time

import dp_accounting
from dp_accounting.pld import privacy_loss_mechanism
import mpmath
import numpy as np
import pytest

import pld_reference
from tff_canary.stats.accounting.gaussian_accounting import gaussian_delta
from tff_canary.stats.accounting.gaussian_accounting import gaussian_epsilon
from tff_canary.stats.accounting.gaussian_accounting import gaussian_noise_multiplier
from tff_canary.stats.accounting.gaussian_accounting import repeated_epsilon

mpmath.mp.dps = 50

# docs/method/reference-numbers.md: delta = n^-1.1 with n = 341,000 clients.
STACKOVERFLOW_DELTA = 341000**-1.1

# The grid of the brief: epsilon 0.05..300, delta 1e-10..1e-2.
GRID_EPSILONS = (0.05, 0.2, 1.0, 3.0, 10.0, 30.0, 100.0, 300.0)
GRID_DELTAS = (1e-10, 1e-8, 1e-6, 1e-4, 1e-2)


def mp_delta(noise_multiplier, epsilon):
  """Balle & Wang (2018) Theorem 8 delta at 50 digits, as an mpf."""
  z = mpmath.mpf(noise_multiplier)
  eps = mpmath.mpf(epsilon)
  return (mpmath.ncdf(1 / (2 * z) - eps * z) -
          mpmath.exp(eps) * mpmath.ncdf(-1 / (2 * z) - eps * z))



def three_significant(x):
  return float(f"{x:.3g}")


# ---------------------------------------------------------------------------
# gaussian_epsilon: docs/method/reference-numbers.md.


@pytest.mark.parametrize("noise_multiplier, paper_epsilon", [
    (0.0496, 299.0), (0.0986, 99.2), (0.2317, 29.3)])
def test_reproduces_stackoverflow_analytical_epsilons(noise_multiplier,
                                                      paper_epsilon):
  epsilon = gaussian_epsilon(noise_multiplier, STACKOVERFLOW_DELTA)
  assert three_significant(epsilon) == paper_epsilon


@pytest.mark.parametrize("paper_noise_multiplier, paper_epsilon", [
    (4.22, 1.0), (1.54, 3.0), (0.541, 10.0)])
def test_reproduces_gaussian_mechanism_calibration(paper_noise_multiplier,
                                                   paper_epsilon):
  # The paper rounds sigma to 3 significant digits. The exact sigma for its
  # epsilon must round to the stated sigma, and the stated epsilon must lie in
  # the epsilon range of the stated sigma's rounding interval.
  exact = gaussian_noise_multiplier(paper_epsilon, 1e-6)
  assert three_significant(exact) == paper_noise_multiplier
  half_unit = 0.5 * 10**(math.floor(math.log10(paper_noise_multiplier)) - 2)
  low = gaussian_epsilon(paper_noise_multiplier + half_unit, 1e-6)
  high = gaussian_epsilon(paper_noise_multiplier - half_unit, 1e-6)
  assert low <= paper_epsilon <= high
  # And the epsilon of the stated sigma, to the paper's two digits.
  epsilon = gaussian_epsilon(paper_noise_multiplier, 1e-6)
  assert float(f"{epsilon:.2g}") == paper_epsilon
  print(f"\nepsilon {paper_epsilon} at delta 1e-6: exact sigma {exact!r}; "
        f"sigma {paper_noise_multiplier} gives epsilon {epsilon!r}")


# ---------------------------------------------------------------------------
# gaussian_epsilon: precision against independent references.


@pytest.mark.parametrize("delta", GRID_DELTAS)
def test_delta_at_returned_epsilon_matches_mpmath(delta):
  # Round trip through the calibration, then the delta at the returned epsilon
  # evaluated at 50 digits by mpmath must be the requested delta to 1e-9.
  # Measured worst case on this grid: about 1e-12 (the conditioning of delta
  # in epsilon, not the root finder, sets it).
  for target in GRID_EPSILONS:
    z = gaussian_noise_multiplier(target, delta)
    epsilon = gaussian_epsilon(z, delta)
    assert epsilon == pytest.approx(target, rel=1e-9, abs=0)
    exact = mp_delta(z, epsilon)
    assert float(abs(exact - delta) / delta) < 1e-9, (target, delta, z)


@pytest.mark.parametrize("delta", GRID_DELTAS)
def test_agrees_with_dp_accounting_gaussian_privacy_loss(delta):
  # dp_accounting's own exact Balle-Wang delta (linear-space Phi(a)): at our
  # epsilon it must give the requested delta to 1e-9 relative.
  for target in GRID_EPSILONS:
    z = gaussian_noise_multiplier(target, delta)
    epsilon = gaussian_epsilon(z, delta)
    loss = privacy_loss_mechanism.GaussianPrivacyLoss(standard_deviation=z,
                                                      sensitivity=1)
    assert loss.get_delta_for_epsilon(epsilon) == pytest.approx(
        delta, rel=1e-9, abs=0)


def test_gaussian_delta_matches_mpmath():
  for z in (0.0496, 0.3, 1.0, 4.22, 50.0):
    for epsilon in (0.0, 0.01, 1.0, 10.0, 100.0):
      exact = mp_delta(z, epsilon)
      if exact < mpmath.mpf("1e-300"):
        continue
      assert gaussian_delta(z, epsilon) == pytest.approx(
          float(exact), rel=1e-10, abs=0), (z, epsilon)
  assert gaussian_delta(0.0, 5.0) == 1.0


def test_tiny_delta_below_normal_doubles():
  # delta = 1e-315 is subnormal; the log-space evaluation still solves it.
  for z in (0.0496, 0.5, 5.0):
    epsilon = gaussian_epsilon(z, 1e-315)
    assert float(abs(mp_delta(z, epsilon) - mpmath.mpf("1e-315")) /
                 mpmath.mpf("1e-315")) < 1e-8


def test_agrees_with_pld_accountant_on_one_gaussian():
  # The pessimistic PLD is an upper bound; with interval 1e-4 a single
  # Gaussian is within 1e-4 of exact (measured gap: 1e-7 to 5e-7).
  for z, delta in ((0.2317, STACKOVERFLOW_DELTA), (0.541, 1e-6),
                   (1.0, 1e-5), (4.22, 1e-6)):
    exact = gaussian_epsilon(z, delta)
    pld = pld_reference.pld_epsilon(dp_accounting.GaussianDpEvent(z), delta,
                                    1e-4)
    assert exact - 1e-9 <= pld <= exact + 1e-4, (z, delta, exact, pld)


def test_monotone():
  zs = np.geomspace(0.02, 200.0, 60)
  epsilons = [gaussian_epsilon(z, 1e-6) for z in zs]
  assert all(np.diff(epsilons) <= 0)
  assert epsilons[0] > 1000 and epsilons[-1] < 0.05
  deltas = np.geomspace(1e-12, 0.5, 40)
  epsilons = [gaussian_epsilon(1.0, d) for d in deltas]
  assert all(np.diff(epsilons) < 0)
  targets = np.geomspace(0.01, 500.0, 40)
  zs = [gaussian_noise_multiplier(e, 1e-6) for e in targets]
  assert all(np.diff(zs) < 0)


def test_degenerate_ends():
  delta = 1e-6
  # No noise: no privacy.
  assert gaussian_epsilon(0.0, delta) == math.inf
  assert gaussian_epsilon(1e-200, delta) == math.inf
  # Tiny noise: huge but finite, and still exact (mpmath).
  epsilon = gaussian_epsilon(1e-3, delta)
  assert 5e5 < epsilon < 5.1e5
  assert float(abs(mp_delta(1e-3, epsilon) - delta) / delta) < 1e-9
  # epsilon is exactly 0 from z0 = 1 / (2 sqrt(2) erfinv(delta)) upwards,
  # where delta_z(0) = erf(1/(2 sqrt(2) z)) = delta.
  z0 = gaussian_noise_multiplier(0.0, delta)
  assert float(mpmath.erf(1 / (2 * mpmath.sqrt(2) * mpmath.mpf(z0)))) == (
      pytest.approx(delta, rel=1e-12))
  assert gaussian_epsilon(z0 * (1 + 1e-9), delta) == 0.0
  assert gaussian_epsilon(1e6, delta) == 0.0
  assert gaussian_epsilon(z0, delta) < 1e-12
  assert 0.0 < gaussian_epsilon(z0 * (1 - 1e-6), delta)
  # delta near 1: moderate noise already gives epsilon 0.
  assert gaussian_epsilon(1.0, 0.999) == 0.0


def test_epsilon_300_is_fast(record_property):
  start = time.perf_counter()
  for _ in range(100):
    epsilon = gaussian_epsilon(0.0496, STACKOVERFLOW_DELTA)
  seconds = (time.perf_counter() - start) / 100
  record_property("gaussian_epsilon_300_seconds", seconds)
  print(f"\ngaussian_epsilon at epsilon {epsilon:.4g}: {seconds * 1e3:.3f} ms")
  assert 298.9 < epsilon < 299.1


# ---------------------------------------------------------------------------
# gaussian_noise_multiplier: the inverse.


def test_noise_multiplier_round_trip():
  for delta in GRID_DELTAS + (STACKOVERFLOW_DELTA,):
    for z in np.geomspace(0.03, 30.0, 25):
      epsilon = gaussian_epsilon(z, delta)
      if epsilon == 0.0:
        continue
      assert gaussian_noise_multiplier(epsilon, delta) == (
          pytest.approx(z, rel=1e-9, abs=0)), (z, delta)


# ---------------------------------------------------------------------------
# repeated_epsilon.


@pytest.mark.parametrize("z, participations", [(1.0, 2), (2.0, 5), (3.0, 9)])
def test_repeated_epsilon_matches_pld_composition(z, participations):
  # Independent: the PLD accountant convolves `participations` separate
  # Gaussian PLDs (a ComposedDpEvent, not its own z/sqrt(r) shortcut). The
  # pessimistic PLD with interval 1e-4 is above exact by at most 1e-3 here
  # (measured: below 1e-5).
  delta = 1e-6
  exact = repeated_epsilon(z, participations, delta)
  assert exact == gaussian_epsilon(z / math.sqrt(participations),
                                              delta)
  event = dp_accounting.ComposedDpEvent(
      [dp_accounting.GaussianDpEvent(z)] * participations)
  pld = pld_reference.pld_epsilon(event, delta, 1e-4)
  assert exact - 1e-9 <= pld <= exact + 1e-3


def test_repeated_epsilon_grows_with_participations():
  values = [repeated_epsilon(1.0, r, 1e-6) for r in range(1, 20)]
  assert all(np.diff(values) > 0)
  assert repeated_epsilon(0.0, 3, 1e-6) == math.inf
