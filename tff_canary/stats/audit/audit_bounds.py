"""The bounds of an audit with their reach.

An audit (`audit.audit`) calls each bound with its Bonferroni share of the
confidence. An `AuditBound` also knows its reach: its value on perfectly
separated statistics of this run's canaries (or of `scale` times as many),
the largest epsilon it could show however much the run leaks (`audit`'s
module docstring says how the verdict uses it). `share` splits the level
among the bounds that can show anything; `candidates_needed` doubles the
canaries until a bound can reach a claim.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, Callable, Optional

import numpy as np
import numpy.typing as npt

from tff_canary.stats.bounds import lower_bounds

BoundFn = Callable[[float], Any]  # confidence -> a result with .epsilon
# The most candidates `candidates_needed` tries (this run's, doubled).
MAX_CANDIDATES = 2 ** 20


@dataclasses.dataclass(frozen=True)
class AuditBound:
  """One bound of an audit, a `BoundFn` (called with a confidence, it returns
  the bound's result), with its reach (module docstring).

  Attributes:
    compute: confidence -> the bound's result on this run's statistics.
    reach: (confidence, scale) -> its value on perfectly separated
      statistics of `scale` times this run's canaries (scale 1: this run's).
    candidates: the canaries the bound sees.
  """

  compute: BoundFn
  reach: Callable[[float, int], float]
  candidates: int

  def __call__(self, confidence: float) -> Any:
    return self.compute(confidence)


def separated(inserted_mask: npt.ArrayLike) -> np.ndarray:
  """Perfectly separated statistics for a coin mask: 1 inserted, 0 not."""
  return np.asarray(inserted_mask, dtype=bool).astype(np.float64)


def coin_bound(bound: Callable[..., Any], statistics: npt.ArrayLike,
               inserted_mask: npt.ArrayLike, *, delta: float) -> AuditBound:
  """A one-run bound `bound(statistics, mask, delta=, confidence=)` of
  coin-flipped candidates, with its reach."""
  mask = np.asarray(inserted_mask, dtype=bool)

  def reach(confidence, scale=1):
    tiled = np.tile(mask, scale)
    return bound(separated(tiled), tiled, delta=delta,
                 confidence=confidence).epsilon

  return AuditBound(
      compute=lambda c: bound(statistics, mask, delta=delta, confidence=c),
      reach=reach, candidates=int(mask.size))


def epsilon_lo_bound(inserted: npt.ArrayLike, *, delta: float,
                     dim: Optional[int] = None,
                     held_out: Optional[npt.ArrayLike] = None) -> AuditBound:
  """`lower_bounds.epsilon_lo` (simultaneous) with the exact null of `dim`
  or the held-out null, with its reach (inf for the exact null)."""
  x = np.asarray(inserted, dtype=np.float64)
  y = None if held_out is None else np.asarray(held_out, dtype=np.float64)

  def compute(confidence, values=x, others=y):
    return lower_bounds.epsilon_lo(values, dim=dim, held_out=others,
                                   delta=delta, confidence=confidence,
                                   correction="simultaneous")

  def reach(confidence, scale=1):
    return compute(confidence, np.ones(x.size * scale),
                   None if y is None else -np.ones(y.size * scale)).epsilon

  return AuditBound(compute=compute, reach=reach,
                    candidates=int(x.size + (0 if y is None else y.size)))


def reach_of(fn: Any, confidence: float, scale: int = 1) -> float:
  return (float(fn.reach(confidence, scale)) if isinstance(fn, AuditBound)
          else math.nan)


def share(bound_fns: dict[str, Any], confidence: float
           ) -> tuple[list[str], float, dict[str, float]]:
  """(bounds with a share, per-bound confidence, reach of every bound).

  Bounds of reach 0 at the current share are dropped until none is
  (module docstring); at least one bound stays.
  """
  active, reach = list(bound_fns), {}
  while True:
    per = 1.0 - (1.0 - confidence) / len(active)
    for name in active:
      reach[name] = reach_of(bound_fns[name], per)
    keep = [name for name in active if not reach[name] == 0.0]
    if len(keep) == len(active) or not keep:
      return active, per, reach
    active = keep


@dataclasses.dataclass(frozen=True)
class Reach:
  """What an audit's bounds can show with a run's canaries, before any
  statistic is known (`reach`).

  Attributes:
    claimed_epsilon: the claim.
    epsilon: the largest reach of the bounds that take a share.
    bound: the bound of that reach.
    confidence: each such bound's confidence (its share of the level).
    candidates: the canaries the bounds see.
    candidates_needed: when `beyond`, this run's candidates doubled until a
      bound reaches the claim; None otherwise or past `MAX_CANDIDATES`.
  """

  claimed_epsilon: float
  epsilon: float
  bound: str
  confidence: float
  candidates: int
  candidates_needed: Optional[int] = None

  @property
  def beyond(self) -> bool:
    """Whether no bound can exceed the claim, however much the run leaks."""
    return self.epsilon <= self.claimed_epsilon


def reach(bound_fns: dict[str, AuditBound], *, claimed_epsilon: float,
          confidence: float) -> Reach:
  """The `Reach` of `bound_fns` (each an `AuditBound`) sharing
  `confidence` as `audit.audit` shares it (`share`)."""
  active, per, reaches = share(bound_fns, confidence)
  best = max(active, key=lambda name: reaches[name])
  candidates = max(fn.candidates for fn in bound_fns.values())
  out = Reach(claimed_epsilon=float(claimed_epsilon), epsilon=reaches[best],
              bound=best, confidence=per, candidates=candidates)
  if not out.beyond:
    return out
  return dataclasses.replace(out, candidates_needed=candidates_needed(
      bound_fns, active, per, claimed_epsilon, candidates))


def candidates_needed(bound_fns: dict[str, Any], active: list[str],
                       per: float, claimed: float, candidates: int
                       ) -> Optional[int]:
  """This run's candidates doubled until a bound's reach exceeds the claim
  (None past `MAX_CANDIDATES`)."""
  scale = 2
  while candidates * scale <= MAX_CANDIDATES:
    if any(reach_of(bound_fns[name], per, scale) > claimed for name in active):
      return candidates * scale
    scale *= 2
  return None
