"""A Toeplitz strategy's released noise as a `LinearNoise`, and a pattern's mu.

The streaming release y = x + C^-1 xi is a `linear_noise.LinearNoise` with
the square B = C^-1 (one node per round; Choquette-Choo et al. 2023, arXiv
2306.08153), so the correlated-noise statistics, self-test and audit of
`tff_canary.stats.correlated` apply with K = B B^T = C^-1 C^-T. A canary on
0/1 pattern a (at norm equal to the clip) then has GLS statistic T ~ N(mu_a,
1) with

    mu_a = sqrt(a^T K^-1 a) / z = ||C a|| / z,

since K^-1 = C^T C: the release is equivalent to C x + xi (C invertible).
Over the allowed patterns the largest mu_a is `sensitivity.Sensitivity.value`
/ z, the accounting's own mu (`analytical`).

NumPy only.
"""

from __future__ import annotations

import dataclasses
from typing import Any, ClassVar, Optional

import numpy as np

from tff_canary.stats.correlated import linear_noise
from tff_canary.stats.matrix import toeplitz
from tff_canary.stats import validation


@dataclasses.dataclass(frozen=True)
class StrategyNoise(linear_noise.LinearNoise):
  """A strategy's released noise: a `LinearNoise` with B = C^-1 per block,
  called "matrix" noise in the audit's text."""

  kind: ClassVar[str] = "matrix"


def strategy_noise(coefficients: Any, rounds: int,
                   restart_every: Optional[int] = None
                   ) -> StrategyNoise:
  """The `StrategyNoise` with B = C^-1, [rounds, rounds].

  Args:
    coefficients: C's c_0, c_1, ...
    rounds: n.
    restart_every: None for one C over all rounds (one block); E for the
      noise restarted every E rounds (an epoch): B is block-diagonal with
      blocks C_E^-1 (the last one shorter if E does not divide n), one
      `LinearNoise` block each, so `LinearNoise.release_mu` gives the
      accounting of one participation per epoch.
  """
  n = validation.as_int(rounds, "rounds", minimum=1)
  e = n if restart_every is None else validation.as_int(
      restart_every, "restart_every", minimum=1)
  released = np.zeros((n, n))
  for start in range(0, n, e):
    size = min(e, n - start)
    released[start:start + size, start:start + size] = (
        toeplitz.noise_matrix(coefficients, size))
  noise = linear_noise.linear_noise(
      released, round_block=np.arange(n, dtype=np.int64) // e)
  return StrategyNoise(released=noise.released, round_block=noise.round_block)


def pattern_mu(coefficients: Any, pattern: Any, *,
               noise_multiplier: float) -> float:
  """mu_a = ||C a|| / z for a [rounds] 0/1 (or Boolean) pattern a."""
  z = validation.as_positive(noise_multiplier, "noise_multiplier")
  a = np.asarray(pattern)
  a = validation.as_counts(a.astype(np.int64) if a.dtype == bool else a,
                           "pattern", maximum=1)
  image = toeplitz.strategy_matrix(coefficients, a.size) @ a
  return float(np.linalg.norm(image)) / z


__all__ = ["StrategyNoise", "pattern_mu", "strategy_noise"]
