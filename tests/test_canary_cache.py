"""Tests of tff_canary.federated.scores.canary_cache and the stream's use of it.

The cache may change the time the stream takes, never its table: streams
with no cache, a cache of one block and a cache of every canary give the
post-training pass's table bit for bit, and the end pass really reads the
worker's blocks (plan.json counts them).
"""

from __future__ import annotations

import json
import os
import signal
import time

import numpy as np
import pytest

from tff_canary.federated.scores import canary_cache
from tff_canary.federated.insertion import canary_directions
from tff_canary.federated.scores import cosine_pass
from tff_canary.federated.scores import cosine_stream
from tff_canary.federated.scores import stream_worker
from tff_canary.stats.canaries import canary_config
from tff_canary.stats.canaries import schedules

DIM, ROUNDS, M, BLOCK = 3000, 23, 9, 4
CLIENTS, CLIPS = 4, 30.0 + np.arange(ROUNDS)


def test_cacheable_canaries_counts_whole_blocks():
  row = 4 * DIM
  assert canary_cache.cacheable_canaries(M, DIM, BLOCK, 0) == 0
  assert canary_cache.cacheable_canaries(M, DIM, BLOCK, 3 * row) == 0
  assert canary_cache.cacheable_canaries(M, DIM, BLOCK, 4 * row) == 4
  assert canary_cache.cacheable_canaries(M, DIM, BLOCK, 8 * row + 7) == 8
  # Every canary fits: the last, partial block is cached too.
  assert canary_cache.cacheable_canaries(M, DIM, BLOCK, 9 * row) == 9
  with pytest.raises(ValueError, match="cache_bytes"):
    canary_cache.cacheable_canaries(M, DIM, BLOCK, -1)


def test_cached_blocks_are_the_generated_canaries_and_can_be_shared():
  cache = canary_cache.CanaryCache.create(5, M, DIM, BLOCK, 8 * 4 * DIM)
  try:
    assert cache.cached_canaries == 8 and cache.next_unfilled() == 0
    cache.fill(0)
    assert cache.next_unfilled() == 4 and cache.newly_filled == [0]
    blocks = list(cache.blocks())  # fills block 4; block 8 is generated
    assert cache.next_unfilled() is None and cache.newly_filled == [0, 4]
    reference = canary_directions.canary_block(5, np.arange(M), DIM)
    joined = np.concatenate([b for _, b in blocks])
    assert joined.tobytes() == reference.tobytes()
    assert [ids.tolist() for ids, _ in blocks] == [[0, 1, 2, 3],
                                                   [4, 5, 6, 7], [8]]
    # One canary (the known-canary removal's): cached or generated, the same.
    for j in (0, 5, 8):
      assert cache.canary(j).tobytes() == reference[j].tobytes()
    # Another process's view (here our own pid): the reported blocks come
    # from the shared file, the others are generated into `out`.
    assert os.readlink(f"/proc/self/fd/{cache.fd}").startswith("/memfd:")
    view = canary_cache.CanaryCache.attach(os.getpid(), cache.fd, 5, M, DIM,
                                           BLOCK, 8, {0})
    out = np.empty((BLOCK, DIM), np.float32)
    shared = view.source(np.arange(4), out)
    assert not np.shares_memory(shared, out)
    assert shared.tobytes() == reference[:4].tobytes()
    generated = view.source(np.arange(4, 8), out)
    assert np.shares_memory(generated, out)
    assert generated.tobytes() == reference[4:8].tobytes()
    assert view.source(np.arange(8, 9), out).tobytes() == reference[
        8:].tobytes()
    view.close()
  finally:
    cache.close()
  # Nothing to attach to: no blocks filled, no cache, or a closed file.
  assert canary_cache.CanaryCache.attach(os.getpid(), 3, 5, M, DIM, BLOCK, 8,
                                         set()) is None
  assert canary_cache.CanaryCache.attach(os.getpid(), None, 5, M, DIM, BLOCK,
                                         0, {0}) is None
  assert canary_cache.CanaryCache.attach(os.getpid(), 10**6, 5, M, DIM,
                                         BLOCK, 8, {0}) is None


def _config():
  return canary_config.CanaryConfig(
      seed=5, num_inserted=5, num_held_out=4,
      schedule=schedules.FixedPresentations(ROUNDS, 2))


