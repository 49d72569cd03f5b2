"""Streaming noise w = C^-1 xi of a Toeplitz strategy, one round at a time.

DP-FTRL in streaming form adds w_t, row t of C^-1 xi, to round t's sum
(Choquette-Choo et al. 2023, arXiv 2306.08153): xi_t is fresh N(0, sigma^2)
noise of the model's shape, and w_t is found from xi_t and a state of a few
past vectors, without C^-1 in memory:

* banded C with b bands (c_i = 0 for i >= b; Choquette-Choo et al. 2023,
  Alg. 9): C w = xi row t reads sum_{i<b} c_i w_{t-i} = xi_t, so

      w_t = (xi_t - sum_{i=1}^{b-1} c_i w_{t-i}) / c_0,

  keeping the b - 1 last w (`BandedNoise`, O(b d) memory);
* BLT C (`blt`; McMahan, Xu & Zhang 2024, arXiv 2408.08868, Alg. 3): with
  buffers s_i = sum_{j<t} theta_i^(t-1-j) w_j, row t of C w = xi reads
  w_t + sum_i omega_i s_i = xi_t, so

      w_t = xi_t - sum_i omega_i s_i,    then s_i <- theta_i s_i + w_t,

  one buffer per (omega_i, theta_i) pair (`BltNoise`, O(m d) memory). The
  inverse is itself a BLT with as many buffers (McMahan & Pillutla 2025,
  arXiv 2504.21413), so the memory is that of multiplying by C^-1 directly.

Both are exact: the streamed rows equal `toeplitz.noise_matrix` @ xi up to
floating point (tests/stats/matrix/test_streaming.py).

NumPy only.
"""

from __future__ import annotations

from typing import Any, Protocol, Sequence

import numpy as np

from tff_canary.stats.matrix import blt as blt_lib
from tff_canary.stats.matrix import toeplitz
from tff_canary.stats import validation


class StreamingNoise(Protocol):
  """Turns round t's fresh noise xi_t into its correlated noise w_t."""

  def next(self, fresh: np.ndarray) -> np.ndarray:
    ...


def _shape(shape: Sequence[int]) -> tuple[int, ...]:
  return tuple(validation.as_int(s, f"shape[{i}]", minimum=1)
               for i, s in enumerate(shape))


def _fresh(fresh: Any, shape: tuple[int, ...]) -> np.ndarray:
  xi = np.asarray(fresh, dtype=np.float64)
  if xi.shape != shape:
    raise ValueError(f"fresh must have the noise's shape {shape}, got shape "
                     f"{xi.shape}.")
  return xi


class BandedNoise:
  """w = C^-1 xi for a banded Toeplitz C, keeping the b - 1 last w."""

  def __init__(self, coefficients: Any, shape: Sequence[int]):
    """Args: coefficients c_0 .. c_{b-1} (b bands); shape: one round's."""
    self.coefficients = toeplitz.as_coefficients(coefficients)
    self.shape = _shape(shape)
    self.past = np.zeros((self.coefficients.size - 1,) + self.shape)

  def next(self, fresh: Any) -> np.ndarray:
    """w_t from xi_t (module docstring); updates the past w."""
    xi = _fresh(fresh, self.shape)
    c = self.coefficients
    w = (xi - np.tensordot(c[1:], self.past, axes=1)) / c[0]
    if self.past.shape[0]:
      self.past = np.roll(self.past, 1, axis=0)
      self.past[0] = w
    return w


class BltNoise:
  """w = C^-1 xi for a BLT C, one buffer per (output_scale, buf_decay) pair."""

  def __init__(self, strategy: blt_lib.BLT, shape: Sequence[int]):
    if not isinstance(strategy, blt_lib.BLT):
      raise TypeError(f"strategy must be a BLT (blt.blt), got "
                      f"{validation.show(strategy)}.")
    self.strategy = strategy
    self.shape = _shape(shape)
    self.buffers = np.zeros((strategy.num_buffers,) + self.shape)

  def next(self, fresh: Any) -> np.ndarray:
    """w_t from xi_t (module docstring); decays the buffers and adds w_t."""
    xi = _fresh(fresh, self.shape)
    omega, theta = self.strategy.output_scale, self.strategy.buf_decay
    w = xi - np.tensordot(omega, self.buffers, axes=1)
    decay = theta.reshape((-1,) + (1,) * len(self.shape))
    self.buffers = decay * self.buffers + w
    return w


def stream(noise: StreamingNoise, fresh: Any) -> np.ndarray:
  """The rows w_0, w_1, ... of `noise` fed the rows of fresh ([rounds, ...])."""
  rows = np.asarray(fresh, dtype=np.float64)
  if rows.ndim < 1 or rows.shape[0] == 0:
    raise ValueError(f"fresh must hold at least one round, got shape "
                     f"{rows.shape}.")
  return np.stack([noise.next(row) for row in rows])


__all__ = ["BandedNoise", "BltNoise", "StreamingNoise", "stream"]
