"""Tests of tff_canary.federated.scores.cosine_stream, cosine_chunks, stream_worker.

No TFF computation: synthetic aggregates, the real canaries (the worker
process regenerates them with TensorFlow). The reference is the
post-training pass (`cosine_pass.compute_cosine_table`), itself checked
against float64 brute force in tests/test_cosine_pass.py.
"""

from __future__ import annotations

import json
import os

import numpy as np
import pytest

from tff_canary.federated.insertion import canary_directions
from tff_canary.federated.scores import cosine_chunks
from tff_canary.federated.scores import cosine_pass
from tff_canary.federated.scores import cosine_stream
from tff_canary.federated.scores import stream_worker
from tff_canary.stats.canaries import canary_config
from tff_canary.stats.canaries import schedules

DIM, ROUNDS, M = 3000, 23, 9


def _config():
  return canary_config.CanaryConfig(
      seed=5, num_inserted=5, num_held_out=4,
      schedule=schedules.FixedPresentations(ROUNDS, 2))


def _aggregates(seed=0, planted=True):
  rng = np.random.default_rng(seed)
  a = rng.normal(size=(ROUNDS, DIM)).astype(np.float32)
  if planted:  # canary 3 stands out in round 17, canary 0 in round 2
    a[17] += 40 * canary_directions.canary_block(5, [3], DIM)[0]
    a[2] += 40 * canary_directions.canary_block(5, [0], DIM)[0]
  return a


def _weights():
  rng = np.random.default_rng(9)
  return rng.normal(size=DIM), rng.normal(size=DIM)


def _plan(chunk_rounds=5, block=4):
  row = 4 * DIM
  plan = cosine_stream.plan_stream(
      DIM, M, ROUNDS, memory_budget_bytes=(chunk_rounds + block + 1) * row
      + 8 * block * chunk_rounds + row - 1,
      disk_budget_bytes=3 * chunk_rounds * row)
  assert (plan.chunk_rounds, plan.canaries_per_block) == (chunk_rounds, block)
  return plan


# For the known-canary removal: clients_per_round and each round's clip.
CLIENTS = 4
CLIPS = 30.0 + np.arange(ROUNDS)  # an adaptive-looking clip per round


def _with_canaries(aggregates):
  """The aggregates with every inserted canary at C_r / n in its rounds."""
  out = aggregates.copy()
  for r, j in _config().participation.events:
    out[r] += (CLIPS[r] / CLIENTS) * canary_directions.canary_block(
        5, [int(j)], DIM)[0]
  return out


def _stream(directory, aggregates, plan, done=0, stop=None,
            checkpoint_every=4, clients_per_round=None):
  """Rounds done..stop-1 through a CosineStream, a checkpoint every
  `checkpoint_every` rounds; returns (stream, peak disk)."""
  # nice=0: the test machine is shared, a niced worker would wait its turn.
  stream = cosine_stream.CosineStream(directory, _config(), plan, done=done,
                                      nice=0,
                                      clients_per_round=clients_per_round)
  stop = ROUNDS if stop is None else stop
  for r in range(done, stop):
    stream.record({"aggregator": {"round_num": np.int32(r),
                                  "clip": np.float32(CLIPS[r]),
                                  "noised_aggregate": aggregates[r]}})
    if (r + 1) % checkpoint_every == 0 or r + 1 == ROUNDS:
      stream.checkpointed(r + 1)
  return stream


def test_stream_equals_the_post_training_pass_bit_for_bit(tmp_path):
  aggregates, (theta0, theta_t), plan = _aggregates(), _weights(), _plan()
  stream = _stream(tmp_path / "s", aggregates, plan)
  try:
    table = stream.finish(theta0, theta_t, progress=False)
  finally:
    stream.close()
  reference = cosine_pass.compute_cosine_table(
      _config(), theta0, theta_t, aggregates, progress=False,
      plan=(plan.chunk_rounds, plan.canaries_per_block))
  assert table == reference
  assert table.max_cosine.tobytes() == reference.max_cosine.tobytes()
  assert table.final_cosine.tobytes() == reference.final_cosine.tobytes()
  assert table.max_round[3] == 17 and table.max_round[0] == 2
  # The chunks are gone; plan.json says how the work was split.
  names = os.listdir(tmp_path / "s")
  assert not [n for n in names if n.startswith("rounds-")]
  with open(tmp_path / "s" / "plan.json") as f:
    saved = json.load(f)
  assert saved["chunk_rounds"] == 5 and saved["num_chunks"] == 5
  assert "rounds 20..22" in saved["at_the_end"]
  # Disk: never more than 3 chunks (checkpoints every 4 <= B = 5 rounds).
  assert 0 < stream.peak_disk_bytes <= 3 * 5 * 4 * DIM + 3 * 128
  # A finished stream reopened gives the saved table without recomputing.
  again = cosine_stream.CosineStream(tmp_path / "s", _config(), plan,
                                     done=ROUNDS, nice=0)
  assert again.finish(theta0, theta_t, progress=False) == table
  again.close()


