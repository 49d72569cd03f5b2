"""All-iterates cosines while training goes on: bounded disk, a spare core.

docs/method/null-law.md (Andrew et al., ICLR 2024, arXiv 2302.03098, Section 3): the
all-iterates statistic m_j = max over rounds r of cos(c_j, a_r). Instead of
keeping every round's aggregate a_r on disk (R x d floats) for a pass after
training (`cosine_pass`), a `CosineStream` writes the rounds into chunk files
of B rounds (`rounds-<start>.npy`); each complete chunk goes to a background
process (`stream_worker`) that regenerates every canary once for it and keeps
per canary the running max cosine and its round (`running-<end>.npz`); a
chunk file is deleted once its rounds are in a running max that a checkpoint
covers. The last chunk and the final-model cosines (which need theta_T) are
taken together at the end, in one more pass over the canaries
(`cosine_pass.compute_cosine_table` with `start=`), with any chunk the worker
has not finished by then (their rows, at most 3 B, are held in memory for
that pass).

Disk: the chunk being filled, the one being processed, and chunks done but
not yet covered by a model checkpoint: 2 chunks of B rows (B x d x 4 bytes
each) when the worker keeps up and checkpoints come at least every B rounds.
A new chunk waits for the worker if it is still on the chunk before the
previous one, so there are never more than 3 (with that checkpoint
cadence), whether it keeps up or not. Background work: 2 m R d flops and the
canary generations, on the spare core: m once for the canaries the worker's
cache holds (`canary_cache`: by default half the memory available when it
starts, shared with the end pass, which then generates none of them), and
once per chunk (R / B times) for the others.

Other canaries as noise: with `clients_per_round`, each chunk's rounds are
taken without the other inserted canaries (`known_canary_removal`, as the
post-training pass does): each round's clip C_r comes with its aggregate (the
aggregator's `clip` measurement) and is kept in `clips.npy` (8 bytes a
round) for the chunks a resumed run resubmits and for the end pass.

Equal to the post-training pass: bit for bit with the same plan
(`compute_cosine_table(..., plan=(B, canaries_per_block))`), as
`cosine_chunks` explains.

Resume-safe: after a model checkpoint at round v, `checkpointed(v)` deletes
only what a resumed run cannot need: the newest running max with end <= v
and every chunk from its end on stay. A run killed at any point and resumed
(`CosineStream(..., done=v)`) drops what the killed run wrote past v (running
maxima and chunks of rounds it will redo) and resubmits the complete chunks
from the running max's end: the chunk boundaries (multiples of B, from the
plan in `plan.json`) never depend on timing, so the table is the same.
"""

from __future__ import annotations

import dataclasses
import glob
import json
import os
import re
from typing import Any

import numpy as np

from tff_canary.federated.scores import aggregate_recorder
from tff_canary.federated.scores import cosine_chunks
from tff_canary.federated.scores import cosine_pass
from tff_canary.federated.scores import stream_worker
from tff_canary.stats import atomic_files
from tff_canary.stats.canaries import canary_config
from tff_canary.stats.canaries import cosine_table
from tff_canary.stats import validation

PLAN = "plan.json"
TABLE = "table.npz"
CLIPS = "clips.npy"
DEFAULT_DISK_BUDGET_BYTES = 512 * 1024**2


