"""Sensitivity of a strategy C under b-min-separated participation, and its worst case.

A participant contributes (at norm 1) to at most k rounds, any two at least
b rounds apart ("b-min-sep", Choquette-Choo et al. 2023, arXiv 2306.08153):
its 0/1 pattern a over the n rounds has at most k ones, pairwise >= b
apart. The release C x + xi (equivalently x + C^-1 xi) then has L2
sensitivity

    sens = max_a ||C a||,

and a participant on the maximizing pattern a* is the one the release
reveals most about: a canary placed on a* has GLS statistic ~ N(sens / z, 1)
(docs/method/matrix-mechanisms.md). Three ways to find a* and sens:

* enumeration (`enumerated_sensitivity`): every allowed pattern of a dense
  C, exact for any C, for n <= `MAX_ENUMERATION_ROUNDS`;
* structure (`toeplitz_sensitivity`): for a lower-triangular Toeplitz C
  whose coefficients are nonnegative and non-increasing (the square root
  binom(2i, i) / 4^i, banded or not; a BLT with positive scales, decays in
  (0, 1) and scales summing to at most 1), the worst case is k' =
  min(k, ceil(n / b)) participations exactly b apart from round 0 (Kalinin &
  Lampert 2024, "Banded Square Root Matrix Factorization for Differentially
  Private Model Training", arXiv 2405.13763, Thm 2; jax_privacy's
  `toeplitz.minsep_sensitivity_squared`), O(n k). The condition is checked
  on the coefficients, not assumed: when it fails this falls back to
  enumeration for small n and refuses otherwise;
* restarts (`restarted_sensitivity`): one participation per block of any
  noise restarted by block (the tree, a strategy restarted every epoch),
  the worst round of each block, exact for any n.

One participation per epoch of E rounds is b-min-sep with b = E only if
every participant keeps its position in each epoch (cyclic order). Drawn
anew each epoch, two participations can be one round apart (the end of an
epoch and the start of the next): that rule is `rounds_per_epoch` in the
enumeration, and its sensitivity can exceed the E-min-sep one by far. A
claim computed with b = E for such a run is too small.

NumPy only.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, Optional

import numpy as np

from tff_canary.stats.canaries import schedules
from tff_canary.stats.correlated import linear_noise
from tff_canary.stats.matrix import toeplitz
from tff_canary.stats import validation

# Enumeration visits up to 2^n patterns.
MAX_ENUMERATION_ROUNDS = 20


@dataclasses.dataclass(frozen=True)
class Sensitivity:
  """max_a ||C a|| over the allowed patterns, and a maximizing pattern.

  Attributes:
    value: sens = ||C a*||.
    pattern: [rounds] bool, a*: the rounds the worst-case participant (and
      the worst-case canaries) take part in.
    method: "structure" (Kalinin & Lampert 2024, Thm 2), "enumeration",
      or "restarts" (`restarted_sensitivity`).
    participations: k, the most rounds a participant joins.
    separation: b, the fewest rounds between two of them.
    rounds_per_epoch: E when at most one participation per epoch of E
      rounds is also a rule (enumeration only), else None.
  """

  value: float
  pattern: np.ndarray
  method: str
  participations: int
  separation: int
  rounds_per_epoch: Optional[int] = None

  @property
  def rounds(self) -> int:
    return int(self.pattern.size)

  def schedule(self, canaries: int) -> np.ndarray:
    """[canaries, rounds] bool, every canary on a*: the worst-case placement.

    Each such canary's GLS statistic is N(value / z, 1), the analytical mu
    (`strategy_noise`, `analytical`); held-out canaries go on the same
    pattern.
    """
    count = validation.as_int(canaries, "canaries", minimum=1)
    return np.tile(self.pattern, (count, 1))

  def as_schedule(self) -> schedules.SharedRounds:
    """The canaries' schedule that puts every canary on a*
    (`schedules.SharedRounds`), for a `CanaryConfig`."""
    return schedules.SharedRounds(
        self.rounds, tuple(np.flatnonzero(self.pattern).tolist()))

  def rule_text(self) -> str:
    """The participation the value is the worst case of, in words: "at
    most 4 participations at least 10 rounds apart" (or "one round per
    epoch" for `restarted_sensitivity`)."""
    if self.method == "restarts":
      return "one round per epoch"
    k, b = self.participations, self.separation
    return (f"at most {k} participation{'s' if k > 1 else ''} at least {b} "
            f"round{'s' if b > 1 else ''} apart"
            + ("" if self.rounds_per_epoch is None else
               f", one per epoch of {self.rounds_per_epoch}"))

  def __str__(self) -> str:
    return (f"sensitivity {self.value:.6g} ({self.method}) for "
            f"{self.rule_text()} in {self.rounds} rounds; worst case in "
            f"rounds {np.flatnonzero(self.pattern).tolist()}")


