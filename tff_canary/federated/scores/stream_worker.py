"""The background process that takes chunks of rounds while training goes on.

`StreamWorker` starts one child process (multiprocessing "spawn": a fresh
interpreter, never a fork of a process running TensorFlow) which, for each
chunk of rounds it is sent, reads the chunk's aggregates from disk, takes
every canary's cosines with the chunk (`cosine_chunks.take_chunk`) into its
running max, and writes the running max after the chunk atomically
(`running-<end>.npz`, `cosine_stream` names the files). The canaries come
from a `canary_cache.CanaryCache` (bitwise `canary_directions.canary_block`,
the canaries of training): the blocks that fit the cache budget are
generated once, while the worker is idle or when a chunk first needs them,
and kept in shared memory that the parent reads at the end; the others are
regenerated for each chunk. It never blocks a round: TFF runs the rounds in
its own `worker_binary` process, this child runs beside it with ONE thread
for BLAS, OpenMP and TensorFlow (set in its environment before NumPy or
TensorFlow load) and a lower scheduling priority (`nice`), so it uses the
core the rounds leave idle and yields whenever a round wants both. (Not
Linux's SCHED_IDLE: under it a worker gets almost no CPU while both cores
are busy; on a loaded machine here one did not get through loading
TensorFlow and three small blocks in 2 minutes, and a run that waits on its
worker, as a bounded disk makes it, would stall that long.)

It stops when its parent dies, even by SIGKILL and even while it is still
starting (it checks every second whether its parent is still the process
that started it).

Determinism: the child's results depend only on the chunk (its rounds and
rows) and the plan, never on when it runs.
"""

from __future__ import annotations

import multiprocessing
import os
import queue
import signal
import traceback
from typing import Any

import numpy as np

# The child's environment: one thread for every numeric library, and no
# TensorFlow C++ log lines below FATAL. Multiprocessing's spawn re-imports the
# parent's main script (an experiment imports TensorFlow at its top) before
# `_child` can point stderr at /dev/null, and TensorFlow's start-up ERROR lines
# (cuDNN/cuFFT/cuBLAS factories) would break the parent's progress bar; the
# child's own errors come back through the queue with their traceback.
SINGLE_THREAD_ENV = {
    "OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1",
    "MKL_NUM_THREADS": "1", "TF_NUM_INTRAOP_THREADS": "1",
    "TF_NUM_INTEROP_THREADS": "1", "TF_CPP_MIN_LOG_LEVEL": "3",
}
DEFAULT_NICE = 10


class StreamWorkerError(RuntimeError):
  """The background worker failed or died; its traceback is in the message."""


def _child(inbox, outbox, job: dict[str, Any]) -> None:
  """The child's loop: ("chunk", start, end, rows_path, state_path, clips)
  messages; it fills the cache while no message waits."""
  try:
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the parent's
    # Quiet: TensorFlow's C++ start-up lines would break the parent's
    # progress bar; errors come back through `outbox` with their traceback.
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, 1)
    os.dup2(devnull, 2)
    os.nice(job["nice"])
    import numpy as np  # pylint: disable=g-import-not-at-top
    import tensorflow as tf  # pylint: disable=g-import-not-at-top
    tf.config.threading.set_intra_op_parallelism_threads(1)
    tf.config.threading.set_inter_op_parallelism_threads(1)
    from tff_canary.federated.scores import canary_cache  # pylint: disable=g-import-not-at-top
    from tff_canary.federated.scores import cosine_chunks  # pylint: disable=g-import-not-at-top
    from tff_canary.federated.scores import known_canary_removal  # pylint: disable=g-import-not-at-top

    canaries, m = job["canaries"], job["canaries"].num_canaries
    removal = (None if job["clients_per_round"] is None else
               known_canary_removal.KnownCanaryRemoval(
                   canaries, job["clients_per_round"]))
    if job["start_path"] is None:
      running = cosine_chunks.RunningMax.empty(m)
    else:
      running = cosine_chunks.RunningMax.load(job["start_path"], m)
    cache = canary_cache.CanaryCache.create(
        canaries.seed, m, job["dim"], job["canaries_per_block"],
        canary_cache.default_budget_bytes() if job["cache_bytes"] is None
        else job["cache_bytes"])

    def report_filled():
      if cache.newly_filled:
        outbox.put(("cached", tuple(cache.newly_filled)))
        cache.newly_filled.clear()

    outbox.put(("ready", os.getpid(), cache.fd, cache.cached_canaries))
    # The parent's pid as the parent saw it: read here, os.getppid() would be
    # 1 already if the parent died while this child was starting.
    parent = job["parent_pid"]
    while True:
      try:
        message = inbox.get(timeout=1.0 if cache.next_unfilled() is None
                            else 0.0)
      except queue.Empty:
        if os.getppid() != parent:  # the parent died (SIGKILL): stop too
          break
        first = cache.next_unfilled()
        if first is not None:  # idle: the next block of the cache
          cache.fill(first)
          report_filled()
        continue
      if message is None:
        break
      _, start, end, rows_path, state_path, clips = message
      rows = np.load(rows_path)[:end - start]
      round_ids = np.arange(start, end)
      cosine_chunks.take_chunk(
          running, cache.blocks(), rows, round_ids,
          None if removal is None else removal.chunk(round_ids, clips),
          canary=cache.canary)
      del rows
      running.save(state_path)
      report_filled()
      outbox.put(("done", end))
  except BaseException:  # pylint: disable=broad-except
    outbox.put(("error", traceback.format_exc()))


