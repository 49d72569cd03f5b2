"""The cosine pass's half of `tff_canary.stats.estimators.known_canaries`.

In DP-FedAvg with this package's aggregator (docs/method/index.md, docs/method/canaries.md, docs/method/sign-convention.md;
`canary_process`), round r's aggregate as the server applies it is

    a_r = (sum_i clip_{C_r}(x_i) + C_r sum_{j in S_r} c_j + noise) / n,

n = clients_per_round, so an inserted canary enters a_r as s_r c_j with
s_r = C_r / n. `KnownCanaryRemoval` regenerates the canaries of each recorded
round once (`canary_directions.canary_block`, bitwise the training ones),
subtracts s_r sum_{j in S_r} c_j from the recorded row to give a'_r, and, per
block of canaries, turns the dot products c_j . a'_r into the corrected
cosines of `known_canaries.corrected_cosines` (canary j's own rounds get
s_r c_j back). Held-out canaries get cos(c_j, a'_r).

What this removes in training: the canaries' direct contributions to the
recorded aggregates, exactly up to float32 rounding. It does not remove the
clients' reaction in later rounds to the model that a canary moved (see
`known_canaries`), and it leaves the final-model statistic alone: u =
theta_0 - theta_T is the sum eta sum_r a_r only with server SGD without
momentum, which the pass cannot check.
"""

from __future__ import annotations

from typing import Callable

import numpy as np
import numpy.typing as npt

from tff_canary.federated.insertion import canary_directions
from tff_canary.stats.canaries import canary_config
from tff_canary.stats.estimators import known_canaries
from tff_canary.stats import validation


def _check_clips(clips: npt.ArrayLike, num_rows: int) -> np.ndarray:
  clips = np.asarray(clips, np.float64)
  if clips.shape != (num_rows,):
    raise ValueError(f"clips must be 1-D with one clip per row ({num_rows}), "
                     f"got shape {clips.shape}.")
  bad = ~np.isfinite(clips) | (clips < 0)
  if bad.any():
    i = int(np.flatnonzero(bad)[0])
    raise ValueError(f"clips must be finite and nonnegative, but clips[{i}] "
                     f"= {clips[i]}.")
  return clips


class KnownCanaryRemoval:
  """Removes the inserted canaries from recorded aggregates (module doc).

  The work is per chunk of rounds (`chunk`), so that the post-training pass
  and the stream worker (`cosine_stream`), which sees the rounds a chunk at a
  time, compute the same bits: each row's a'_r depends only on that row, its
  round and its clip.

  Args:
    canaries: The run's `CanaryConfig` (its participation gives S_r).
    clients_per_round: n, the denominator of the DP query.
  """

  def __init__(self, canaries: canary_config.CanaryConfig,
               clients_per_round: float):
    self.canaries = canaries
    self.clients_per_round = validation.as_positive(clients_per_round,
                                                    "clients_per_round")
    events = canaries.participation.events
    order = np.lexsort((events[:, 1], events[:, 0]))
    self._events = events[order]  # by round, then canary id

  def chunk(self, round_ids: npt.ArrayLike, clips: npt.ArrayLike
            ) -> ChunkRemoval:
    """The removal for rows of rounds `round_ids` (increasing), whose clips
    C_r (the aggregator's `clip` measurement) are `clips`."""
    round_ids = np.asarray(round_ids, np.int64).reshape(-1)
    if np.any(np.diff(round_ids) <= 0):
      raise ValueError("round_ids must increase.")
    scales = _check_clips(clips, round_ids.size) / self.clients_per_round
    return ChunkRemoval(self, round_ids, scales)

  def events_in(self, round_ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(position among round_ids, canary id) of the inserted canaries there."""
    keep = np.isin(self._events[:, 0], round_ids)
    events = self._events[keep]
    return np.searchsorted(round_ids, events[:, 0]), events[:, 1]


class ChunkRemoval:
  """`KnownCanaryRemoval` for one chunk of rows (`KnownCanaryRemoval.chunk`).

  Attributes:
    round_ids: The rounds of the rows.
    scales: s_r = C_r / n per row.
  """

  def __init__(self, removal: KnownCanaryRemoval, round_ids: np.ndarray,
               scales: np.ndarray):
    self.round_ids = round_ids
    self.scales = scales
    self._seed = removal.canaries.seed
    self._rows, self._ids = removal.events_in(round_ids)

  def residual(self, rows: np.ndarray, out: np.ndarray | None = None,
               canary: Callable[[int], np.ndarray] | None = None
               ) -> np.ndarray:
    """a'_r = a_r - s_r sum_{j in S_r} c_j, float32 [len(round_ids), dim].

    Each row's canaries are regenerated (bitwise the training ones), or
    taken from `canary(j)` (bitwise the same: the stream worker's
    `canary_cache`), and summed in float64 in canary-id order, then
    subtracted and rounded once. `out` may be `rows` itself (in place) or
    another buffer.
    """
    if rows.shape[0] != self.round_ids.size:
      raise ValueError(f"{rows.shape[0]} rows for {self.round_ids.size} "
                       "rounds.")
    dim = rows.shape[1]
    if out is None:
      out = np.array(rows, np.float32)
    elif out is not rows:
      out[...] = rows
    generated = np.empty((1, dim), np.float32)
    for i in np.unique(self._rows):
      total = np.zeros(dim, np.float64)
      for j in self._ids[self._rows == i]:
        total += (canary_directions.canary_block(
            self._seed, [int(j)], dim, out=generated)[0] if canary is None
                  else canary(int(j)))
      out[i] = (out[i] - self.scales[i] * total).astype(np.float32)
    return out

  def cosines(self, dots: np.ndarray, block_ids: np.ndarray,
              norms: np.ndarray) -> np.ndarray:
    """Corrected cosines (float32) of a block of canaries with the rows.

    Args:
      dots: c_j . a'_r, [len(block_ids), len(round_ids)].
      block_ids: The canary ids of the block (sorted, contiguous).
      norms: |a'_r| of the rows (float64).
    """
    own = np.zeros(dots.shape, bool)
    first, last = int(block_ids[0]), int(block_ids[-1])
    pick = (self._ids >= first) & (self._ids <= last)
    own[self._ids[pick] - first, self._rows[pick]] = True
    return known_canaries.corrected_cosines(
        dots, norms, self.scales, own).astype(np.float32)


__all__ = ["KnownCanaryRemoval", "ChunkRemoval"]