def _plan():
  row = 4 * DIM
  plan = cosine_stream.plan_stream(
      DIM, M, ROUNDS, memory_budget_bytes=(5 + BLOCK + 1) * row
      + 8 * BLOCK * 5 + row - 1, disk_budget_bytes=3 * 5 * row)
  assert (plan.chunk_rounds, plan.canaries_per_block) == (5, BLOCK)
  return plan


@pytest.fixture(scope="module", name="reference")
def _reference():
  rng = np.random.default_rng(0)
  aggregates = rng.normal(size=(ROUNDS, DIM)).astype(np.float32)
  aggregates[17] += 40 * canary_directions.canary_block(5, [3], DIM)[0]
  for r, j in _config().participation.events:  # inserted at C_r / n
    aggregates[r] += (CLIPS[r] / CLIENTS) * canary_directions.canary_block(
        5, [int(j)], DIM)[0]
  theta0, theta_t = rng.normal(size=DIM), rng.normal(size=DIM)
  # With the known-canary removal, which takes each inserted canary from
  # the cache in the worker (cache.canary) where the cache holds it.
  table = cosine_pass.compute_cosine_table(
      _config(), theta0, theta_t, aggregates, progress=False,
      plan=(5, BLOCK), clips=CLIPS, clients_per_round=CLIENTS)
  assert table.known_canaries_removed == "all_iterates"
  return aggregates, theta0, theta_t, table


@pytest.mark.parametrize("cached,blocks_from_cache", [(0, "0 of 3"),
                                                      (4, "1 of 3"),
                                                      (9, "3 of 3")])
def test_the_cache_changes_no_bit_of_the_table(tmp_path, reference, cached,
                                               blocks_from_cache):
  aggregates, theta0, theta_t, expected = reference
  # nice=0: the test machine is shared, a niced worker would wait its turn.
  stream = cosine_stream.CosineStream(tmp_path, _config(), _plan(), nice=0,
                                      cache_bytes=cached * 4 * DIM,
                                      clients_per_round=CLIENTS)
  try:
    for r in range(ROUNDS):
      stream.record({"round_num": np.int32(r), "clip": np.float32(CLIPS[r]),
                     "noised_aggregate": aggregates[r]})
      stream.checkpointed(r + 1)
    stream._worker.wait_all()  # pylint: disable=protected-access
    table = stream.finish(theta0, theta_t, progress=False)
  finally:
    stream.close()
  assert table == expected
  assert table.max_cosine.tobytes() == expected.max_cosine.tobytes()
  assert table.final_cosine.tobytes() == expected.final_cosine.tobytes()
  with open(tmp_path / "plan.json") as f:
    assert json.load(f)["end_pass_blocks_from_the_cache"] == blocks_from_cache


def test_the_worker_fills_its_cache_while_idle_and_it_dies_with_it():
  before = set(os.listdir("/dev/shm")) if os.path.isdir("/dev/shm") else set()
  worker = stream_worker.StreamWorker(canaries=_config(), dim=DIM,
                                      canaries_per_block=BLOCK,
                                      start_path=None, nice=0,
                                      cache_bytes=M * 4 * DIM)
  try:
    deadline = time.monotonic() + 120
    while len(worker.filled) < 3 and time.monotonic() < deadline:
      worker.poll(block=True, timeout=5)  # it fills the cache while idle
    # No chunk was sent: it filled every block while waiting for one.
    assert worker.filled == {0, 4, 8} and worker.cached_canaries == M
    target = os.readlink(f"/proc/{worker.pid}/fd/{worker._cache_fd}")  # pylint: disable=protected-access
    assert target.startswith("/memfd:")  # anonymous: no name to leak
    os.kill(worker.pid, signal.SIGKILL)
    worker._process.join()  # pylint: disable=protected-access
    assert worker.attach_cache() is None
  finally:
    worker.close()
  # Nothing named the cache's size left in /dev/shm (other processes on a
  # shared machine make and remove small semaphores there meanwhile).
  after = set(os.listdir("/dev/shm")) if os.path.isdir("/dev/shm") else set()
  assert not [n for n in after - before if _size(n) >= M * 4 * DIM]


def _size(name):
  try:
    return os.path.getsize(os.path.join("/dev/shm", name))
  except FileNotFoundError:  # removed meanwhile by its owner
    return 0
