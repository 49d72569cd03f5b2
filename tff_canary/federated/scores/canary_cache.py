"""The stream's canaries, generated once and kept in shared memory.

Every chunk of rounds meets every canary (`cosine_chunks`). Regenerating the
m canaries for each of the R / B chunks costs m R / B canary generations,
against 2 m B d flops of products per chunk; with the generation and GEMM
rates `bench/round_overhead.py` (c) measures, the generations are most of
the stream worker's work at the B a modest disk budget gives. A
`CanaryCache` keeps the canaries instead, in whole blocks
of the plan's block size (the first blocks, as many as the budget holds):
m generations per run, whatever B, for m x 4 d bytes of memory.

Bits: a cached block is `canary_directions.canary_block`'s output for the
same ids, written into the cache instead of a buffer, so the cache changes
time, never a cosine (tests/test_canary_cache.py compares tables with a full
cache, a partial one and none).

Shared memory: the cache is one anonymous memory file (Linux `memfd_create`)
that the worker fills, block by block, when it is idle or when a chunk needs
a block. At the end of the run the parent maps the same file (read-only,
through `/proc/<worker pid>/fd/<fd>`) for the end pass, so the canaries the
worker generated are not generated again, and the end pass runs at the
parent's priority with every core. The file has no name: it goes away when
the last process holding it (the worker, or the parent's mapping at the end)
ends, even by SIGKILL, so a killed run leaves nothing behind. Where it cannot
be shared (no memfd, or /proc closed to the parent), the parent regenerates
what it needs, as without a cache.

The default budget is half the memory the kernel reports available
(`MemAvailable`) when the worker starts: the cache is the part of streaming
that trades memory for CPU, and the other half stays for training.
"""

from __future__ import annotations

import mmap
import os
from typing import Iterator

import numpy as np

from tff_canary.federated.insertion import canary_directions
from tff_canary.stats import validation

MEMORY_FRACTION = 0.5


def available_bytes() -> int:
  """The kernel's MemAvailable (Linux), else 0."""
  try:
    with open("/proc/meminfo", encoding="ascii") as f:
      for line in f:
        if line.startswith("MemAvailable:"):
          return int(line.split()[1]) * 1024
  except OSError:
    pass
  return 0


def default_budget_bytes() -> int:
  """MEMORY_FRACTION of the memory available now (module docstring)."""
  return int(MEMORY_FRACTION * available_bytes())


def cacheable_canaries(num_canaries: int, dim: int, canaries_per_block: int,
                       budget_bytes: int) -> int:
  """How many canaries the whole blocks that fit `budget_bytes` hold."""
  m = validation.as_int(num_canaries, "num_canaries", minimum=1)
  dim = validation.as_dim(dim)
  block = validation.as_int(canaries_per_block, "canaries_per_block",
                            minimum=1)
  budget = validation.as_int(budget_bytes, "cache_bytes", minimum=0)
  fit = budget // (4 * dim)
  return int(m if fit >= m else fit - fit % block)


