"""The cosine pass's half of `tff_canary.stats.known_canaries`.

In DP-FedAvg with this package's aggregator (METHOD §1-§3;
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

import os
import tempfile
from typing import Any

import numpy as np
import numpy.typing as npt

from tff_canary.federated import canary_directions
from tff_canary.stats import canary_config
from tff_canary.stats import known_canaries
from tff_canary.stats import validation


def _scales(clips: npt.ArrayLike, clients_per_round: float,
            num_rounds: int) -> np.ndarray:
  clips = np.asarray(clips, np.float64)
  if clips.ndim != 1 or clips.size < num_rounds:
    raise ValueError(f"clips must be 1-D with one clip per round (at least "
                     f"{num_rounds}), got shape {clips.shape}.")
  bad = ~np.isfinite(clips) | (clips < 0)
  if bad.any():
    i = int(np.flatnonzero(bad)[0])
    raise ValueError(f"clips must be finite and nonnegative, but clips[{i}] "
                     f"= {clips[i]}.")
  n = validation.as_positive(clients_per_round, "clients_per_round")
  return clips / n


class KnownCanaryRemoval:
  """Removes the inserted canaries from the recorded aggregates (module doc).

  Args:
    canaries: The run's `CanaryConfig` (its participation gives S_r).
    rows: The rounds of the recorded aggregate rows, in row order.
    clips: C_r for every round r of the schedule (index = round), as the
      aggregator's `clip` measurement reports it.
    clients_per_round: n, the denominator of the DP query.
  """

  def __init__(self, canaries: canary_config.CanaryConfig, rows: np.ndarray,
               clips: npt.ArrayLike, clients_per_round: float):
    self._canaries = canaries
    self.rows = np.asarray(rows, np.int64)
    self.scales = _scales(clips, clients_per_round,
                          canaries.num_rounds)[self.rows]
    events = canaries.participation.events
    keep = np.isin(events[:, 0], self.rows)
    self._events = events[keep]
    # Position of each event's round among the rows.
    self._event_rows = np.searchsorted(self.rows, self._events[:, 0])

  def residual(self, read_rows: Any, dim: int, budget_bytes: int,
               chunk_rows: int) -> tuple[np.ndarray, Any]:
    """a'_r for every recorded row, float32 [num_rows, dim].

    `read_rows(rows)` returns the recorded rows `rows` as float32. The result
    is in memory when it fits half of `budget_bytes`, else a memory map in a
    temporary directory (the second value, to be cleaned up by the caller;
    None when in memory).
    """
    num_rows = self.rows.size
    holder = None
    if num_rows * dim * 4 <= budget_bytes // 2:
      out = np.empty((num_rows, dim), np.float32)
    else:
      holder = tempfile.TemporaryDirectory(prefix="residual_aggregates_")
      out = np.lib.format.open_memmap(
          os.path.join(holder.name, "residual.npy"), mode="w+",
          dtype=np.float32, shape=(num_rows, dim))
    generated = np.empty((1, dim), np.float32)
    for start in range(0, num_rows, chunk_rows):
      index = np.arange(start, min(num_rows, start + chunk_rows))
      out[index[0]:index[-1] + 1] = read_rows(self.rows[index])
      for i in index:
        ids = self._events[self._event_rows == i, 1]
        if not ids.size:
          continue
        total = np.zeros(dim, np.float64)
        for j in ids:
          total += canary_directions.canary_block(
              self._canaries.seed, [int(j)], dim, out=generated)[0]
        out[i] = (out[i] - self.scales[i] * total).astype(np.float32)
    return out, holder

  def cosines(self, dots: np.ndarray, block_ids: np.ndarray,
              row_start: int, norms: np.ndarray) -> np.ndarray:
    """Corrected cosines of a block of canaries with rows [row_start, ...).

    Args:
      dots: c_j . a'_r, [len(block_ids), len(norms)].
      block_ids: The canary ids of the block (sorted, contiguous).
      row_start: Position of the first of these rows among `rows`.
      norms: |a'_r| of these rows.
    """
    num = norms.size
    own = np.zeros(dots.shape, bool)
    first, last = int(block_ids[0]), int(block_ids[-1])
    pick = ((self._events[:, 1] >= first) & (self._events[:, 1] <= last)
            & (self._event_rows >= row_start)
            & (self._event_rows < row_start + num))
    own[self._events[pick, 1] - first, self._event_rows[pick] - row_start] = True
    return known_canaries.corrected_cosines(
        dots, norms, self.scales[row_start:row_start + num], own)
