"""Canary DP-FedAvg on TFF's multi-worker runtime, checked against the local one.

Starts `--num_workers` TFF `worker_binary` servers on 127.0.0.1 (free ports),
runs `--num_rounds` rounds of DP-FedAvg with canaries
(`tff_canary.federated.insertion.factory.canary_dp_aggregator`: adaptive clipping,
zeroing, seeded noise so that two runs draw the same noise) on a small
softmax-regression model over them, then the same rounds from the same state
on TFF's local runtime, and prints the largest absolute difference of the
final model weights and of the recorded noised aggregates. The two runs
differ only in the order float32 sums are taken (each worker sums its own
clients), so the differences are float rounding, ~1e-7 here.

The workers are stopped (by PID) when the runs end, also on an error or
Ctrl-C (`tff_canary.federated.runtime.multi_worker.local_workers`).

Workers on other machines: start `worker_binary --port=P` there and pass
`multi_worker.mergeable_context(["host:P", ...])` instead.

Usage:
  .venv/bin/python experiments/multi_worker.py [--num_workers 2] [--smoke]
"""

from __future__ import annotations

import os
import tempfile
from typing import Any, Sequence

from tff_canary.federated.runtime import quiet_start

quiet_start.quiet_tensorflow()  # before TensorFlow loads

# pylint: disable=g-import-not-at-top,wrong-import-position
from absl import app
from absl import flags
import numpy as np
import tensorflow as tf
import tensorflow_federated as tff

from tff_canary.federated.structures import flat_layout
from tff_canary.federated.insertion import factory
from tff_canary.federated.scores import aggregate_recorder
from tff_canary.federated.runtime import multi_worker
from tff_canary.stats.canaries import canary_config
from tff_canary.stats.canaries import schedules

_FEATURES, _CLASSES = 50, 10
DIM = _FEATURES * _CLASSES + _CLASSES  # 510 trainable parameters

_FLAGS = flags.FLAGS


def define_flags() -> None:
  """Defines the script's flags (only when it runs as a script)."""
  flags.DEFINE_integer("num_workers", 2, "worker_binary processes to start.")
  flags.DEFINE_integer("num_rounds", 3, "Rounds of DP-FedAvg.")
  flags.DEFINE_integer("clients_per_round", 8, "Clients per round.")
  flags.DEFINE_float("noise_multiplier", 0.3, "Noise multiplier z.")
  flags.DEFINE_integer("seed", 0, "Seed of the data, canaries and noise.")
  flags.DEFINE_bool("smoke", False,
                    "One round unless --num_rounds or "
                    "--clients_per_round is given: checks that the command "
                    "runs.")


# --smoke: one round (8 clients: fewer make adaptive clipping refuse z = 0.3).
SMOKE = dict(num_rounds=1, clients_per_round=8)


def _model_fn() -> tff.learning.models.VariableModel:
  spec = (tf.TensorSpec([None, _FEATURES], tf.float32),
          tf.TensorSpec([None], tf.int32))
  keras_model = tf.keras.Sequential([tf.keras.layers.Dense(
      _CLASSES, input_shape=(_FEATURES,), kernel_initializer="zeros")])
  return tff.learning.models.from_keras_model(
      keras_model, input_spec=spec,
      loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True))


def client_data(num_rounds: int, clients_per_round: int, seed: int,
                examples: int = 40) -> list[list[tf.data.Dataset]]:
  """Each round's client datasets: a noisy linear labelling of Gaussians."""
  rng = np.random.default_rng(seed)
  truth = rng.normal(size=(_FEATURES, _CLASSES))
  rounds = []
  for _ in range(num_rounds):
    clients = []
    for _ in range(clients_per_round):
      x = rng.normal(size=(examples, _FEATURES)).astype(np.float32)
      y = np.argmax(x @ truth + rng.gumbel(size=(examples, _CLASSES)), axis=1)
      clients.append(tf.data.Dataset.from_tensor_slices(
          (x, y.astype(np.int32))).batch(10))
    rounds.append(clients)
  return rounds


def build_process(num_rounds: int, clients_per_round: int,
                  noise_multiplier: float, seed: int):
  """FedAvg with the canary DP aggregator and seeded noise."""
  config = canary_config.CanaryConfig(
      seed=seed, num_inserted=2, num_held_out=2,
      schedule=schedules.ShuffledEpochs(num_rounds=num_rounds,
                                        rounds_per_epoch=1),
      assignment="fixed", directions="gaussian")  # records the aggregates
  aggregator = factory.canary_dp_aggregator(
      noise_multiplier, clients_per_round, canaries=config, noise_seed=seed)
  return tff.learning.algorithms.build_unweighted_fed_avg(
      _model_fn,
      client_optimizer_fn=tff.learning.optimizers.build_sgdm(0.1),
      server_optimizer_fn=tff.learning.optimizers.build_sgdm(1.0),
      model_aggregator=aggregator)