class CanaryCache:
  """The first `cached_canaries` canaries of a run, in whole blocks.

  The worker creates it (`create`) and fills it (`fill`, `blocks`); the
  parent attaches to it at the end (`attach`) and reads the blocks the
  worker reported filled (`source`). Blocks past the cache are generated on
  demand into a buffer.
  """

  def __init__(self, seed: int, num_canaries: int, dim: int,
               canaries_per_block: int, cached_canaries: int,
               memory: mmap.mmap | None, fd: int | None,
               filled: set[int] | None = None):
    self.seed = seed
    self.num_canaries = num_canaries
    self.dim = dim
    self.block = canaries_per_block
    self.cached_canaries = cached_canaries
    self.fd = fd
    self._memory = memory
    self._array = (np.frombuffer(memory, np.float32).reshape(
        cached_canaries, dim) if cached_canaries else None)
    self.filled = set() if filled is None else set(filled)
    self.newly_filled: list[int] = []  # filled here, not yet reported
    self._buffer = None

  @classmethod
  def create(cls, seed: int, num_canaries: int, dim: int,
             canaries_per_block: int, budget_bytes: int) -> CanaryCache:
    """An empty cache for the blocks that fit `budget_bytes` (worker side).

    Shared (a memfd) where the platform has it, else private memory.
    """
    cached = cacheable_canaries(num_canaries, dim, canaries_per_block,
                                budget_bytes)
    memory, fd = None, None
    if cached:
      size = cached * 4 * dim
      if hasattr(os, "memfd_create"):
        fd = os.memfd_create("tff-canary-canaries", os.MFD_CLOEXEC)
        os.ftruncate(fd, size)  # pages are taken as blocks are written
        memory = mmap.mmap(fd, size)
      else:
        memory = mmap.mmap(-1, size)
    return cls(seed, num_canaries, dim, canaries_per_block, cached, memory,
               fd)

  @classmethod
  def attach(cls, pid: int, fd: int, seed: int, num_canaries: int, dim: int,
             canaries_per_block: int, cached_canaries: int,
             filled: set[int]) -> CanaryCache | None:
    """The worker `pid`'s cache, read-only (parent side); None if it cannot
    be opened (the parent then generates every block)."""
    if not cached_canaries or fd is None or not filled:
      return None
    size = cached_canaries * 4 * dim
    try:
      own = os.open(f"/proc/{pid}/fd/{fd}", os.O_RDONLY)
    except OSError:
      return None
    try:
      if os.fstat(own).st_size != size:
        return None
      memory = mmap.mmap(own, size, prot=mmap.PROT_READ)
    finally:
      os.close(own)  # the mapping keeps the file
    return cls(seed, num_canaries, dim, canaries_per_block, cached_canaries,
               memory, None, filled)

  def firsts(self) -> range:
    """The first canary id of every block of the run."""
    return range(0, self.num_canaries, self.block)

  def _cached_rows(self, first: int) -> np.ndarray | None:
    # cached_canaries is m or a multiple of the block: a block is all in
    # the cache or all out of it.
    if first >= self.cached_canaries:
      return None
    return self._array[first:min(first + self.block, self.cached_canaries)]

  def next_unfilled(self) -> int | None:
    """The first id of the next cacheable block not yet filled, or None."""
    return next((first for first in range(0, self.cached_canaries,
                                          self.block)
                 if first not in self.filled), None)

  def fill(self, first: int) -> None:
    """Generates block `first` into the cache (worker side; listed in
    `newly_filled` until the worker reports it)."""
    rows = self._cached_rows(first)
    ids = np.arange(first, first + rows.shape[0])
    canary_directions.canary_block(self.seed, ids, self.dim, out=rows)
    self.filled.add(first)
    self.newly_filled.append(first)

  def _filled_rows(self, first: int) -> np.ndarray | None:
    """Block `first`'s rows in the cache, generated first if not yet
    (worker side); None for a block outside the cache."""
    rows = self._cached_rows(first)
    if rows is not None and first not in self.filled:
      self.fill(first)
    return rows

  def blocks(self) -> Iterator[tuple[np.ndarray, np.ndarray]]:
    """(block_ids, unit canaries) of every block, from the cache (filled on
    demand; `newly_filled` lists them) or generated into a buffer."""
    for first in self.firsts():
      ids = np.arange(first, min(first + self.block, self.num_canaries))
      rows = self._filled_rows(first)
      yield ids, self._generate(ids) if rows is None else rows

  def canary(self, canary_id: int) -> np.ndarray:
    """Canary `canary_id`'s unit vector (worker side): from the cache (its
    block filled first if need be), else generated."""
    first = canary_id - canary_id % self.block
    rows = self._filled_rows(first)
    if rows is None:
      return canary_directions.canary_block(self.seed, [canary_id],
                                            self.dim)[0]
    return rows[canary_id - first]

  def source(self, block_ids: np.ndarray, out: np.ndarray) -> np.ndarray:
    """A block for `cosine_pass.compute_cosine_table(canary_blocks=)`: the
    cached rows if the block is filled, else generated into `out`."""
    first = int(block_ids[0])
    rows = self._cached_rows(first)
    if rows is not None and first in self.filled and rows.shape[0] == (
        block_ids.size):
      return rows
    return canary_directions.canary_block(self.seed, block_ids, self.dim,
                                          out=out)

  def _generate(self, ids: np.ndarray) -> np.ndarray:
    if self._buffer is None:
      self._buffer = np.empty((self.block, self.dim), np.float32)
    return canary_directions.canary_block(self.seed, ids, self.dim,
                                          out=self._buffer)

  def close(self) -> None:
    """Unmaps the cache (and closes the worker's file); while arrays taken
    from it live, the mapping stays until the last of them goes."""
    self._array = None
    if self._memory is not None:
      try:
        self._memory.close()
      except BufferError:  # views of it still exist: freed with them
        pass
      self._memory = None
    if self.fd is not None:
      os.close(self.fd)
      self.fd = None