@dataclasses.dataclass(frozen=True)
class StreamPlan:
  """How the all-iterates work is split (plan.json).

  Attributes:
    dim, num_canaries, num_rounds: The run's d, m and R.
    chunk_rounds: B, rounds per chunk (chunk k is rounds kB..kB+B-1).
    canaries_per_block: canaries regenerated at a time in the worker and at
      the end.
    memory_budget_bytes, disk_budget_bytes: The budgets B and the block came
      from (`plan_stream`).
  """

  dim: int
  num_canaries: int
  num_rounds: int
  chunk_rounds: int
  canaries_per_block: int
  memory_budget_bytes: int
  disk_budget_bytes: int

  @property
  def num_chunks(self) -> int:
    return -(-self.num_rounds // self.chunk_rounds)

  def chunk(self, round_num: int) -> tuple[int, int]:
    """(start, end) of the chunk holding `round_num`."""
    start = round_num - round_num % self.chunk_rounds
    return start, min(start + self.chunk_rounds, self.num_rounds)

  def as_dict(self) -> dict[str, Any]:
    values = dataclasses.asdict(self)
    values.update(
        num_chunks=self.num_chunks,
        in_background=(f"chunks 0..{self.num_chunks - 2} (rounds 0.."
                       f"{self.chunk(self.num_rounds - 1)[0] - 1}) by the "
                       "background worker" if self.num_chunks > 1 else
                       "none"),
        at_the_end=(f"rounds {self.chunk(self.num_rounds - 1)[0]}.."
                    f"{self.num_rounds - 1} and the final-model cosines, in "
                    "one pass over the canaries"),
        disk_bound_bytes=3 * self.chunk_rounds * 4 * self.dim,
        keep_every_round_bytes=self.num_rounds * 4 * self.dim)
    return values


def plan_stream(dim: int, num_canaries: int, num_rounds: int,
                memory_budget_bytes: int,
                disk_budget_bytes: int = DEFAULT_DISK_BUDGET_BYTES
                ) -> StreamPlan:
  """B from the disk budget, the canary block from the memory budget.

  B = disk budget / (3 x 4 d) (at most three chunks on disk), at most R. A worker
  holds a chunk (B x 4 d), its block of b canaries (b x 4 d), the canary
  being generated (4 d) and the products (2 x 4 b B): b is the most that fit
  the memory budget, at most m.
  """
  dim = validation.as_dim(dim)
  m = validation.as_int(num_canaries, "num_canaries", minimum=1)
  rounds = validation.as_int(num_rounds, "num_rounds", minimum=1)
  memory = validation.as_int(memory_budget_bytes, "memory_budget_bytes", 1)
  disk = validation.as_int(disk_budget_bytes, "disk_budget_bytes", 1)
  row = 4 * dim
  if disk < 3 * row:
    raise ValueError(f"disk_budget_bytes = {disk} is too small: three rounds "
                     f"of 4 x dim = {row} bytes each are needed.")
  chunk = int(min(rounds, disk // (3 * row)))
  block = (memory - chunk * row - row) // (row + 8 * chunk)
  if block < 1:
    raise ValueError(f"memory_budget_bytes = {memory} is too small for a "
                     f"chunk of {chunk} rounds and one canary at dim = "
                     f"{dim}: at least {(chunk + 2) * row + 8 * chunk} bytes "
                     "(or a smaller disk budget).")
  return StreamPlan(dim, m, rounds, chunk, int(min(block, m)), memory, disk)


def _numbered(directory: str, prefix: str, suffix: str) -> dict[int, str]:
  found = {}
  for path in glob.glob(os.path.join(directory, f"{prefix}-*{suffix}")):
    match = re.fullmatch(rf"{prefix}-(\d+){re.escape(suffix)}",
                         os.path.basename(path))
    if match:
      found[int(match.group(1))] = path
  return found


class CosineStream:
  """Chunk files, the background worker and the end pass (module docstring).

  Use: `record(output.metrics)` each round, `checkpointed(v)` after each
  model checkpoint, `finish(theta_0, theta_T)` after the last round (or on
  resuming a finished run), `close()` in any case.
  """

  def __init__(self, directory: str | os.PathLike,
               canaries: canary_config.CanaryConfig, plan: StreamPlan, *,
               done: int = 0,
               keep: aggregate_recorder.AggregateRecorder | None = None,
               nice: int = stream_worker.DEFAULT_NICE,
               clients_per_round: float | None = None,
               cache_bytes: int | None = None):
    """Starts (done = 0) or resumes (done = the checkpoint's round) a stream.

    Args:
      directory: Where the chunks, running maxima and plan.json go.
      canaries: The run's `CanaryConfig`.
      plan: The `StreamPlan`; a resumed stream must pass the one in
        plan.json (`load_plan`).
      done: Rounds 0..done-1 are in the model checkpoint the run resumes.
      keep: Optional recorder that also keeps every round (re-analysis).
      nice: Scheduling niceness added for the worker process.
      clients_per_round: n, the DP query's denominator: the rounds are taken
        without the other inserted canaries (module docstring). None: as
        recorded. A resumed stream must pass the same.
      cache_bytes: Memory for the worker's canary cache (`canary_cache`;
        None: half of the memory available when it starts; 0: none). It
        changes the time, never the table.
    """
    self._dir = os.fspath(directory)
    self.canaries = canaries
    self.plan = plan
    self._keep = keep
    self._checkpoint = validation.as_int(done, "done", minimum=0)
    self.clients_per_round = (
        None if clients_per_round is None else
        validation.as_positive(clients_per_round, "clients_per_round"))
    os.makedirs(self._dir, exist_ok=True)
    if not os.path.exists(self._file(PLAN)):
      atomic_files.write_json(
          self._file(PLAN), dict(plan.as_dict(), known_canaries_removed=(
              "all_iterates" if self.clients_per_round else "none")))
    self._clips = self._open_clips()
    self.peak_disk_bytes = 0
    self._rows = None
    self._rows_start = -1
    self._worker = None
    self._discard_after(self._checkpoint)
    self._nice = nice
    if os.path.exists(self._file(TABLE)):
      return  # finished: finish() reads the table
    start = self._committed_end()
    self._worker = stream_worker.StreamWorker(
        canaries=canaries, dim=plan.dim,
        canaries_per_block=plan.canaries_per_block,
        start_path=self._running_path(start) if start else None, nice=nice,
        clients_per_round=self.clients_per_round, cache_bytes=cache_bytes)
    for chunk_start in range(start, self._checkpoint, plan.chunk_rounds):
      end = plan.chunk(chunk_start)[1]
      if end <= self._checkpoint and end < plan.num_rounds:
        self._submit(chunk_start, end)

  # Files ---------------------------------------------------------------
  def _open_clips(self) -> np.ndarray:
    """clips.npy: C_r per round, NaN for a round not yet written."""
    path = self._file(CLIPS)
    if os.path.exists(path):
      clips = np.load(path, mmap_mode="r+")
      if clips.shape == (self.plan.num_rounds,):
        return clips
    clips = np.lib.format.open_memmap(path, mode="w+", dtype=np.float64,
                                      shape=(self.plan.num_rounds,))
    clips[:] = np.nan
    clips.flush()
    return clips

  def _file(self, name: str) -> str:
    return os.path.join(self._dir, name)

  def _rows_path(self, start: int) -> str:
    return self._file(f"rounds-{start:07d}.npy")

  def _running_path(self, end: int) -> str:
    return self._file(f"running-{end:07d}.npz")

  def _committed_end(self) -> int:
    """End of the newest running max within the last checkpoint (0: none)."""
    ends = [e for e in _numbered(self._dir, "running", ".npz")
            if e <= self._checkpoint]
    return max(ends, default=0)

  def _discard_after(self, done: int) -> None:
    """Removes what a killed run wrote past round `done`."""
    for end, path in _numbered(self._dir, "running", ".npz").items():
      if end > done:
        os.remove(path)
    for start, path in _numbered(self._dir, "rounds", ".npy").items():
      if start >= done:
        os.remove(path)
    for name in os.listdir(self._dir):
      if name.startswith(".tmp-"):
        os.remove(self._file(name))

  def _collect(self) -> None:
    """Deletes chunks and running maxima a resumed run cannot need."""
    committed = self._committed_end()
    for end, path in _numbered(self._dir, "running", ".npz").items():
      if end < committed:
        os.remove(path)
    for start, path in _numbered(self._dir, "rounds", ".npy").items():
      if self.plan.chunk(start)[1] <= committed and start != self._rows_start:
        os.remove(path)

  def disk_bytes(self) -> int:
    """Bytes of the chunk files now."""
    return sum(os.path.getsize(p) for p in
               _numbered(self._dir, "rounds", ".npy").values())

  # Rounds ---------------------------------------------------------------
  def record(self, metrics: Any) -> int:
    """Pops the round's `noised_aggregate` out of `metrics`, writes it (with
    the round's `clip` measurement beside it)."""
    round_num, aggregate, clip = aggregate_recorder.pop_round(metrics)
    self.write(round_num, aggregate, clip)
    return round_num

  def write(self, round_num: int, aggregate: Any,
            clip: float | None = None) -> None:
    """Writes round `round_num`'s aggregate (and clip C_r, needed with
    `clients_per_round`) into its chunk; sends a complete chunk (but the
    run's last) to the worker."""
    round_num = validation.as_int(round_num, "round_num", minimum=0)
    if round_num >= self.plan.num_rounds:
      raise ValueError(f"round_num = {round_num} is beyond the plan's "
                       f"num_rounds = {self.plan.num_rounds}.")
    if self.clients_per_round is not None:
      if clip is None:
        raise ValueError(f"round {round_num} has no clip: removing the known "
                         "canaries needs the aggregator's 'clip' measurement "
                         "(or a CosineStream without clients_per_round).")
      clip = validation.as_nonnegative(clip, "clip")
    aggregate = np.asarray(aggregate, np.float32)
    if aggregate.shape != (self.plan.dim,):
      raise ValueError(f"the aggregate must have shape ({self.plan.dim},), "
                       f"got {aggregate.shape}.")
    if not np.all(np.isfinite(aggregate)):
      raise ValueError(f"the aggregate of round {round_num} is not finite.")
    if self._keep is not None:
      self._keep.write(round_num, aggregate)
    start, end = self.plan.chunk(round_num)
    if start != self._rows_start:
      self._open_rows(start, end)
    # Not flushed here (msync costs about as much as 1% of a round): a
    # killed process's writes stay in the page cache and reach the file;
    # A chunk is flushed when complete, the open one by `checkpointed`, so a
    # checkpoint never covers rows only in memory (a machine crash).
    self._rows[round_num - start] = aggregate
    if clip is not None:
      self._clips[round_num] = clip
    self.peak_disk_bytes = max(self.peak_disk_bytes, self.disk_bytes())
    if round_num + 1 == end:
      self._rows.flush()
      self._rows = None
      self._rows_start = -1
      if end < self.plan.num_rounds:
        self._submit(start, end)
    self._poll()

  def _open_rows(self, start: int, end: int) -> None:
    if self._worker is not None and len(self._worker.pending) > 1:
      self._worker.poll(block=True)  # bounded disk: wait for the worker
    path = self._rows_path(start)
    if os.path.exists(path):  # a resumed chunk: rows before `done` kept
      self._rows = np.load(path, mmap_mode="r+")
    else:
      self._rows = np.lib.format.open_memmap(
          path, mode="w+", dtype=np.float32, shape=(end - start,
                                                    self.plan.dim))
    self._rows_start = start

  def _submit(self, start: int, end: int) -> None:
    self._worker.submit(start, end, self._rows_path(start),
                        self._running_path(end),
                        np.array(self._clips[start:end], np.float64))

  def _poll(self) -> None:
    if self._worker is not None and self._worker.poll():
      self._collect()

  def checkpointed(self, version: int) -> None:
    """A model checkpoint after round `version` - 1 was saved."""
    self._checkpoint = validation.as_int(version, "version", minimum=0)
    if self._rows is not None:
      self._rows.flush()
    self._clips.flush()
    self._poll()
    self._collect()

  # The end -------------------------------------------------------------
  def finish(self, initial_weights: Any, final_weights: Any, *,
             progress: bool = True, state: Any = None
             ) -> cosine_table.CosineTable:
    """The cosine table: the rounds the worker has not taken (the last chunk,
    and any chunk it is still on) and the final-model cosines in one pass
    over the canaries, here with every core; the chunks are deleted after.

    The worker is stopped, not waited for: at its low priority it could
    starve on a busy machine, and a chunk taken here gives the same bits (the
    same blocks against the same chunks, `cosine_chunks`).
    """
    if os.path.exists(self._file(TABLE)):
      return cosine_table.CosineTable.load(self._file(TABLE))
    self._rows = None
    cache = self._worker.attach_cache()  # the canaries it has generated
    self._worker.close()
    self._worker = None
    for name in os.listdir(self._dir):  # a write the stop cut short
      if name.startswith(".tmp-"):
        os.remove(self._file(name))
    start = self._committed_end_any()
    running = (cosine_chunks.RunningMax.load(self._running_path(start),
                                             self.plan.num_canaries)
               if start else None)
    parts = [np.load(self._rows_path(s))[:self.plan.chunk(s)[1] - s]
             for s in range(start, self.plan.num_rounds,
                            self.plan.chunk_rounds)]
    rows = np.concatenate(parts) if parts else np.zeros((0, self.plan.dim),
                                                         np.float32)
    if rows.shape[0] != self.plan.num_rounds - start:
      raise ValueError(f"{self._dir}: rounds {start}..{self.plan.num_rounds - 1}"
                       f" are not all recorded ({rows.shape[0]} found).")
    table = cosine_pass.compute_cosine_table(
        self.canaries, initial_weights, final_weights, rows,
        memory_budget_bytes=self.plan.memory_budget_bytes, progress=progress,
        state=state,
        plan=(self.plan.chunk_rounds, self.plan.canaries_per_block),
        rounds=np.arange(start, self.plan.num_rounds), start=running,
        clips=np.array(self._clips) if self.clients_per_round else None,
        clients_per_round=self.clients_per_round,
        canary_blocks=None if cache is None else cache.source)
    cached = 0 if cache is None else len(cache.filled)
    if cache is not None:
      cache.close()
    table.save_npz(self._file(TABLE))
    for path in _numbered(self._dir, "rounds", ".npy").values():
      os.remove(path)
    summary = dict(self.plan.as_dict(), known_canaries_removed=(
        "all_iterates" if self.clients_per_round else "none"))
    summary["peak_disk_bytes_this_session"] = self.peak_disk_bytes
    summary["end_pass_blocks_from_the_cache"] = (
        f"{cached} of {-(-self.plan.num_canaries // self.plan.canaries_per_block)}")
    atomic_files.write_json(self._file(PLAN), summary)
    return table

  def _committed_end_any(self) -> int:
    return max(_numbered(self._dir, "running", ".npz"), default=0)

  def close(self) -> None:
    """Stops the worker (if running) and releases the chunk file."""
    self._rows = None
    if self._worker is not None:
      self._worker.close()
      self._worker = None
    if self._keep is not None:
      self._keep.close()


def load_plan(directory: str | os.PathLike) -> StreamPlan | None:
  """The plan in `directory`/plan.json, or None if there is none."""
  path = os.path.join(os.fspath(directory), PLAN)
  if not os.path.exists(path):
    return None
  try:
    with open(path, encoding="utf-8") as f:
      values = json.load(f)
    return StreamPlan(**{f.name: int(values[f.name])
                         for f in dataclasses.fields(StreamPlan)})
  except (ValueError, KeyError, TypeError) as e:
    raise ValueError(f"{path} is not a stream plan: {e}") from None
