"""From a finished run to its cosine table, one pass over the canaries.

docs/method/sign-convention.md, docs/method/null-law.md (Andrew et al., ICLR 2024, arXiv 2302.03098, Section 3):

  * final model: x_j = cos(c_j, u), u = theta_0 - theta_T;
  * all iterates: m_j = max over rounds r of cos(c_j, a_r), a_r the round's
    noised aggregate as the server applies it (theta_{r+1} = theta_r - eta a_r
    with server SGD), for inserted and held-out canaries alike.

The signs make inserted canaries' cosines positive: a client update is
(initial - trained) and the server subtracts the aggregate, so an inserted
canary moves the model along -c and u = theta_0 - theta_T along +c.

The cost design: regenerating every canary every round costs m R canary
generations for m canaries and R rounds (the reference implementation: about
17 ms per canary per million parameters each; one generation here takes 7-13
ms per million parameters on 2 cores). Instead, during training
`tff_canary.federated.scores.aggregate_recorder.AggregateRecorder` writes each
round's noised aggregate to disk, and after training `compute_cosine_table`
regenerates each canary ONCE, in blocks whose size comes from
`memory_budget_bytes`, and per block takes the final cosines (one
matrix-vector product) and all round cosines (one matrix product with the
recorded aggregates, read in chunks when they do not fit the budget), keeping
the max over rounds and its round.

Cost after training: m canary generations + 2 m R d flops, instead of m R
generations in training. A k x d canary matrix is never held unless it fits
the budget.

Streaming (`tff_canary.federated.scores.cosine_stream`, the experiments' default)
takes the rounds in chunks while training goes on and calls this pass at the
end for the last chunk and the final cosines (`start=`, `plan=`). This pass
over every kept round remains the reference: with the stream's `plan` it
gives the stream's table bit for bit, since both take their cosines and
running maxima with `cosine_chunks`.

Numerics: products run in float32 (BLAS), with canaries of norm 1 to a few
ulps and the norms of u and a_r accumulated in float64. The float32 rounding
error of a length-d dot product of unit vectors is about 1e-7 in the cosine
(measured against float64: <= 6e-8 at d = 1500, 4e-9 at d = 1.2M in
bench/round_overhead.py), at least three orders of magnitude below the null's
standard deviation 1/sqrt(d) for any d <= 10^8. Cosines are clipped to [-1, 1].

Other canaries as noise: with `clips` and `clients_per_round` given (and
`remove_known_canaries`, the default), each canary's round cosines are taken
against the round's aggregate without the other inserted canaries
(`tff_canary.federated.scores.known_canary_removal`, `tff_canary.stats.estimators.known_canaries`),
chunk by chunk as `cosine_chunks` does it for the stream, so a streamed run
and this pass agree bit for bit with the same plan; the table's
`known_canaries_removed` says which statistic was corrected. The final-model
cosines are never corrected here. Cost: one more canary generation per
participation (to form a'_r) and a'_r held like the aggregates (in memory
within half the budget, else in a temporary file).

Zero vectors: the cosine with a zero vector (u = 0, e.g. a model that did not
move, or a_r = 0) is defined as 0, the null's mean, and a `ZeroVectorWarning`
says which vector was zero.
"""

from __future__ import annotations

import warnings
from typing import Any, Callable

import numpy as np
import tqdm

from tff_canary.federated.insertion import canary_directions
from tff_canary.federated.scores import cosine_chunks
from tff_canary.federated.scores import orthogonal_table
from tff_canary.federated.structures import flat_layout
from tff_canary.federated.scores import known_canary_removal
from tff_canary.federated.scores import row_reader
from tff_canary.federated.insertion import state_check
from tff_canary.federated.runtime import worker_guard
from tff_canary.stats.canaries import canary_config
from tff_canary.stats.canaries import cosine_table
from tff_canary.stats import validation

worker_guard.install()

DEFAULT_MEMORY_BUDGET_BYTES = 2 * 1024**3


class ZeroVectorWarning(UserWarning):
  """A cosine with a zero vector was taken (and defined as 0)."""


