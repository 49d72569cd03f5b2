"""What canary clients cost per round, against the same run without them.

A small synthetic task in ONE process: a 784-128-10 MLP (101,770
parameters) on Gaussian-class synthetic data, 20 real clients per round, 50
examples each, batch 16, TFF's `DifferentiallyPrivateFactory.gaussian_fixed`
(noise multiplier 1, clip 1, clients_per_round 20) in all three arms:

  plain:   tff.learning.algorithms.build_unweighted_fed_avg on the raw data
  wrapped: canary_clients.build_canary_client_fedavg, the same clients
           wrapped, no canary clients (the wrapper's own cost: reading the
           id sequence, the replacement computation)
  canary:  the same process with --canaries canary clients per round
           (default 2, the paper-scale rate of bench/round_overhead.py)

Every arm gets new dataset objects each round (built untimed), as a loop
that samples clients per round does; TFF serializes them inside the timed
`next`. Rounds alternate plain, wrapped, canary (the order rotates each
cycle) after --warmup untimed rounds of each, so host drift hits all three
alike. Printed: mean seconds per round of each arm, the ratios wrapped/plain
and canary/plain with a standard error from the paired per-cycle
differences, SE = sd(arm_r - plain_r) / sqrt(n) / mean(plain), and the
extra milliseconds per real client (wrapper) and per canary client.

Usage: PYTHONPATH=. .venv/bin/python bench/client_mode_cost.py [--rounds 20]
       [--warmup 2] [--canaries 2] [--clients 20] [--smoke]
"""

from __future__ import annotations

import argparse
import time

from tff_canary.federated.runtime import quiet_start

quiet_start.quiet_tensorflow()  # before TensorFlow loads

import numpy as np  # pylint: disable=g-import-not-at-top
import tensorflow as tf  # pylint: disable=g-import-not-at-top

import smoke_mode  # pylint: disable=g-import-not-at-top
from tff_canary.federated.insertion import canary_clients  # pylint: disable=g-import-not-at-top
import tensorflow_federated as tff  # pylint: disable=g-import-not-at-top

FEATURES, HIDDEN, CLASSES = 784, 128, 10


def model_fn():
  keras_model = tf.keras.Sequential([
      tf.keras.layers.InputLayer(input_shape=(FEATURES,)),
      tf.keras.layers.Dense(HIDDEN, activation="relu"),
      tf.keras.layers.Dense(CLASSES),
  ])
  return tff.learning.models.from_keras_model(
      keras_model,
      loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True),
      input_spec=(tf.TensorSpec([None, FEATURES], tf.float32),
                  tf.TensorSpec([None], tf.int32)))


def synthetic_arrays(num_clients: int, examples: int):
  rng = np.random.default_rng(0)
  means = rng.normal(size=(CLASSES, FEATURES)).astype(np.float32)
  arrays = []
  for _ in range(num_clients):
    y = rng.integers(0, CLASSES, examples).astype(np.int32)
    x = means[y] + rng.normal(size=(examples, FEATURES)).astype(np.float32)
    arrays.append((x, y))
  return arrays


def fresh_datasets(arrays, batch: int):
  """New dataset objects, as a loop that samples its clients each round has."""
  return [tf.data.Dataset.from_tensor_slices(a).batch(batch) for a in arrays]


def aggregator(clients_per_round: int):
  return tff.aggregators.DifferentiallyPrivateFactory.gaussian_fixed(
      noise_multiplier=1.0, clients_per_round=clients_per_round, clip=1.0)


def paired_se(arm: list[float], plain: list[float]) -> float:
  diff = np.asarray(arm) - np.asarray(plain)
  if diff.size < 2:
    return float("nan")
  return float(diff.std(ddof=1) / np.sqrt(diff.size) / np.mean(plain))


# --smoke: the fewest rounds with a paired SE (2), the smallest clients.
SMOKE = dict(rounds=2, warmup=0, canaries=1, clients=2, examples=4, batch=4)


def main(argv=None) -> int:
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("--rounds", type=int, default=20,
                      help="timed rounds of each arm")
  parser.add_argument("--warmup", type=int, default=2,
                      help="untimed first rounds of each arm")
  parser.add_argument("--canaries", type=int, default=2,
                      help="canary clients per round in the canary arm")
  parser.add_argument("--clients", type=int, default=20,
                      help="real clients per round")
  parser.add_argument("--examples", type=int, default=50)
  parser.add_argument("--batch", type=int, default=16)
  args = smoke_mode.parse_args(
      parser, argv, SMOKE,
      "2 timed rounds, no warm-up, 2 clients of 4 examples, 1 canary "
      "client")
  if args.rounds < 2 or args.warmup < 0 or args.canaries < 1:
    parser.error("--rounds >= 2, --warmup >= 0 and --canaries >= 1")

  arrays = synthetic_arrays(args.clients, args.examples)
  optimizer = tff.learning.optimizers.build_sgdm(0.05)
  start = time.perf_counter()
  plain = tff.learning.algorithms.build_unweighted_fed_avg(
      model_fn, optimizer, model_aggregator=aggregator(args.clients))
  built_plain = time.perf_counter() - start
  start = time.perf_counter()
  wrapped = canary_clients.build_canary_client_fedavg(
      model_fn, optimizer, model_aggregator=aggregator(args.clients),
      canary_seed=1)
  built_wrapped = time.perf_counter() - start
  print(f"build seconds: plain {built_plain:.1f}, canary-client process "
        f"{built_wrapped:.1f}", flush=True)

  next_id = [0]

  def canary_data():
    ids = list(range(next_id[0], next_id[0] + args.canaries))
    next_id[0] += args.canaries
    return canary_clients.with_canary_clients(
        fresh_datasets(arrays, args.batch), ids)

  arms = {
      "plain": (plain, lambda: fresh_datasets(arrays, args.batch)),
      "wrapped": (wrapped, lambda: canary_clients.with_canary_clients(
          fresh_datasets(arrays, args.batch), [])),
      "canary": (wrapped, canary_data),
  }
  states = {name: process.initialize() for name, (process, _) in arms.items()}
  times: dict[str, list[float]] = {name: [] for name in arms}
  names = list(arms)
  for cycle in range(args.warmup + args.rounds):
    shift = cycle % len(names)
    for name in names[shift:] + names[:shift]:
      process, data = arms[name]
      round_data = data()
      start = time.perf_counter()
      output = process.next(states[name], round_data)
      elapsed = time.perf_counter() - start
      states[name] = output.state
      if cycle >= args.warmup:
        times[name].append(elapsed)
  plain_mean = float(np.mean(times["plain"]))
  print(f"{args.rounds} timed rounds per arm, {args.clients} real clients, "
        f"{args.canaries} canary clients per round in 'canary'")
  for name in names:
    print(f"  {name:8s} {np.mean(times[name]):.3f} s/round")
  for name in ("wrapped", "canary"):
    ratio = float(np.mean(times[name])) / plain_mean
    print(f"  {name}/plain = {ratio:.3f} +- "
          f"{paired_se(times[name], times['plain']):.3f} (paired SE)")
  wrapped_mean = float(np.mean(times["wrapped"]))
  per_client = 1e3 * (wrapped_mean - plain_mean) / args.clients
  per_canary = 1e3 * (np.mean(times["canary"]) - wrapped_mean) / args.canaries
  print(f"  extra per real client (the wrapper): {per_client:.1f} ms; per "
        f"canary client: {per_canary:.1f} ms")
  return 0


if __name__ == "__main__":
  raise SystemExit(main())
