"""The README's code blocks run as written (with a small model and sizes),
and so do the two the README sends to the guide (multi-worker runtime,
canary clients); the guide's drop-in page shows the README's blocks."""

import asyncio
import os
import re

import numpy as np
import pytest

import repo_paths
from tff_canary.harness.recording import run_dir

pytestmark = pytest.mark.tff

ROOT = str(repo_paths.REPO)
README = os.path.join(ROOT, "README.md")
GUIDE = os.path.join(ROOT, "docs", "guide")


def python_blocks(path: str) -> list[str]:
  text = open(path, encoding="utf-8").read()
  return re.findall(r"```python\n(.*?)```", text, flags=re.S)


def guide_block(page: str, marker: str) -> str:
  """The one python block of a guide page that contains `marker`."""
  (block,) = [b for b in python_blocks(os.path.join(GUIDE, page))
              if marker in b]
  return block



def _toy_loop():
  """What a README block expects of the user's loop: a 20-feature, 10-class
  linear model (zero-initialized), 4 clients of 8 random examples a round
  (seeded), and SGD optimizers."""
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  import tensorflow_federated as tff  # pylint: disable=g-import-not-at-top
  rng = np.random.default_rng(0)
  spec = (tf.TensorSpec([None, 20], tf.float32), tf.TensorSpec([None], tf.int32))

  def model_fn():
    keras_model = tf.keras.Sequential([tf.keras.layers.Dense(
        10, input_shape=(20,), kernel_initializer="zeros")])
    return tff.learning.models.from_keras_model(
        keras_model, input_spec=spec,
        loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True))

  def client_datasets(round_num):
    del round_num
    return [tf.data.Dataset.from_tensor_slices(
        (rng.normal(size=(8, 20)).astype(np.float32),
         rng.integers(0, 10, 8).astype(np.int32))).batch(4) for _ in range(4)]

  return dict(tff=tff, model_fn=model_fn, client_datasets=client_datasets,
              client_optimizer_fn=tff.learning.optimizers.build_sgdm(0.1),
              server_optimizer_fn=tff.learning.optimizers.build_sgdm(1.0))

def test_readme_drop_in_blocks_run(tmp_path, monkeypatch, capsys):

  # The TFF blocks (the Flower one runs in the Flower environment:
  # tests/project/test_readme_flower.py).
  blocks = [b for b in python_blocks(README) if "flwr" not in b]
  assert len(blocks) == 3 and "build_unweighted_fed_avg" in blocks[0]
  assert "RunWriter" in blocks[1] and "run_training_process" in blocks[2]
  # The recommended design is CanaryConfig's default, and the aggregator
  # runs its own noise self-test: no design argument, no second config.
  assert "assignment=" not in blocks[0] and "directions=" not in blocks[0]
  assert "canary_noise_check.check_noise(aggregator" in blocks[1]
  assert "CanaryConfig(" not in blocks[1] + blocks[2]
  # The guide's page on your own loop shows the same code, never an older one.
  assert python_blocks(os.path.join(GUIDE, "drop-in.md"))[:3] == blocks
  code = "\n".join(blocks)
  # The README's sizes, shrunk for a test: 3 rounds, 6 + 6 canaries, 4 clients.
  for old, new in [("num_rounds = 500", "num_rounds = 3"),
                   ("num_inserted=1000, num_held_out=1000",
                    "num_inserted=6, num_held_out=6"),
                   ("clients_per_round=100", "clients_per_round=4")]:
    assert old in code
    code = code.replace(old, new)

  namespace = _toy_loop()
  monkeypatch.chdir(tmp_path)
  # The README's note: run_training_process needs a current event loop,
  # which an earlier asyncio.run (other tests) leaves unset.
  loop = asyncio.new_event_loop()
  asyncio.set_event_loop(loop)
  try:
    exec(compile(code, "README.md", "exec"), namespace)  # pylint: disable=exec-used
  finally:
    asyncio.set_event_loop(None)
    loop.close()
  assert namespace["writer"].dim == 20 * 10 + 10
  printed = capsys.readouterr().out
  assert "analytical ε (one participation)" in printed and "audit" in printed
  assert "noise self-test: passed" in printed  # the loop ran it
  for run in ("runs/mine", "runs/program"):
    rd = run_dir.RunDir(tmp_path / run)
    table = rd.load_table()
    assert len(table) == 12 and table.dim == 210
    # Orthogonal canaries: scored in the round, nothing recorded.
    assert not rd.exists(run_dir.AGGREGATES) and rd.exists(run_dir.REPORT_JSON)
    assert table.orthogonal and table.has_max_cosines
    assert len(rd.load_ledger()) == 3
    assert rd.exists(run_dir.NOISE_CHECK)  # both blocks run the self-test
  trained_locally = namespace["state"]
  multi_worker = guide_block("scaling.md", "multi_worker.local_workers")
  exec(compile(multi_worker, "scaling.md", "exec"), namespace)  # pylint: disable=exec-used
  # The multi-worker block trained a new state (the model starts at zero) on
  # workers that are stopped and reaped once its `with` block ends.
  assert namespace["state"] is not trained_locally
  weights = namespace["process"].get_model_weights(namespace["state"])
  assert np.any(np.asarray(weights.trainable[0]) != 0)
  for worker in namespace["workers"]:
    assert worker.process.returncode is not None, worker.pid
    assert not os.path.exists(f"/proc/{worker.pid}"), worker.pid


