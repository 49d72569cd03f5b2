"""Streamed noise equals C^-1 xi for the same xi (banded and BLT strategies).

The streams keep only b - 1 past rounds or one buffer per BLT pair; the
dense B = C^-1 (`toeplitz.noise_matrix`) is computed independently (series
inverse of the coefficients). Float64 throughout: the tolerance is rounding.
Last, canaries scored against streamed noise on the worst-case pattern have
the GLS statistic the analytical mu predicts.
"""

import numpy as np
import pytest

from tff_canary.stats.correlated import gls_statistics
from tff_canary.stats.matrix import (analytical, blt, sensitivity, streaming,
                                     strategy_noise, toeplitz)

ROUNDS = 40
SHAPE = (3, 2)


def _fresh(seed=0):
  return np.random.default_rng(seed).normal(size=(ROUNDS,) + SHAPE)


def _dense(coefficients, fresh):
  b = toeplitz.noise_matrix(coefficients, ROUNDS)
  return np.tensordot(b, fresh, axes=1)


@pytest.mark.parametrize("bands", [1, 2, 7, ROUNDS])
def test_banded_stream_is_the_inverse_applied_to_the_same_noise(bands):
  c = toeplitz.square_root_coefficients(bands)
  fresh = _fresh()
  streamed = streaming.stream(streaming.BandedNoise(c, SHAPE), fresh)
  np.testing.assert_allclose(streamed, _dense(c, fresh), atol=1e-12)


def test_banded_stream_with_any_coefficients():
  c = [1.5, -0.4, 0.25]
  fresh = _fresh(1)
  streamed = streaming.stream(streaming.BandedNoise(c, SHAPE), fresh)
  np.testing.assert_allclose(streamed, _dense(c, fresh), atol=1e-12)


@pytest.mark.parametrize("scales,decays", [
    ([0.3, 0.1], [0.5, 0.95]),
    ([0.2, 0.15, 0.05], [0.3, 0.8, 0.99]),
])
def test_blt_stream_is_the_inverse_applied_to_the_same_noise(scales, decays):
  strategy = blt.blt(output_scale=scales, buf_decay=decays)
  fresh = _fresh(2)
  noise = streaming.BltNoise(strategy, SHAPE)
  streamed = streaming.stream(noise, fresh)
  assert noise.buffers.shape == (len(scales),) + SHAPE
  np.testing.assert_allclose(
      streamed, _dense(strategy.coefficients(ROUNDS), fresh), atol=1e-12)


def test_a_round_of_the_wrong_shape_is_refused():
  noise = streaming.BandedNoise([1.0, 0.5], SHAPE)
  with pytest.raises(ValueError, match=r"fresh must have the noise's shape "
                     r"\(3, 2\), got shape \(6,\)"):
    noise.next(np.zeros(6))
  with pytest.raises(TypeError, match="strategy must be a BLT"):
    streaming.BltNoise([0.5], SHAPE)


@pytest.mark.parametrize("strategy", ["banded", "blt"])
def test_canaries_on_the_worst_case_pattern_have_the_analytical_mu(strategy):
  # End to end: the streamed noise (not C^-1 itself), the GLS statistic of
  # gls_statistics with the strategy's K, and the structural a*. Each of
  # the 4,000 canaries' scores u_j = a*/z + w_j, w_j streamed from fresh
  # xi_j (the canaries are the noise's coordinates). T_j ~ N(sens/z, 1):
  # its sample mean has SE 1/sqrt(4000) = 0.016 and its sample variance SE
  # sqrt(2/4000) = 0.022; the tolerances are 4 SE (fixed seed).
  n, k, b, z, m = 48, 3, 16, 1.2, 4000
  if strategy == "banded":
    c = toeplitz.square_root_coefficients(8)
    noise = streaming.BandedNoise(c, (m,))
  else:
    fitted = blt.blt([0.3, 0.1], [0.5, 0.95])
    c = fitted.coefficients(n)
    noise = streaming.BltNoise(fitted, (m,))
  worst = sensitivity.toeplitz_sensitivity(c, rounds=n, participations=k,
                                           separation=b)
  claim = analytical.matrix_epsilon(worst, noise_multiplier=z, delta=1e-5)
  fresh = np.random.default_rng(7).normal(size=(n, m))
  scores = worst.schedule(m) / z + streaming.stream(noise, fresh).T
  statistic = gls_statistics.scheduled_statistic(
      scores, worst.schedule(m), strategy_noise.strategy_noise(c, n))
  assert abs(statistic.mean() - claim.mu) < 4 * 0.016
  assert abs(statistic.var() - 1.0) < 4 * 0.022