class StreamWorker:
  """Parent-side handle of the child (module docstring)."""

  def __init__(self, *, canaries: Any, dim: int, canaries_per_block: int,
               start_path: str | None, nice: int = DEFAULT_NICE,
               clients_per_round: float | None = None,
               cache_bytes: int | None = None):
    """Starts the child.

    Args:
      canaries: The run's `CanaryConfig` (seed, number, participation).
      dim: d.
      canaries_per_block: Canaries generated at a time (the block).
      start_path: A running max to start from, or None.
      nice: Niceness added for the child.
      clients_per_round: With it, each chunk is taken without the other
        inserted canaries (`known_canary_removal`); `submit` then gives the
        chunk's clips.
      cache_bytes: Memory for the canary cache (`canary_cache`); None: the
        default, half of the memory available when the child starts; 0: no
        cache (every chunk regenerates every canary).
    """
    self._canaries = canaries
    self._dim = int(dim)
    self._block = int(canaries_per_block)
    context = multiprocessing.get_context("spawn")
    self._inbox = context.Queue()
    self._outbox = context.Queue()
    job = dict(canaries=canaries, dim=int(dim),
               canaries_per_block=int(canaries_per_block),
               start_path=start_path, nice=int(nice),
               clients_per_round=clients_per_round, parent_pid=os.getpid(),
               cache_bytes=None if cache_bytes is None else int(cache_bytes))
    self._process = context.Process(target=_child, daemon=True,
                                    args=(self._inbox, self._outbox, job),
                                    name="tff-canary-stream")
    saved = {k: os.environ.get(k) for k in SINGLE_THREAD_ENV}
    os.environ.update(SINGLE_THREAD_ENV)  # the spawned child inherits these
    try:
      self._process.start()
    finally:
      for key, value in saved.items():
        if value is None:
          os.environ.pop(key, None)
        else:
          os.environ[key] = value
    self.pending: list[int] = []  # ends of chunks sent and not done
    self.ready = False  # the child has loaded TensorFlow and its state
    self.cached_canaries = 0  # the cache's size (canaries), once ready
    self.filled: set[int] = set()  # first ids of the cache's filled blocks
    self._cache_fd = None

  @property
  def pid(self) -> int:
    return self._process.pid

  def submit(self, start: int, end: int, rows_path: str,
             state_path: str, clips: Any = None) -> None:
    """Sends the chunk of rounds start..end-1 (rows in `rows_path`, their
    clips C_r in `clips`)."""
    self._inbox.put(("chunk", int(start), int(end), rows_path, state_path,
                     None if clips is None else np.asarray(clips, np.float64)))
    self.pending.append(int(end))

  def poll(self, block: bool = False, timeout: float | None = None
           ) -> list[int]:
    """Ends of the chunks finished since the last poll.

    Blocking waits for at least one (checking every second that the child
    lives). Raises StreamWorkerError if the child failed or died.
    """
    finished = []
    while True:
      try:
        wait = block and not finished
        message = self._outbox.get(block=wait,
                                   timeout=1.0 if wait else None)
      except queue.Empty:
        if not block or finished:
          return finished
        if not self._process.is_alive():
          raise StreamWorkerError(
              f"the stream worker (pid {self.pid}) died with exit code "
              f"{self._process.exitcode}.") from None
        if timeout is not None:
          timeout -= 1.0
          if timeout <= 0:
            return finished
        continue
      kind = message[0]
      if kind == "ready":
        self.ready = True
        _, _, self._cache_fd, self.cached_canaries = message
      if kind == "cached":
        self.filled.update(message[1])
        if block and not finished and not self.pending:
          return finished
      if kind == "error":
        raise StreamWorkerError(f"the stream worker failed:\n{message[1]}")
      if kind == "done":
        self.pending.remove(message[1])
        finished.append(message[1])

  def wait_all(self) -> list[int]:
    """Waits until every chunk sent is done; their ends."""
    finished = []
    while self.pending:
      finished += self.poll(block=True)
    return finished

  def attach_cache(self) -> Any:
    """The child's canary cache, read-only, with the blocks it has reported
    filled (`canary_cache.CanaryCache.attach`), or None (no cache, nothing
    filled yet, or not shareable). Call before `close`; the mapping outlives
    the child."""
    from tff_canary.federated.scores import canary_cache  # pylint: disable=g-import-not-at-top
    self.poll()
    if not self._process.is_alive():
      return None
    return canary_cache.CanaryCache.attach(
        self.pid, self._cache_fd, self._canaries.seed,
        self._canaries.num_canaries, self._dim, self._block,
        self.cached_canaries, self.filled)

  def close(self) -> None:
    """Stops the child and reaps it: at once when idle; a chunk it is still
    on is abandoned (its running max is written atomically, and a resumed
    stream redoes the chunk)."""
    if self._process.is_alive():
      self._inbox.put(None)
      self._process.join(timeout=2)
    if self._process.is_alive():
      self._process.kill()
      self._process.join()
    self._inbox.close()
    self._outbox.close()
