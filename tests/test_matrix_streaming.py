"""Streamed noise equals C^-1 xi for the same xi (banded and BLT strategies).

The streams keep only b - 1 past rounds or one buffer per BLT pair; the
dense B = C^-1 (`toeplitz.noise_matrix`) is computed independently (series
inverse of the coefficients). Float64 throughout: the tolerance is rounding.
"""

import numpy as np
import pytest

from tff_canary.stats.matrix import blt, streaming, toeplitz

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