def test_readme_canary_clients_block_runs(capsys):
  from tff_canary.stats.canaries import canary_config  # pylint: disable=g-import-not-at-top
  from tff_canary.stats.canaries import schedules  # pylint: disable=g-import-not-at-top

  code = guide_block("insertion-modes.md", "build_canary_client_fedavg")
  assert "clients_per_round=100" in code
  code = code.replace("clients_per_round=100", "clients_per_round=4")
  config = canary_config.CanaryConfig(
      seed=3, num_inserted=4, num_held_out=2,
      schedule=schedules.FixedPresentations(2, 1), assignment="fixed",
      directions="gaussian")  # the guide's block: the paper's construction
  namespace = dict(_toy_loop(), np=np, config=config, num_rounds=2)
  exec(compile(code, "insertion-modes.md", "exec"), namespace)  # pylint: disable=exec-used
  outcomes = namespace["outcomes"]
  assert namespace["dim"] == 20 * 10 + 10
  # Every scheduled (round, inserted canary) once, each through
  # dp_aggregator's zeroing stage, the only stage its measurements name.
  assert sorted((o.round_num, o.canary_id) for o in outcomes) == sorted(
      map(tuple, config.participation.events.tolist()))
  assert all([s.kind for s in o.stages] == ["zeroing"] for o in outcomes)
  printed = capsys.readouterr().out
  assert printed.count("ZEROED") == sum(o.zeroed for o in outcomes)


def _commands(lines):
  return [line.strip() for line in lines
          if line.strip() and not line.lstrip().startswith("#")]


def test_ci_runs_the_readme_commands():
  # .ci/run is the README's set-up command, then its test command under a
  # timeout (which changes nothing but the time limit), and nothing else.
  text = open(README, encoding="utf-8").read()
  section = text.split("\n## Set up and test\n", 1)[1].split("\n## ", 1)[0]
  readme = re.findall(r"^    (\S.*)$", section, flags=re.M)
  assert len(readme) == 2, readme
  ci = _commands(open(os.path.join(ROOT, ".ci", "run"),
                      encoding="utf-8").read().splitlines())
  assert ci[:2] == ["set -euo pipefail", 'cd "$(dirname "$0")/.."'], ci
  assert [re.sub(r"^timeout( --\S+)* \d+ ", "", c) for c in ci[2:]] == readme
