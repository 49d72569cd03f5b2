"""The whole path on Flower's simulation engine: ServerApp, Ray, ClientApps.

One small run of `flwr.simulation.run_simulation(..., backend_name="ray")`:
a ServerApp whose strategy is `ServerSideCanaries` around Flower's
server-side fixed clipping, 4 ClientApps on Ray workers that return noisy
copies of the model, 2 rounds at noise multiplier 0. What the in-process
tests (test_flower.py) drive by hand goes through Flower's own Grid,
SuperLink state and message serialization here, and Ray is stopped after.
"""

from __future__ import annotations

import os
import subprocess
import time

import numpy as np
import pytest
from flwr.app import Array, ArrayRecord, Context, Message, MetricRecord
from flwr.app import RecordDict
from flwr.clientapp import ClientApp
from flwr.serverapp import Grid, ServerApp
from flwr.serverapp.strategy import DifferentialPrivacyServerSideFixedClipping
from flwr.serverapp.strategy import FedAvg
from flwr.simulation import run_simulation

import live_processes
from tff_canary.mechanisms.gaussian import flower
from tff_canary.stats.canaries import canary_config
from tff_canary.stats.canaries import orthogonal_canaries
from tff_canary.stats.canaries import schedules

pytestmark = pytest.mark.slow

NODES, CLIP, ROUNDS, DIM = 4, 1.0, 2, 1000
CANARIES = canary_config.CanaryConfig(
    seed=3, num_inserted=5, num_held_out=5,
    schedule=schedules.FixedPresentations(num_rounds=ROUNDS, presentations=1))
RESULTS = {}  # what the ServerApp's thread leaves for the test

client_app = ClientApp()


@client_app.train()
def train(msg: Message, context: Context) -> Message:
  """A ClientApp's training: the model plus N(0, 0.3^2 I), drawn from its
  node and round."""
  record = msg.content["arrays"]
  rng = np.random.default_rng([context.node_id % 2**32,
                               int(msg.content["config"]["server-round"])])
  arrays = {k: a + 0.3 * rng.normal(size=a.shape)
            for k, a in zip(record.keys(), record.to_numpy_ndarrays())}
  content = RecordDict({"arrays": ArrayRecord({k: Array(v) for k, v in
                                               arrays.items()}),
                        "metrics": MetricRecord({"num-examples": 1})})
  return Message(content, reply_to=msg)


server_app = ServerApp()


@server_app.main()
def main(grid: Grid, context: Context) -> None:
  del context  # unused
  strategy = flower.ServerSideCanaries(
      DifferentialPrivacyServerSideFixedClipping(
          FedAvg(fraction_evaluate=0.0, min_available_nodes=NODES,
                 min_train_nodes=NODES),
          noise_multiplier=0.0, clipping_norm=CLIP,
          num_sampled_clients=NODES),
      CANARIES)
  initial = ArrayRecord({"w": Array(np.zeros(DIM))})
  RESULTS["result"] = strategy.start(grid, initial, num_rounds=ROUNDS)
  RESULTS["strategy"] = strategy


def test_a_simulation_on_ray_inserts_scores_and_leaves_no_ray_process():
  before = set(live_processes.processes())
  session = os.getsid(0)
  started = time.monotonic()
  run_simulation(server_app=server_app, client_app=client_app,
                 num_supernodes=NODES, backend_name="ray",
                 backend_config={"client_resources": {"num_cpus": 2},
                                 "init_args": {"num_cpus": 2}})
  elapsed = time.monotonic() - started
  strategy = RESULTS["strategy"]
  # Both rounds released and scored; without noise each inserted canary
  # scores C/n = 0.25 plus <c_j, u_t>, a held-out one <c_j, u_t> alone,
  # whose sd is |u_t| / sqrt(d), 0.016 here (u_t, the mean of 4 updates
  # clipped to norm 1 in random directions, has norm about 1/2; Ray's
  # node ids, which seed the updates, differ between runs): 0.19 is 12 sd.
  assert [r.server_round for r in strategy.rounds] == [1, 2]
  for r in strategy.rounds:
    inserted = np.isin(np.arange(CANARIES.num_canaries), r.inserted_ids)
    assert r.inserted_ids.size > 0
    assert np.all(np.abs(r.scores[inserted] - CLIP / NODES) < 6 / DIM**0.5)
    assert np.all(np.abs(r.scores[~inserted]) < 6 / DIM**0.5)
  # The final model holds the canaries the wrapper inserted, once each:
  # <c_j, w_2> = C/n + <c_j, u_1 + u_2>, sd 0.022: above C/2n by 5.6 sd.
  final = RESULTS["result"].arrays.to_numpy_ndarrays()[0]
  vectors = orthogonal_canaries.canary_block(CANARIES.seed, np.arange(10),
                                             DIM)
  ids = CANARIES.participation.events[:, 1]
  assert np.all(vectors[ids] @ final > 0.5 * CLIP / NODES)
  # Ray is stopped: no process this test started is left, after a moment
  # for Ray's actors to exit (they outlive ray.shutdown() by a few
  # seconds, orphaned).
  left = live_processes.left_after(before, session)
  assert not left, left
  print(f"run_simulation: {elapsed:.1f} s")


def test_the_leftover_check_sees_a_process_the_test_started():
  # The check above must be able to fail: a child left running is seen,
  # and so is a process orphaned to init (as Ray's actors are); a process
  # whose live parent is another's (the other xdist worker's children) is
  # not: here the orphan's own child.
  before = set(live_processes.processes())
  child = subprocess.Popen(["sleep", "30"])
  orphan = int(subprocess.run(
      ["sh", "-c", "(sleep 30 & wait) >/dev/null 2>&1 & echo $!"],
      capture_output=True, text=True, check=True).stdout)
  try:
    deadline = time.monotonic() + 10
    while not (grandchild := [p for p, v in live_processes.processes().items()
                              if v[3] == orphan]):
      assert time.monotonic() < deadline, "the orphan's sleep never started"
      time.sleep(0.05)
    left = {p for p, _ in live_processes.started_since(before, os.getsid(0))}
    assert child.pid in left and orphan in left
    assert grandchild[0] not in left
  finally:
    child.kill()
    child.wait()
    for pid in (*grandchild, orphan):
      try:
        os.kill(pid, 9)
      except ProcessLookupError:
        pass
  time.sleep(0.2)
  left = {p for p, _ in live_processes.started_since(before, os.getsid(0))}
  assert child.pid not in left and orphan not in left