def test_stream_removing_known_canaries_equals_the_pass_bit_for_bit(
    tmp_path):
  aggregates, (theta0, theta_t), plan = (_with_canaries(_aggregates()),
                                         _weights(), _plan())
  stream = _stream(tmp_path / "s", aggregates, plan,
                   clients_per_round=CLIENTS)
  try:
    table = stream.finish(theta0, theta_t, progress=False)
  finally:
    stream.close()
  kw = dict(progress=False, plan=(plan.chunk_rounds, plan.canaries_per_block))
  reference = cosine_pass.compute_cosine_table(
      _config(), theta0, theta_t, aggregates, clips=CLIPS,
      clients_per_round=CLIENTS, **kw)
  plain = cosine_pass.compute_cosine_table(_config(), theta0, theta_t,
                                           aggregates, **kw)
  assert table.known_canaries_removed == "all_iterates"
  assert table == reference
  assert table.max_cosine.tobytes() == reference.max_cosine.tobytes()
  # The removal changed the statistic (the worker took chunks 0..3 with it,
  # so a worker that ignored it would differ from the reference above).
  assert plain.known_canaries_removed == "none"
  assert not np.array_equal(table.max_cosine, plain.max_cosine)
  with open(tmp_path / "s" / "plan.json") as f:
    assert json.load(f)["known_canaries_removed"] == "all_iterates"
  # Without clips the stream refuses the round rather than skip the removal.
  bare = cosine_stream.CosineStream(tmp_path / "t", _config(), plan, nice=0,
                                    clients_per_round=CLIENTS)
  try:
    with pytest.raises(ValueError, match="round 0 has no clip"):
      bare.record({"round_num": np.int32(0), "noised_aggregate": aggregates[0]})
  finally:
    bare.close()


@pytest.mark.parametrize("kill_after", [9, 22])
def test_killed_and_resumed_stream_with_removal_gives_the_same_table(
    tmp_path, kill_after):
  aggregates, (theta0, theta_t), plan = (_with_canaries(_aggregates()),
                                         _weights(), _plan())
  straight = _stream(tmp_path / "a", aggregates, plan,
                     clients_per_round=CLIENTS)
  expected = straight.finish(theta0, theta_t, progress=False)
  straight.close()
  other = _with_canaries(_aggregates(seed=1, planted=False))
  checkpoint = kill_after - kill_after % 4
  mixed = np.where(np.arange(ROUNDS)[:, None] < checkpoint, aggregates, other)
  killed = _stream(tmp_path / "b", mixed, plan, stop=kill_after,
                   clients_per_round=CLIENTS)
  killed._worker.wait_all()  # pylint: disable=protected-access
  killed.close()
  resumed = _stream(tmp_path / "b", aggregates, plan, done=checkpoint,
                    clients_per_round=CLIENTS)
  table = resumed.finish(theta0, theta_t, progress=False)
  resumed.close()
  assert table == expected


def test_another_plan_differs_by_less_than_the_rounding_bound(tmp_path):
  aggregates, (theta0, theta_t) = _aggregates(), _weights()
  plan = _plan(chunk_rounds=3, block=2)
  stream = _stream(tmp_path / "s", aggregates, plan)
  try:
    table = stream.finish(theta0, theta_t, progress=False)
  finally:
    stream.close()
  reference = cosine_pass.compute_cosine_table(_config(), theta0, theta_t,
                                               aggregates, progress=False)
  canaries = canary_directions.canary_block(5, np.arange(M), DIM)
  norms = cosine_chunks.row_norms(aggregates)
  bound = cosine_chunks.reorder_bound(canaries, aggregates, norms).max(axis=1)
  difference = np.abs(table.max_cosine - reference.max_cosine)
  assert np.all(difference <= bound)
  # The bound is a worst case (gamma_d = d u, 3e-4 here, a tenth of the
  # null's sd 1/sqrt(d)); float32 sums of random signs err by ~sqrt(d) u, so
  # the observed difference is far smaller: 1e-6 as in test_cosine_pass.
  assert bound.max() < 0.1 / np.sqrt(DIM)
  assert difference.max() < 1e-6
  cos = cosine_chunks.round_cosines(canaries, aggregates, norms)
  top2 = np.sort(cos, axis=1)[:, -2:]
  clear = top2[:, 1] - top2[:, 0] > 2 * bound
  np.testing.assert_array_equal(table.max_round[clear],
                                reference.max_round[clear])