def _rules(rounds: Any, participations: Any,
           separation: Any) -> tuple[int, int, int]:
  return (validation.as_int(rounds, "rounds", minimum=1),
          validation.as_int(participations, "participations", minimum=1),
          validation.as_int(separation, "separation", minimum=1))


def most_participations(rounds: int, participations: int,
                        separation: int) -> int:
  """k' = min(k, ceil(n / b)): the most rounds a pattern can hold."""
  n, k, b = _rules(rounds, participations, separation)
  return min(k, math.ceil(n / b))


def allowed_patterns(rounds: int, participations: int, separation: int,
                     rounds_per_epoch: Optional[int] = None) -> np.ndarray:
  """Every nonempty pattern of at most k rounds pairwise >= b apart (and, with
  `rounds_per_epoch` E, at most one in each epoch of E rounds).

  Returns: [patterns, rounds] bool, in increasing order of the pattern read
  as a binary number with round 0 as the lowest bit.
  """
  n, k, b = _rules(rounds, participations, separation)
  if n > MAX_ENUMERATION_ROUNDS:
    raise ValueError(f"rounds must be at most {MAX_ENUMERATION_ROUNDS} to "
                     f"enumerate the patterns, got {n}.")
  codes = np.arange(1, 2**n, dtype=np.int64)
  for shift in range(1, b):  # no two rounds closer than b
    codes = codes[(codes & (codes >> shift)) == 0]
  if rounds_per_epoch is not None:
    e = validation.as_int(rounds_per_epoch, "rounds_per_epoch", minimum=1)
    for start in range(0, n, e):  # drop codes with two rounds in an epoch
      block = codes & (((1 << min(e, n - start)) - 1) << start)
      codes = codes[(block & (block - 1)) == 0]
  bits = ((codes[:, None] >> np.arange(n)[None, :]) & 1).astype(bool)
  return bits[bits.sum(axis=1) <= k]


def enumerated_sensitivity(strategy: Any, *, participations: int,
                           separation: int,
                           rounds_per_epoch: Optional[int] = None
                           ) -> Sensitivity:
  """sens and a* by trying every allowed pattern of a dense C (exact).

  Args:
    strategy: C, a finite [rounds, rounds] array (any C, Toeplitz or not),
      rounds <= MAX_ENUMERATION_ROUNDS.
    participations: k >= 1.
    separation: b >= 1 (b = 1 allows consecutive rounds).
    rounds_per_epoch: E for the rule "at most one participation per epoch
      of E rounds" on top (DP-FTRL's sampling without a fixed order: two
      participations can then be 1 round apart), or None.
  """
  c = np.asarray(strategy, dtype=np.float64)
  if c.ndim != 2 or c.shape[0] != c.shape[1] or not np.all(np.isfinite(c)):
    raise ValueError(f"strategy must be a finite square [rounds, rounds] "
                     f"array, got shape {c.shape}.")
  patterns = allowed_patterns(c.shape[0], participations, separation,
                              rounds_per_epoch)
  squared = np.sum((patterns @ c.T) ** 2, axis=1)
  best = int(np.argmax(squared))
  return Sensitivity(value=float(np.sqrt(squared[best])),
                     pattern=patterns[best].copy(), method="enumeration",
                     participations=int(participations),
                     separation=int(separation),
                     rounds_per_epoch=(None if rounds_per_epoch is None
                                       else int(rounds_per_epoch)))


