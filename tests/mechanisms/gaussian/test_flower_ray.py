"""The same seeded simulation on 1 and on 2 Ray workers gives the same report.

experiments/flower_app (its ServerApp and ClientApp, the small CNN) runs
twice through `flwr.simulation.run_simulation` on Ray with 2 CPUs: first
with `num_cpus = 2` per ClientApp (one actor at a time), then with
`num_cpus = 1` (two concurrent actors), at `noise-seed` 7 (the app's
opt-in seed of Flower's np.random noise, for simulations only) and every
node sampled each round (server_app.py's docstring: what else would
differ). report.json, less the run directory's path, and the cosine table
must be the same bit for bit; each ClientApp call records its process, so
the test sees that the second run used two workers and the first one.
Without the seed the noise differs, and so do the reports (the last test,
in-process: no Ray).
"""

from __future__ import annotations

import json
import os
import sys
import time

import numpy as np
import pytest
from flwr.app import Context, Message, RecordDict
from flwr.clientapp import ClientApp
from flwr.simulation import run_simulation

import flower_grid
import live_processes
import repo_paths

sys.path.insert(0, str(repo_paths.REPO / "experiments" / "flower_app"))

from tff_canary_emnist import client_app  # noqa: E402  pylint: disable=g-import-not-at-top,wrong-import-position
from tff_canary_emnist import server_app  # noqa: E402  pylint: disable=g-import-not-at-top,wrong-import-position

pytestmark = pytest.mark.slow

NODES = 4
RUN = {"num-server-rounds": 2, "clients-per-round": NODES,
       "model-size": "small", "examples-per-client": 16, "num-inserted": 4,
       "num-held-out": 4, "num-test-clients": 2, "eval-every": 0,
       "noise-multiplier": 1.0, "noise-seed": 7, "plots": False}
PID_DIR = "TFF_CANARY_TEST_PID_DIR"  # where each ClientApp call records its pid

recording_app = ClientApp()


@recording_app.train()
def train(msg: Message, context: Context) -> Message:
  """The app's ClientApp, recording which process ran it."""
  reply = client_app.train(msg, context)
  path = os.path.join(os.environ[PID_DIR], f"{os.getpid()}")
  with open(path, "a", encoding="utf-8") as f:
    f.write(f"{msg.content['config']['server-round']}\n")
  return reply


def _simulate(run_dir, num_cpus: int) -> list[int]:
  """One run on Ray with 2 CPUs, `num_cpus` per ClientApp; the pids of the
  processes that ran the ClientApp."""
  pids = run_dir.parent / f"{run_dir.name}-pids"
  pids.mkdir()
  os.environ[PID_DIR] = str(pids)
  try:
    run_simulation(
        server_app=server_app.make_app({**RUN, "output-dir": str(run_dir)}),
        client_app=recording_app, num_supernodes=NODES, backend_name="ray",
        backend_config={"client_resources": {"num_cpus": num_cpus},
                        "init_args": {"num_cpus": 2}})
  finally:
    del os.environ[PID_DIR]
  calls = sum(len(p.read_text().split()) for p in pids.iterdir())
  assert calls == NODES * RUN["num-server-rounds"]
  return sorted(int(p.name) for p in pids.iterdir())


def _report(run_dir) -> dict:
  """report.json without the run directory's path (`run_dir` and the
  config's `output_dir`: the keys that must differ between two
  directories; it holds no timings)."""
  report = json.loads((run_dir / "report.json").read_text())
  assert report.pop("run_dir") == str(run_dir)
  assert report["config"].pop("output_dir") == str(run_dir)
  return report


def _table(run_dir) -> dict[str, np.ndarray]:
  with np.load(run_dir / "cosines.npz") as table:
    return dict(table)


def test_one_and_two_ray_workers_give_the_same_report(tmp_path):
  before = set(live_processes.processes())
  started = time.monotonic()
  one = _simulate(tmp_path / "one", num_cpus=2)
  middle = time.monotonic()
  two = _simulate(tmp_path / "two", num_cpus=1)
  ended = time.monotonic()
  print(f"run_simulation: 1 worker {middle - started:.1f} s, 2 workers "
        f"{ended - middle:.1f} s")
  assert len(one) == 1 and len(two) == 2, (one, two)
  first, second = _report(tmp_path / "one"), _report(tmp_path / "two")
  assert first == second
  assert "noise_seed=7" in first["headline"]["noise_check"]["text"]
  a, b = _table(tmp_path / "one"), _table(tmp_path / "two")
  assert sorted(a) == sorted(b)
  for key in a:
    np.testing.assert_array_equal(a[key], b[key], err_msg=key)
  assert ((tmp_path / "one" / "cosines.csv").read_bytes()
          == (tmp_path / "two" / "cosines.csv").read_bytes())
  left = live_processes.left_after(before, os.getsid(0))  # Ray's actors
  assert not left, left


def _local_train(message: Message):
  node = message.metadata.dst_node_id
  context = Context(run_id=1, node_id=node,
                    node_config={"partition-id": node - 1},
                    state=RecordDict(), run_config={})
  return client_app.train(message, context).content


class _ReversedGrid(flower_grid.LocalGrid):
  """Replies in the reverse of LocalGrid's order, as a worker finishing
  first would reorder them."""

  def send_and_receive(self, messages, *, timeout=None):
    return list(reversed(super().send_and_receive(messages, timeout=timeout)))


def _in_process(run_dir, grid_class, noise_seed: int) -> dict:
  with flower_grid.server_identity():
    server_app.run(grid_class(NODES, _local_train), server_app.settings(
        {**RUN, "noise-seed": noise_seed, "output-dir": str(run_dir)}))
  return _report(run_dir)


def test_the_seed_and_the_writer_order_are_what_makes_runs_equal(tmp_path):
  state = np.random.get_state()
  seeded = _in_process(tmp_path / "a", flower_grid.LocalGrid, 7)
  # The app put np.random back as it found it (the process's RNG is not
  # left known from the seed).
  after = np.random.get_state()
  assert after[0] == state[0] and np.array_equal(after[1], state[1])
  # Replies in another order: the same report (InWriterOrder sorts them).
  assert _in_process(tmp_path / "b", _ReversedGrid, 7) == seeded
  # Unseeded, two runs draw different noise: the reports differ (so the
  # equalities above are the seed's doing, not a report blind to noise).
  unseeded = [_in_process(tmp_path / f"u{i}", flower_grid.LocalGrid, -1)
              for i in range(2)]
  assert unseeded[0] != unseeded[1]
  assert "noise_seed" not in unseeded[0]["headline"]["noise_check"]["text"]