@pytest.fixture(scope="module", name="straight")
def _straight(tmp_path_factory):
  """The uninterrupted stream's table."""
  stream = _stream(tmp_path_factory.mktemp("straight"), _aggregates(),
                   _plan())
  try:
    return stream.finish(*_weights(), progress=False)
  finally:
    stream.close()


@pytest.mark.parametrize("kill_after", [9, 22, 23])
def test_killed_and_resumed_stream_gives_the_same_table(tmp_path, straight,
                                                        kill_after):
  aggregates, (theta0, theta_t), plan = _aggregates(), _weights(), _plan()
  expected = straight
  # The killed run saw other aggregates after its last checkpoint (unseeded
  # noise: the resumed rounds differ), so anything it kept from them would
  # show. Its worker may have finished chunks past the checkpoint.
  other = _aggregates(seed=1, planted=False)
  checkpoint = (ROUNDS if kill_after == ROUNDS
                else kill_after - kill_after % 4)
  mixed = np.where(np.arange(ROUNDS)[:, None] < checkpoint, aggregates, other)
  killed = _stream(tmp_path / "b", mixed, plan, stop=kill_after)
  killed._worker.wait_all()  # pylint: disable=protected-access
  killed.close()  # the process dies here; nothing is finished
  resumed = _stream(tmp_path / "b", aggregates, plan, done=checkpoint)
  table = resumed.finish(theta0, theta_t, progress=False)
  resumed.close()
  assert table == expected


def test_plan_and_worker_errors(tmp_path):
  with pytest.raises(ValueError, match="disk_budget_bytes"):
    cosine_stream.plan_stream(1000, 4, 10, 10**9, disk_budget_bytes=100)
  with pytest.raises(ValueError, match="memory_budget_bytes"):
    cosine_stream.plan_stream(1000, 4, 10, 1000, disk_budget_bytes=10**6)
  plan = cosine_stream.plan_stream(1000, 4, 10, 10**9, 10**9)
  assert plan.chunk_rounds == 10 and plan.canaries_per_block == 4
  # A chunk file that is not there: the worker's error reaches the parent.
  worker = stream_worker.StreamWorker(canaries=_config(), dim=10,
                                      canaries_per_block=2, start_path=None,
                                      nice=0)
  try:
    worker.submit(0, 3, str(tmp_path / "missing.npy"),
                  str(tmp_path / "r.npz"))
    with pytest.raises(stream_worker.StreamWorkerError, match="missing"):
      worker.wait_all()
  finally:
    worker.close()


_ORPHAN_SCRIPT = """
import os, sys
from tff_canary.federated.scores import stream_worker
from tff_canary.stats.canaries import canary_config
from tff_canary.stats.canaries import schedules
config = canary_config.CanaryConfig(
    seed=5, num_inserted=2, num_held_out=2,
    schedule=schedules.FixedPresentations(4, 1))
worker = stream_worker.StreamWorker(canaries=config, dim=10,
                                    canaries_per_block=2, start_path=None,
                                    nice=0)
print(worker.pid, flush=True)
os.kill(os.getpid(), 9)  # the parent dies before the child is ready
"""


def _alive(pid):
  try:
    os.kill(pid, 0)
  except ProcessLookupError:
    return False
  with open(f"/proc/{pid}/stat") as f:  # a zombie is not running
    return f.read().split(")")[-1].split()[0] != "Z"


def test_the_worker_stops_when_its_parent_is_killed_while_it_starts():
  # Regression: the child read its parent's pid only once ready (TensorFlow
  # loaded, seconds); a parent SIGKILLed before that left it orphaned under
  # pid 1 for good (seen after the crash/resume tests).
  import subprocess  # pylint: disable=g-import-not-at-top
  import sys  # pylint: disable=g-import-not-at-top
  import time  # pylint: disable=g-import-not-at-top
  proc = subprocess.run([sys.executable, "-c", _ORPHAN_SCRIPT],
                        capture_output=True, text=True, timeout=120,
                        check=False)
  pid = int(proc.stdout.split()[0])
  try:
    # Its start (TensorFlow) takes a few seconds, 20+ on a loaded machine;
    # then it notices within a second.
    deadline = time.monotonic() + 90
    while _alive(pid) and time.monotonic() < deadline:
      time.sleep(0.5)
    assert not _alive(pid), f"stream worker {pid} outlived its parent"
  finally:
    if _alive(pid):
      os.kill(pid, 9)