def plan_blocks(dim: int, num_rows: int, num_canaries: int,
                memory_budget_bytes: int) -> tuple[int, int]:
  """(aggregate rows per chunk, canaries per block) within the budget.

  A canary block of b canaries takes (b + 1) x dim x 4 bytes (the block and
  the one canary being generated), a chunk of h aggregates h x dim x 4, and
  the products 2 x b x h x 4 (small). If all the aggregates fit in half the
  budget they are read once and kept (h = all); otherwise h takes a quarter
  of the budget and the canary block the rest, so that the aggregates are
  re-read once per block, as few times as the budget allows.
  """
  dim = validation.as_dim(dim)
  row_bytes = 4 * dim
  budget = validation.as_int(memory_budget_bytes, "memory_budget_bytes",
                             minimum=1)
  if budget < 4 * row_bytes:
    raise ValueError(f"memory_budget_bytes = {budget} is too small: at least "
                     f"4 x 4 x dim = {4 * row_bytes} bytes are needed (a "
                     "block of one canary, the canary being generated, one "
                     "aggregate and slack).")
  if num_rows * row_bytes <= budget // 2:
    chunk_rows = max(num_rows, 1)
  else:
    chunk_rows = max(1, min(num_rows, (budget // 4) // row_bytes))
  held = min(chunk_rows, num_rows) * row_bytes
  # Per canary: its row in the block, and its products with a chunk (and
  # their scaled copy), 2 x h x 4 bytes.
  per_canary = row_bytes + 8 * min(chunk_rows, max(num_rows, 1))
  block = max(1, (budget - held - row_bytes) // per_canary)
  return chunk_rows, int(min(block, max(num_canaries, 1)))


def compute_cosine_table(
    canaries: canary_config.CanaryConfig,
    initial_weights: Any,
    final_weights: Any,
    aggregates: Any = None,
    memory_budget_bytes: int = DEFAULT_MEMORY_BUDGET_BYTES,
    progress: bool = True,
    state: Any = None,
    *,
    plan: tuple[int, int] | None = None,
    rounds: Any = None,
    start: cosine_chunks.RunningMax | None = None,
    clips: Any = None,
    clients_per_round: float | None = None,
    remove_known_canaries: bool = True,
    canary_blocks: Callable[[np.ndarray, np.ndarray], np.ndarray] | None = None,
) -> cosine_table.CosineTable:
  """The cosine table of a run (module docstring).

  Guards: with `state`, the canaries' seed and schedule must be the ones the
  aggregator trained with (`state_check.check_state`). With `aggregates`, an
  inserted canary that took part in a round whose aggregate was not recorded
  gets a nonzero `unrecorded` count; the table then refuses its all-iterates
  statistics, and an `UnrecordedRoundsWarning` says so here.

  Args:
    canaries: The run's `CanaryConfig`.
    initial_weights: theta_0: `ModelWeights` (its `trainable` part is used), a
      structure of arrays in the order of the aggregated value, or a flat
      vector.
    final_weights: theta_T, the same way.
    aggregates: The recorded noised aggregates: an `AggregateRecorder`, the
      path of its file (only recorded rounds are used), or an array
      [num_rounds, dim] (every row used; row = round). None: final-model
      cosines only (max_cosine NaN, max_round -1).
    memory_budget_bytes: Bound on the memory of the work arrays (see
      `plan_blocks`): the canary block and the aggregates held in memory. The
      few float64 vectors of length dim (theta_0, theta_T, u) come on top.
    progress: Show a tqdm progress bar over the canaries.
    state: Optional: the learning process state after training (or the
      checkpoint it was loaded from), or the
      `canary_process.CanaryDPAggregatorState` itself. Its `seed` and
      `schedule` fields are compared with `canaries` (see
      `state_check.check_state`); None skips the check.
    plan: (aggregate rows per chunk, canaries per block) instead of
      `plan_blocks`'s: a streamed run's plan (`cosine_stream.StreamPlan`)
      gives its table bit for bit (`cosine_chunks`).
    rounds: With an array `aggregates`, the round of each row (increasing;
      default 0, 1, ...).
    start: The running max over rounds 0..start.end-1, all recorded, taken
      while training (`cosine_stream`); the rows of `aggregates` then are the
      rounds from start.end on (taken with the same removal setting).
    clips: C_r of every round of the schedule (index = round; the
      aggregator's `clip` measurement), needed for `remove_known_canaries`.
    clients_per_round: n, the DP query's denominator, needed likewise.
    remove_known_canaries: With `aggregates`, `clips` and
      `clients_per_round`: take the round cosines against each aggregate
      without the other inserted canaries (module docstring). Ignored (the
      table records "none") when any of the three is missing.
    canary_blocks: Where the blocks of canaries come from: a function of
      (block_ids, out) returning the unit canaries [len(block_ids), dim],
      bitwise `canary_directions.canary_block(canaries.seed, block_ids, dim,
      out=out)` (a stream's `canary_cache.CanaryCache.source`). None: that
      function.

  Returns:
    The `CosineTable`.

  Raises:
    TypeError, ValueError: for bad arguments (mismatched dims, a budget too
      small for one canary and one aggregate, a `state` whose seed or
      schedule differs from those of `canaries`, ...).
  """
  if not isinstance(canaries, canary_config.CanaryConfig):
    raise TypeError("canaries must be a tff_canary.stats.canaries.canary_config."
                    f"CanaryConfig, got {canaries!r}.")
  if canaries.directions == "orthogonal":
    if state is None:
      raise ValueError("orthogonal canaries are scored in the round: pass "
                       "state (the learning process state after the last "
                       "round), which holds their scores.")
    return orthogonal_table.table_from_state(canaries, initial_weights,
                                             final_weights, state)
  if state is not None:
    state_check.check_state(canaries, state)
  if canaries.num_canaries == 0:
    raise ValueError("canaries has num_inserted = num_held_out = 0: no "
                     "canaries, no table to compute.")
  budget = validation.as_int(memory_budget_bytes, "memory_budget_bytes",
                             minimum=1)
  theta0, theta_t, dim = flat_layout.weights_pair(initial_weights,
                                                  final_weights)
  m = canaries.num_canaries
  if aggregates is None:
    reader, rows = None, np.zeros(0, np.int64)
  else:
    reader = row_reader.RowReader(aggregates)
    rows = reader.rows
    if rounds is not None:
      if reader.from_file:
        raise ValueError("rounds is for an array of aggregates; a file "
                         "says which rounds it holds.")
      rows = np.asarray(rounds, np.int64).reshape(-1)
      if rows.size != reader.shape[0] or np.any(np.diff(rows) <= 0):
        raise ValueError(f"rounds must give each of the {reader.shape[0]} "
                         "rows its round, increasing.")
    if reader.shape[1] != dim:
      raise ValueError(f"aggregates have dim = {reader.shape[1]}, the weights "
                       f"dim = {dim}.")
  if start is not None:
    if start.best.shape != (m,):
      raise ValueError(f"start holds {start.best.size} canaries, the config "
                       f"{m}.")
    if rows.size and rows[0] < start.end:
      raise ValueError(f"the aggregates start at round {rows[0]}, before "
                       f"start.end = {start.end}.")
  num_rows = int(rows.size)
  if plan is None:
    chunk_rows, block = plan_blocks(dim, num_rows, m, budget)
  else:
    chunk_rows = validation.as_int(plan[0], "plan[0] (rows per chunk)", 1)
    block = validation.as_int(plan[1], "plan[1] (canaries per block)", 1)
  if not isinstance(remove_known_canaries, (bool, np.bool_)):
    raise TypeError(f"remove_known_canaries must be a bool, got "
                    f"{validation.show(remove_known_canaries)}.")
  removals, holder = None, None
  if (remove_known_canaries and aggregates is not None and clips is not None
      and clients_per_round is not None):
    clips = np.asarray(clips, np.float64).reshape(-1)
    if rows.size and rows[-1] >= clips.size:
      raise ValueError(f"clips has {clips.size} rounds, the aggregates reach "
                       f"round {rows[-1]}.")
    removal = known_canary_removal.KnownCanaryRemoval(canaries,
                                                      clients_per_round)
    removals = [removal.chunk(rows[r0:r0 + chunk_rows],
                              clips[rows[r0:r0 + chunk_rows]])
                for r0 in range(0, num_rows, chunk_rows)]
    if num_rows:
      residual, holder = row_reader.residual(reader, reader.rows, chunk_rows, removals,
                                   dim, budget)
      reader = row_reader.RowReader(residual)

  u = theta0 - theta_t
  u_norm = float(np.sqrt(np.dot(u, u)))
  if u_norm == 0.0:
    warnings.warn("theta_0 - theta_T is the zero vector (the model did not "
                  "move): every final cosine is defined as 0.",
                  ZeroVectorWarning, stacklevel=2)
    u_unit = np.zeros(dim, np.float32)
  else:
    u_unit = (u / u_norm).astype(np.float32)
  del u, theta0, theta_t

  norms = np.zeros(0, np.float64)
  resident = None
  chunk_buffer = None
  if num_rows:
    if reader.from_file:
      chunk_buffer = np.empty((min(chunk_rows, num_rows), dim), np.float32)
    norms = row_reader.row_norms(reader, reader.rows, chunk_rows, chunk_buffer)
    zero = norms == 0.0
    if zero.any():
      removed = " with the inserted canaries removed" if removals else ""
      warnings.warn(f"the noised aggregates of rounds "
                    f"{rows[zero][:10].tolist()}{removed} are zero vectors: "
                    "their cosines are defined as 0.", ZeroVectorWarning,
                    stacklevel=2)
    if chunk_rows >= num_rows:
      resident = reader.read(reader.rows, out=chunk_buffer)
      if chunk_buffer is None:  # an array given in memory: keep as is
        resident = np.asarray(resident, np.float32)
  positions = reader.rows if reader is not None else rows

  final = np.empty(m, np.float64)
  running = (cosine_chunks.RunningMax.empty(m) if start is None else
             cosine_chunks.RunningMax(start.best.copy(),
                                      start.best_round.copy(), start.end))
  ids = np.arange(m)
  buffer = np.empty((min(block, m), dim), np.float32)
  with tqdm.tqdm(total=m, desc="canary cosines", unit="canary",
                 disable=not progress) as bar:
    for first in range(0, m, block):
      block_ids = ids[first:first + block]
      if canary_blocks is None:
        c = canary_directions.canary_block(canaries.seed, block_ids, dim,
                                           out=buffer)
      else:
        c = canary_blocks(block_ids, buffer)
      final[block_ids] = c @ u_unit
      for r0 in range(0, num_rows, chunk_rows):
        if resident is not None:
          chunk = resident[r0:r0 + chunk_rows]
        else:
          chunk = reader.read(positions[r0:r0 + chunk_rows], out=chunk_buffer)
        running.update(block_ids, cosine_chunks.round_cosines(
            c, chunk, norms[r0:r0 + chunk.shape[0]], block_ids=block_ids,
            removal=removals[r0 // chunk_rows] if removals else None),
                       rows[r0:r0 + chunk_rows])
      del c
      bar.update(block_ids.size)

  if holder is not None:
    del reader, resident, residual, chunk
    holder.cleanup()

  recorded = rows if start is None else np.concatenate(
      [np.arange(start.end), rows])
  return _table(canaries, dim, final, running, recorded,
                with_rounds=aggregates is not None or start is not None,
                removed=removals is not None)


def _table(canaries, dim, final, running, recorded, with_rounds, removed):
  """The `CosineTable` of final cosines and a running max over `recorded`."""
  m = canaries.num_canaries
  best = running.best.astype(np.float64)
  best[running.best_round < 0] = np.nan
  np.clip(final, -1.0, 1.0, out=final)
  np.clip(best, -1.0, 1.0, out=best)
  unrecorded = np.zeros(m, np.int64)
  if with_rounds:
    events = canaries.participation.events
    missed = events[~np.isin(events[:, 0], recorded)]
    unrecorded = np.bincount(missed[:, 1], minlength=m).astype(np.int64)
    if missed.size:
      warnings.warn(
          f"{missed.shape[0]} participations of inserted canaries fall in "
          f"rounds that were not recorded (e.g. canary {missed[0, 1]} in "
          f"round {missed[0, 0]}; {recorded.size} rounds recorded of "
          f"{canaries.num_rounds}): the table refuses epsilon_all and the "
          "all-iterates bounds.", cosine_table.UnrecordedRoundsWarning,
          stacklevel=3)
  return cosine_table.CosineTable(
      id=np.arange(m),
      group=np.where(canaries.inserted, "inserted", "held_out"),
      participation=canaries.counts(),
      final_cosine=final,
      max_cosine=best,
      max_round=running.best_round.copy(),
      seed=canaries.seed,
      dim=dim,
      num_rounds=canaries.num_rounds,
      rounds_recorded=int(recorded.size),
      assignment=canaries.assignment,
      schedule=repr(canaries.schedule),
      generator=canary_directions.GENERATOR,
      unrecorded=unrecorded,
      known_canaries_removed="all_iterates" if removed else "none",
  )
