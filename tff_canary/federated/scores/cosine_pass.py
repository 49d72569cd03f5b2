"""From a finished run to its cosine table, one pass over the canaries.

docs/method/sign-convention.md, docs/method/null-law.md (Andrew et al., ICLR 2024, arXiv 2302.03098, Section 3):

  * final model: x_j = cos(c_j, u), u = theta_0 - theta_T;
  * all iterates: m_j = max over rounds r of cos(c_j, a_r), a_r the round's
    noised aggregate as the server applies it (theta_{r+1} = theta_r - eta a_r
    with server SGD), for inserted and held-out canaries alike.

This is the path of gaussian canaries (the paper's construction: the other
inserted canaries are part of the noise, `known_canaries_removed` "none");
orthogonal canaries' table comes from the process state (`orthogonal_table`,
which `compute_cosine_table` calls for them).

The cost design (docs/guide/scaling.md): instead of m R canary generations
in training (m canaries, R rounds), each round's noised aggregate is
recorded (`aggregate_recorder`), and `compute_cosine_table` regenerates
each canary ONCE, in blocks (`plan_blocks`), and per block takes the final
cosines and all round cosines (the aggregates read in chunks by
`row_reader`), keeping the max over rounds and its first round:
m canary generations + 2 m R d flops after training.

Numerics: products run in float32 (BLAS), with canaries of norm 1 to a few
ulps and the norms of u and a_r accumulated in float64. The float32 rounding
error of a length-d dot product of unit vectors is about 1e-7 in the cosine,
at least three orders of magnitude below the null's standard deviation
1/sqrt(d) for any d <= 10^8 (tests/federated/scores/test_cosine_pass.py checks it against
float64); another budget blocks the products otherwise and may round a
product's last bit differently. Cosines are clipped to [-1, 1].

Zero vectors: the cosine with a zero vector (u = 0, e.g. a model that did not
move, or a_r = 0) is defined as 0, the null's mean, and a `ZeroVectorWarning`
says which vector was zero.
"""

from __future__ import annotations

import warnings
from typing import Any

import numpy as np
import tqdm

from tff_canary.federated.insertion import canary_directions
from tff_canary.federated.scores import orthogonal_table
from tff_canary.federated.structures import flat_layout
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
) -> cosine_table.CosineTable:
  """The cosine table of a run (module docstring).

  Guards: with `state`, the canaries' seed and schedule must be the ones the
  aggregator trained with (`state_check.check_state`). With `aggregates`, an
  inserted canary that took part in a round whose aggregate was not recorded
  gets a nonzero `unrecorded` count; the table then refuses its all-iterates
  statistics, and an `UnrecordedRoundsWarning` says so here.

  Args:
    canaries: The run's `CanaryConfig`. With directions="orthogonal" the
      table comes from `state` (`orthogonal_table.table_from_state`), and
      `aggregates` and `memory_budget_bytes` are not used.
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
      `canary_process.CanaryDPAggregatorState` itself (the guard above;
      None skips it). Required with orthogonal canaries, whose scores it
      holds.

  Returns:
    The `CosineTable`.

  Raises:
    TypeError, ValueError: for bad arguments (mismatched dims, a budget too
      small for one canary and one aggregate, a `state` of other canaries).
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
  theta0, theta_t, dim = flat_layout.weights_pair(initial_weights,
                                                  final_weights)
  m = canaries.num_canaries
  reader = None if aggregates is None else row_reader.RowReader(aggregates)
  rows = np.zeros(0, np.int64) if reader is None else reader.rows
  if reader is not None and reader.shape[1] != dim:
    raise ValueError(f"aggregates have dim = {reader.shape[1]}, the weights "
                     f"dim = {dim}.")
  num_rows = int(rows.size)
  chunk_rows, block = plan_blocks(dim, num_rows, m, memory_budget_bytes)

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

  inverse_norms = np.zeros(0, np.float32)
  resident = None
  chunk_buffer = None
  if num_rows:
    if reader.from_file:
      chunk_buffer = np.empty((min(chunk_rows, num_rows), dim), np.float32)
    norms = reader.norms(chunk_rows, chunk_buffer)
    zero = norms == 0.0
    if zero.any():
      warnings.warn(f"the noised aggregates of rounds "
                    f"{rows[zero][:10].tolist()} are zero vectors: their "
                    "cosines are defined as 0.", ZeroVectorWarning,
                    stacklevel=2)
    inverse_norms = np.where(zero, 0.0, 1.0 / np.where(zero, 1.0, norms)
                             ).astype(np.float32)
    if chunk_rows >= num_rows:
      resident = reader.read(rows, out=chunk_buffer)

  final = np.empty(m, np.float64)
  best = np.full(m, -np.inf, np.float32)
  best_round = np.full(m, -1, np.int64)
  ids = np.arange(m)
  buffer = np.empty((min(block, m), dim), np.float32)
  with tqdm.tqdm(total=m, desc="canary cosines", unit="canary",
                 disable=not progress) as bar:
    for first in range(0, m, block):
      block_ids = ids[first:first + block]
      c = canary_directions.canary_block(canaries.seed, block_ids, dim,
                                         out=buffer)
      final[block_ids] = c @ u_unit
      for r0 in range(0, num_rows, chunk_rows):
        chunk = (resident[r0:r0 + chunk_rows] if resident is not None
                 else reader.read(rows[r0:r0 + chunk_rows], out=chunk_buffer))
        cosines = (c @ chunk.T) * inverse_norms[r0:r0 + chunk.shape[0]]
        _keep_max(best, best_round, block_ids, cosines,
                  rows[r0:r0 + chunk_rows])
      del c
      bar.update(block_ids.size)

  return _table(canaries, dim, final, best, best_round, rows,
                with_rounds=aggregates is not None)


def _keep_max(best, best_round, block_ids, cosines, round_ids) -> None:
  """Per canary of the block, the max of its cosines [block, rounds] so far
  and its round. Chunks come in increasing rounds, so a tie keeps the first
  round (np.argmax and the strict `>` both keep it)."""
  if not cosines.size:
    return
  arg = np.argmax(cosines, axis=1)
  value = cosines[np.arange(block_ids.size), arg]
  top = best[block_ids]
  better = value > top
  top[better] = value[better]
  rounds = best_round[block_ids]
  rounds[better] = round_ids[arg[better]]
  best[block_ids] = top
  best_round[block_ids] = rounds


def _table(canaries, dim, final, best, best_round, recorded, with_rounds):
  """The `CosineTable` of final cosines and the max over `recorded`."""
  m = canaries.num_canaries
  best = best.astype(np.float64)
  best[best_round < 0] = np.nan
  np.clip(final, -1.0, 1.0, out=final)
  np.clip(best, -1.0, 1.0, out=best)
  unrecorded = np.zeros(m, np.int64)
  if with_rounds:
    missed = canaries.participation.outside(recorded)
    unrecorded = missed.counts(m)
    if missed.num_events:
      first_round, first_canary = missed.events[0]
      warnings.warn(
          f"{missed.num_events} participations of inserted canaries fall in "
          f"rounds that were not recorded (e.g. canary {first_canary} in "
          f"round {first_round}; {recorded.size} rounds recorded of "
          f"{canaries.num_rounds}): the table refuses epsilon_all and the "
          "all-iterates bounds.", cosine_table.UnrecordedRoundsWarning,
          stacklevel=3)
  return cosine_table.of_canaries(
      canaries, final_cosine=final, max_cosine=best, max_round=best_round,
      dim=dim, rounds_recorded=int(recorded.size),
      generator=canary_directions.GENERATOR, unrecorded=unrecorded,
      known_canaries_removed="none")
