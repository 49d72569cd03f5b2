"""Lower-triangular Toeplitz strategies C, given by their coefficients.

A matrix mechanism in DP-FTRL's streaming form releases y = x + C^-1 xi for a
lower-triangular invertible strategy C (Choquette-Choo et al. 2023, arXiv
2306.08153; Denisov et al. 2022, arXiv 2202.08312). A Toeplitz C is given by
its first column c_0, c_1, ... (C[t, s] = c_{t-s} for t >= s), equivalently
by the power series c(x) = sum_i c_i x^i; products of such matrices are
products of series, so C^-1 is the Toeplitz matrix of 1 / c(x).

The square root of the prefix-sum matrix A (A = C C, Fichtenberger,
Henzinger & Upadhyay 2023, arXiv 2202.11205; optimal for the max error under
one participation, Dvijotham et al. 2024, arXiv 2404.16706) has the
coefficients of (1 - x)^(-1/2):

    c_i = binom(2i, i) / 4^i,    c_0 = 1,  c_i = c_{i-1} (2i - 1) / (2i),

computed here by that recurrence (a product of ratios below 1: no binomial
overflows). Keeping c_0 .. c_{b-1} gives the b-banded square root
(Choquette-Choo et al. 2023, "banded matrix factorization").

NumPy only.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from tff_canary.stats import validation


def as_coefficients(coefficients: Any,
                    name: str = "coefficients") -> np.ndarray:
  """Finite 1-D float64 c_0, c_1, ... with c_0 != 0 (C invertible)."""
  c = validation.as_sample(coefficients, name, min_size=1)
  if c[0] == 0.0:
    raise ValueError(f"{name}[0] must be nonzero (C is invertible only with a "
                     f"nonzero diagonal), got {validation.show(c.tolist())}.")
  return c


def padded(coefficients: Any, rounds: int) -> np.ndarray:
  """The first `rounds` coefficients, zeros past the given ones."""
  c = as_coefficients(coefficients)
  n = validation.as_int(rounds, "rounds", minimum=1)
  out = np.zeros(n)
  out[:min(n, c.size)] = c[:n]
  return out


def square_root_coefficients(count: int) -> np.ndarray:
  """c_0 .. c_{count-1} of (1 - x)^(-1/2): binom(2i, i) / 4^i (module doc).

  The full square root for `count` = rounds; the banded square root with b
  bands for `count` = b.
  """
  count = validation.as_int(count, "count", minimum=1)
  i = np.arange(1, count)
  return np.concatenate([[1.0], np.cumprod((2.0 * i - 1.0) / (2.0 * i))])


def inverse_coefficients(coefficients: Any, rounds: int) -> np.ndarray:
  """d_0 .. d_{rounds-1}, the coefficients of 1 / c(x): C^-1's first column.

  From c(x) d(x) = 1: d_0 = 1 / c_0 and d_t = -(sum_{i=1}^{min(t, b-1)} c_i
  d_{t-i}) / c_0 for b given coefficients, O(rounds * b).
  """
  c = as_coefficients(coefficients)
  n = validation.as_int(rounds, "rounds", minimum=1)
  c = c[:n]
  d = np.zeros(n)
  d[0] = 1.0 / c[0]
  for t in range(1, n):
    m = min(t, c.size - 1)
    d[t] = -np.dot(c[1:m + 1], d[t - 1::-1][:m]) / c[0]
  return d


def strategy_matrix(coefficients: Any, rounds: int) -> np.ndarray:
  """C, dense [rounds, rounds]: C[t, s] = c_{t-s} for t >= s, else 0."""
  c = padded(coefficients, rounds)
  lag = np.arange(c.size)[:, None] - np.arange(c.size)[None, :]
  return np.where(lag >= 0, c[np.clip(lag, 0, None)], 0.0)


def noise_matrix(coefficients: Any, rounds: int) -> np.ndarray:
  """B = C^-1, dense [rounds, rounds]: the released noise is B xi."""
  return strategy_matrix(inverse_coefficients(coefficients, rounds), rounds)


def column_norms(coefficients: Any, rounds: int) -> np.ndarray:
  """||C e_s|| for s = 0 .. rounds-1: column s holds c_0 .. c_{rounds-1-s}."""
  c = padded(coefficients, rounds)
  return np.sqrt(np.cumsum(c * c))[::-1]


def nonincreasing_violation(coefficients: Any) -> str | None:
  """Why c_0, c_1, ... is not nonnegative and non-increasing, or None if it is.

  The condition of the structural sensitivity (`sensitivity`); a relative
  slack of 1e-12 * |c_0| absorbs the rounding of computed coefficients.
  """
  c = as_coefficients(coefficients)
  slack = 1e-12 * abs(c[0])
  negative = np.flatnonzero(c < -slack)
  if negative.size:
    i = int(negative[0])
    return f"coefficient c_{i} = {validation.show(c[i])} is negative"
  rising = np.flatnonzero(np.diff(c) > slack)
  if rising.size:
    i = int(rising[0])
    return (f"coefficients rise from c_{i} = {validation.show(c[i])} to "
            f"c_{i + 1} = {validation.show(c[i + 1])}")
  return None


__all__ = ["as_coefficients", "column_norms", "inverse_coefficients",
           "noise_matrix", "nonincreasing_violation",
           "padded", "square_root_coefficients", "strategy_matrix"]