def covariance_strategy(covariance: Any) -> np.ndarray:
  """L^-1 for the rounds' covariance K = L L^T (Cholesky): ||L^-1 a||^2 =
  a^T K^-1 a, the squared GLS mu (times z^2) of a canary on pattern a.

  So `enumerated_sensitivity(covariance_strategy(K), ...)` finds the
  worst-case pattern of any correlated noise, the tree's included
  (`linear_noise.LinearNoise.covariance`). For K = C^-1 C^-T with a
  lower-triangular C of positive diagonal this is C itself (the Cholesky
  factor is unique).
  """
  k = np.asarray(covariance, dtype=np.float64)
  if k.ndim != 2 or k.shape[0] != k.shape[1] or not np.all(np.isfinite(k)):
    raise ValueError(f"covariance must be a finite square [rounds, rounds] "
                     f"array, got shape {k.shape}.")
  try:
    factor = np.linalg.cholesky(k)
  except np.linalg.LinAlgError:
    raise ValueError("covariance must be positive definite (its Cholesky "
                     "factorization failed).") from None
  return np.linalg.inv(factor)


def restarted_sensitivity(noise: linear_noise.LinearNoise) -> Sensitivity:
  """sens and a* for one participation per block of a noise restarted by block.

  The tree restarted every epoch, or a matrix mechanism restarted every
  epoch (`strategy_noise.strategy_noise(..., restart_every=E)`): the
  blocks' noises are independent, so K^-1 is block-diagonal and a pattern
  with one round t_e per block has a^T K^-1 a = sum_e (K_e^-1)_{t_e t_e},
  largest with t_e = argmax of block e's diagonal
  (`LinearNoise.worst_case_rounds`; `LinearNoise.worst_case_mu` is the same
  value over z). For the plain tree a* is round 0 of every tree. Exact for
  any number of rounds.

  Args:
    noise: a `linear_noise.LinearNoise` whose `round_block` are the epochs.
  """
  if not isinstance(noise, linear_noise.LinearNoise):
    raise TypeError(f"noise must be a LinearNoise (linear_noise.linear_noise),"
                    f" got {validation.show(noise)}.")
  pattern = np.zeros(noise.num_rounds, dtype=bool)
  pattern[noise.worst_case_rounds()] = True
  return Sensitivity(value=noise.worst_case_mu(1.0), pattern=pattern,
                     method="restarts", participations=noise.num_blocks,
                     separation=1)


def toeplitz_sensitivity(coefficients: Any, *, rounds: int,
                         participations: int, separation: int,
                         fallback: bool = True) -> Sensitivity:
  """sens and a* of a lower-triangular Toeplitz C by its structure.

  With c_0 .. c_{n-1} nonnegative and non-increasing, a* is rounds 0, b, 2b,
  ... (k' of them) and C a* = sum_j c shifted down by j b (Kalinin & Lampert
  2024, Thm 2; module docstring).

  Args:
    coefficients: c_0, c_1, ... (fewer than rounds: zeros after; banded).
    rounds: n.
    participations: k >= 1.
    separation: b >= 1.
    fallback: when the coefficients are not nonnegative and non-increasing,
      enumerate (rounds <= MAX_ENUMERATION_ROUNDS) instead of refusing.

  Raises:
    ValueError: when the condition fails and enumeration is not allowed or
      not possible, naming the offending coefficients.
  """
  n, k, b = _rules(rounds, participations, separation)
  c = toeplitz.padded(coefficients, n)
  violation = toeplitz.nonincreasing_violation(c)
  if violation is not None:
    if fallback and n <= MAX_ENUMERATION_ROUNDS:
      return enumerated_sensitivity(toeplitz.strategy_matrix(c, n),
                                    participations=k, separation=b)
    raise ValueError(
        f"coefficients must be nonnegative and non-increasing for the "
        f"structural worst case (Kalinin & Lampert 2024, Thm 2), but "
        f"{violation}; enumeration "
        + ("was not allowed (fallback=False)." if not fallback else
           f"needs rounds <= {MAX_ENUMERATION_ROUNDS}, got {n}."))
  pattern = np.zeros(n, dtype=bool)
  pattern[np.arange(most_participations(n, k, b)) * b] = True
  image = np.zeros(n)
  for start in np.flatnonzero(pattern):
    image[start:] += c[:n - start]
  return Sensitivity(value=float(np.linalg.norm(image)), pattern=pattern,
                     method="structure", participations=k, separation=b)


__all__ = ["MAX_ENUMERATION_ROUNDS", "Sensitivity", "allowed_patterns",
           "covariance_strategy", "enumerated_sensitivity",
           "most_participations", "restarted_sensitivity",
           "toeplitz_sensitivity"]