def run_rounds(process, state, rounds: Sequence[Sequence[Any]],
               path: str) -> tuple[np.ndarray, np.ndarray]:
  """Runs the rounds from `state` in the current TFF context.

  Returns:
    The final model's flat weights and the recorded noised aggregates
    (float32 [num_rounds, DIM], written to `path` on the way).
  """
  with aggregate_recorder.AggregateRecorder(path, dim=DIM,
                               num_rounds=len(rounds)) as recorder:
    for clients in rounds:
      output = process.next(state, list(clients))
      state = output.state
      recorder.record(output.metrics)
  weights = flat_layout.flatten_numpy(process.get_model_weights(state).trainable)
  aggregates, _ = aggregate_recorder.load_aggregates(path)
  return weights, np.array(aggregates)


def cpu_seconds(pid: int) -> float:
  """CPU time (user + system) process `pid` has used so far (Linux /proc)."""
  with open(f"/proc/{pid}/stat", encoding="ascii") as f:
    fields = f.read().rsplit(")", 1)[1].split()
  return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def compare(num_workers: int = 2, num_rounds: int = 3,
            clients_per_round: int = 8, noise_multiplier: float = 0.3,
            seed: int = 0) -> dict[str, Any]:
  """The same rounds on `num_workers` workers and locally.

  Returns:
    A dict: `weights_max_abs_diff`, `aggregates_max_abs_diff`, the two runs'
    `weights` and `aggregates` (`*_workers`, `*_local`), `worker_pids`, the
    PIDs of the workers started (all stopped and reaped on return), and
    `worker_cpu_seconds`, the CPU time each worker used during the rounds.
  """
  process = build_process(num_rounds, clients_per_round, noise_multiplier,
                          seed)
  rounds = client_data(num_rounds, clients_per_round, seed)
  state = process.initialize()  # on the local runtime; both runs start here
  with tempfile.TemporaryDirectory(prefix="multi_worker-") as tmp:
    with multi_worker.local_workers(num_workers) as workers:
      context = multi_worker.mergeable_context([w.address for w in workers])
      cpu_before = [cpu_seconds(w.pid) for w in workers]
      with tff.framework.get_context_stack().install(context):
        weights_workers, aggregates_workers = run_rounds(
            process, state, rounds, os.path.join(tmp, "workers.npy"))
      worker_cpu_seconds = [cpu_seconds(w.pid) - before
                            for w, before in zip(workers, cpu_before)]
    weights_local, aggregates_local = run_rounds(
        process, state, rounds, os.path.join(tmp, "local.npy"))
  return dict(
      weights_max_abs_diff=float(np.max(np.abs(
          weights_workers - weights_local))),
      aggregates_max_abs_diff=float(np.max(np.abs(
          aggregates_workers - aggregates_local))),
      weights_workers=weights_workers, weights_local=weights_local,
      aggregates_workers=aggregates_workers,
      aggregates_local=aggregates_local,
      worker_pids=[w.pid for w in workers],
      worker_cpu_seconds=worker_cpu_seconds)


def main(argv: Sequence[str]) -> None:
  del argv
  if _FLAGS.smoke:
    for name, value in SMOKE.items():
      if not _FLAGS[name].present:
        setattr(_FLAGS, name, value)
  result = compare(_FLAGS.num_workers, _FLAGS.num_rounds,
                   _FLAGS.clients_per_round, _FLAGS.noise_multiplier,
                   _FLAGS.seed)
  cpu = ", ".join(f"{s:.2f}" for s in result["worker_cpu_seconds"])
  print(f"workers (stopped): pids {result['worker_pids']}, CPU seconds "
        f"during the rounds {cpu}")
  print(f"final weights: max |workers - local| = "
        f"{result['weights_max_abs_diff']:.3g} "
        f"(max |weight| {np.max(np.abs(result['weights_local'])):.3g})")
  print(f"noised aggregates: max |workers - local| = "
        f"{result['aggregates_max_abs_diff']:.3g} "
        f"(max |aggregate| {np.max(np.abs(result['aggregates_local'])):.3g})")


if __name__ == "__main__":
  define_flags()
  app.run(main)
