"""Samplers of the integer noise of distributed DP, in NumPy.

* `discrete_gaussian`: N_Z(0, sigma^2), P[x] proportional to
  exp(-x^2 / (2 sigma^2)) on the integers, sampled exactly by rejection from
  the discrete Laplace with scale t = sigma (Canonne, Kamath & Steinke 2020,
  arXiv 2004.00010, Algorithm 3, which accepts y with probability
  exp(-(|y| - sigma^2/t)^2 / (2 sigma^2)) for any t > 0). tensorflow_privacy's
  sampler makes the same choice t = sigma for integer sigma; the discrete
  Laplace is the difference of two geometric variables with success
  probability 1 - exp(-1/t).
* `skellam`: Poisson(lam) - Poisson(lam), variance 2 lam
  (tensorflow_privacy's `DistributedSkellamSumQuery` with lam = std^2 / 2).
  A sum of independent Skellams is Skellam with the summed lam, so the sum of
  n shares is drawn in one step.
"""

from __future__ import annotations

import math

import numpy as np

from tff_canary.stats import validation


def discrete_gaussian(rng: np.random.Generator, sigma: int,
                      size: int) -> np.ndarray:
  """`size` draws of N_Z(0, sigma^2) for an integer sigma >= 1 (int64)."""
  sigma = validation.as_int(sigma, "sigma", minimum=1)
  size = validation.as_int(size, "size", minimum=0)
  p = -math.expm1(-1.0 / sigma)
  out = np.empty(size, dtype=np.int64)
  filled = 0
  while filled < size:
    m = int(1.6 * (size - filled)) + 64  # acceptance is about 0.7
    y = rng.geometric(p, m) - rng.geometric(p, m)
    keep = rng.random(m) < np.exp(-(np.abs(y) - sigma)**2 / (2.0 * sigma**2))
    y = y[keep][: size - filled]
    out[filled: filled + y.size] = y
    filled += y.size
  return out


def discrete_gaussian_sum(rng: np.random.Generator, sigma: int, shares: int,
                          size: int) -> np.ndarray:
  """The sum of `shares` independent N_Z(0, sigma^2) vectors of length size."""
  shares = validation.as_int(shares, "shares", minimum=1)
  total = np.zeros(size, dtype=np.int64)
  for _ in range(shares):
    total += discrete_gaussian(rng, sigma, size)
  return total


def skellam(rng: np.random.Generator, lam: float, size: int) -> np.ndarray:
  """`size` draws of Poisson(lam) - Poisson(lam) (int64); lam = 0 gives 0."""
  lam = validation.as_nonnegative(lam, "lam")
  size = validation.as_int(size, "size", minimum=0)
  return (rng.poisson(lam, size) - rng.poisson(lam, size)).astype(np.int64)


__all__ = ["discrete_gaussian", "discrete_gaussian_sum", "skellam"]
