"""What canaries cost a round: DP-FedAvg rounds with and without orthogonal canaries.

The EMNIST character CNN (TFF's baseline `cnn_dropout`, 62 classes,
1,206,590 parameters) on synthetic data (28x28x1 images, 20 clients per
round, 100 examples each, batch 16), three learning processes side by side
in ONE process:

  plain:  tff.aggregators.DifferentiallyPrivateFactory.gaussian_fixed
  2000:   CanaryDPFactory.gaussian_fixed with 1000 inserted + 1000 held-out
          orthogonal canaries, ShuffledEpochs(500, 500) (each inserted
          canary once in a 500-round run: about 2 a round)
  20000:  the same with 10000 + 10000 (about 20 a round)

Orthogonal canaries (the recommended default) are inserted by one inverse
transform and every canary is scored by one forward transform of the round's
aggregate, inside the round (`tff_canary.federated.insertion.round_scores`):
nothing is recorded, nothing runs in the background, nothing is left to do
after training but one transform of the final model. So the per-round ratio
is the whole cost. (Gaussian canaries, the paper's construction, record each
round's aggregate and take one pass after training: their cost is the disk
of every round and that pass, docs/benchmarks.md.)

Rounds are taken in triples (plain, 2000, 20000), the order rotating each
triple, so machine noise hits all three alike; the ratio of each canary
round to the plain round of its triple, with its paired standard error.
Peak RSS (the Python process and TFF's worker_binary, sampled every 20 ms)
of each learning process alone, in a subprocess of its own that builds it and
runs 4 rounds (`--rss_only`): the canary processes' excess over the plain
one is what canaries cost in memory. Unit cost of the
transforms at d = 1,206,590 and d = 4,050,748 and the projection for the
paper's StackOverflow setting (2048 rounds).

Last line: `orthogonal canaries, per-round ratio: A at 2000, B at 20000`.

Usage: .venv/bin/python bench/round_overhead.py [--rounds 40] [--warmup 2]
       [--rss_rounds 4]
       [--smoke]   (--smoke: seconds, not the benchmark: a one-layer model
       instead of the CNN, 2 timed triples of 2 clients with 20 and 40
       canaries, no peak RSS (each process alone is
       a subprocess loading TensorFlow; `--rss_only 40 --smoke` runs one),
       one repeat of each transform.)
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys
import time
from typing import Any, Callable

from tff_canary.federated.runtime import quiet_start

quiet_start.quiet_tensorflow()  # before TensorFlow loads (and its subprocess)

import numpy as np  # pylint: disable=g-import-not-at-top
import tensorflow as tf  # pylint: disable=g-import-not-at-top

import peak_rss  # pylint: disable=g-import-not-at-top
import smoke_mode  # pylint: disable=g-import-not-at-top
from tff_canary.federated.insertion import factory  # pylint: disable=g-import-not-at-top
from tff_canary.federated.insertion import orthogonal_transform  # pylint: disable=g-import-not-at-top
from tff_canary.federated.runtime import worker_guard  # pylint: disable=g-import-not-at-top
from tff_canary.stats.canaries import canary_config  # pylint: disable=g-import-not-at-top
from tff_canary.stats.canaries import schedules  # pylint: disable=g-import-not-at-top
import tensorflow_federated as tff  # pylint: disable=g-import-not-at-top
from tensorflow_federated.python.simulation.baselines.emnist import emnist_models  # pylint: disable=g-import-not-at-top

SIZES = (2000, 20000)
# --smoke: 2 timed triples (a paired SE needs two), 2 clients of 4 examples,
# 1 round of each process alone, and few canaries.
SMOKE = dict(rounds=2, warmup=0, clients_per_round=2, examples=4, batch=4,
             rss_rounds=1)
SMOKE_SIZES = (20, 40)


def log(message: str) -> None:
  print(message, flush=True)


# ---------------------------------------------------------------- memory


def memory_sampler() -> peak_rss.PeakSampler:
  """The peak RSS of this process + TFF's workers (every 20 ms)."""
  return peak_rss.PeakSampler(
      lambda: [os.getpid(), *worker_guard.live_workers()])


# ---------------------------------------------------------------- setup


# --smoke replaces the CNN by one dense layer (d = 48,670): the same code
# path (processes, canaries, triples, ratios), built and run in seconds.
SMALL_MODEL = False


def model_fn():
  if SMALL_MODEL:
    keras_model = tf.keras.Sequential([
        tf.keras.layers.Flatten(input_shape=(28, 28, 1)),
        tf.keras.layers.Dense(62, activation="softmax")])
  else:
    keras_model = emnist_models.create_conv_dropout_model(only_digits=False,
                                                          debug_seed=1)
  return tff.learning.models.from_keras_model(
      keras_model,
      loss=tf.keras.losses.SparseCategoricalCrossentropy(),
      input_spec=(tf.TensorSpec([None, 28, 28, 1], tf.float32),
                  tf.TensorSpec([None], tf.int32)),
      metrics=[tf.keras.metrics.SparseCategoricalAccuracy()])


def synthetic_clients(num_clients: int, examples: int, batch: int):
  rng = np.random.default_rng(0)
  clients = []
  for _ in range(num_clients):
    x = rng.random((examples, 28, 28, 1), dtype=np.float32)
    y = rng.integers(0, 62, examples).astype(np.int32)
    clients.append(tf.data.Dataset.from_tensor_slices((x, y)).batch(batch))
  return clients


def build(aggregator):
  return tff.learning.algorithms.build_unweighted_fed_avg(
      model_fn,
      client_optimizer_fn=tff.learning.optimizers.build_sgdm(0.02),
      server_optimizer_fn=tff.learning.optimizers.build_sgdm(1.0),
      model_aggregator=aggregator)


def transform_seconds(dim: int, repeats: int = 7) -> float:
  """Median seconds of one forward plus one inverse transform at `dim`."""
  forward = tf.function(lambda v: orthogonal_transform.forward(7, v, dim))
  inverse = tf.function(lambda v: orthogonal_transform.inverse(7, v, dim))
  v = tf.random.stateless_normal([dim], seed=[1, 2])
  inverse(forward(v)).numpy()
  times = []
  for _ in range(repeats):
    start = time.perf_counter()
    inverse(forward(v)).numpy()
    times.append(time.perf_counter() - start)
  return float(np.median(times))


@dataclasses.dataclass(frozen=True)
class Aggregators:
  """A mechanism's two aggregators: TFF's own (plain) and with canaries.

  `plain(args, specs)` and `canaries(args, specs, total, seed)` build them
  for the model's trainable `specs`; `name` prefixes the last line (empty
  for DP-FedAvg's); `script` is the bench whose `--rss_only` builds them
  alone. A mechanism other than DP-FedAvg's also measures DP-FedAvg's plain
  aggregator alone, the memory reference (`reference`).
  """

  name: str
  plain: Callable[[argparse.Namespace, Any], Any]
  canaries: Callable[[argparse.Namespace, Any, int, int], Any]
  script: str


def canary_config_of(total: int, seed: int) -> canary_config.CanaryConfig:
  return canary_config.CanaryConfig(
      seed=seed, num_inserted=total // 2, num_held_out=total // 2,
      schedule=schedules.ShuffledEpochs(500, 500), assignment="fixed",
      directions="orthogonal")


GAUSSIAN = Aggregators(
    name="",
    plain=lambda args, specs: tff.aggregators.DifferentiallyPrivateFactory.
    gaussian_fixed(args.noise_multiplier, args.clients_per_round, args.clip),
    canaries=lambda args, specs, total, seed: factory.CanaryDPFactory.
    gaussian_fixed(noise_multiplier=args.noise_multiplier,
                   clients_per_round=args.clients_per_round, clip=args.clip,
                   canaries=canary_config_of(total, seed)),
    script=os.path.abspath(__file__))


def trainable_specs():
  """The model's trainable weights as tf.TensorSpecs."""
  weights = tff.learning.models.weights_type_from_model(model_fn)
  return tff.types.type_to_tf_tensor_specs(weights.trainable)


def inserted_so_far(state) -> int:
  """Canaries inserted so far, from the state's round counter and schedule."""
  node = state.aggregator
  events = np.asarray(node.schedule)
  return int(np.sum(events[:, 0] < int(node.round_num)))


# ---------------------------------------------------------------- main


def rss_only(args, kit: Aggregators = GAUSSIAN) -> int:
  """Builds one learning process (`args.rss_only`), runs it, prints its peak.

  The last line is `peak RSS bytes: N` (python + worker_binary, sampled
  from before the process is built to after its last round).
  """
  sampler = memory_sampler().start()
  sampler.phase("alone")
  try:
    clients = synthetic_clients(args.clients_per_round, args.examples,
                                args.batch)
    specs = trainable_specs()
    if args.rss_only == "reference":
      aggregator = GAUSSIAN.plain(args, specs)
    elif args.rss_only == "plain":
      aggregator = kit.plain(args, specs)
    else:
      aggregator = kit.canaries(args, specs, int(args.rss_only), 2024)
    process = build(aggregator)
    state = process.initialize()
    for _ in range(args.rss_rounds):
      state = process.next(state, clients).state
  finally:
    sampler.stop()
    worker_guard.stop_workers()
  peak_rss.print_peak(sampler.peaks["alone"])
  return 0


def _rss_alone(name: str, args, kit: Aggregators) -> int:
  """Peak RSS of learning process `name` alone, from a subprocess."""
  return peak_rss.alone(kit.script, name, args,
                        ("clients_per_round", "examples", "batch"))


def run(args, kit: Aggregators = GAUSSIAN) -> int:
  """The benchmark (module docstring)."""
  seed = 2024
  began = time.perf_counter()
  sizes = SIZES if not args.smoke else SMOKE_SIZES
  try:
    log(f"TF {tf.__version__}, TFF {tff.__version__}, {os.cpu_count()} CPUs")
    clients = synthetic_clients(args.clients_per_round, args.examples,
                                args.batch)
    specs = trainable_specs()
    plain = build(kit.plain(args, specs))
    processes = {"plain": plain}
    for size in sizes:
      processes[str(size)] = build(kit.canaries(args, specs, size, seed))
    states = {name: p.initialize() for name, p in processes.items()}
    dim = sum(int(np.size(w)) for w in
              plain.get_model_weights(states["plain"]).trainable)
    names = list(processes)

    def one_round(name):
      start = time.perf_counter()
      output = processes[name].next(states[name], clients)
      states[name] = output.state
      return time.perf_counter() - start

    for r in range(args.warmup + 2):
      seconds = one_round("plain")
      log(f"plain-only round {r + 1}: {seconds:.2f} s")
    times = {name: [] for name in names}
    for r in range(args.warmup + args.rounds):
      order = names[r % 3:] + names[:r % 3]
      seconds = {}
      for name in order:
        seconds[name] = one_round(name)
      timed = r >= args.warmup
      if timed:
        for name in names:
          times[name].append(seconds[name])
      inserted = {name: inserted_so_far(states[name]) for name in names[1:]}
      log(f"{'timed' if timed else 'warm-up'} triple {r + 1}: " + ", ".join(
          f"{name} {seconds[name]:.2f} s" for name in names)
          + f" (canaries inserted so far: {inserted})")

    plain_t = np.asarray(times["plain"])
    ratios = {}
    log("")
    for name in names[1:]:
      ratio = np.asarray(times[name]) / plain_t
      se = float(ratio.std(ddof=1) / np.sqrt(ratio.size))
      ratios[name] = (float(ratio.mean()), se)
      log(f"{name} orthogonal canaries: {np.mean(times[name]):.3f} s a "
          f"round vs plain {plain_t.mean():.3f} s; per-round ratio "
          f"{ratio.mean():.3f} +- {se:.3f} (paired SE, {ratio.size} "
          "triples)")
    gib = 2**30
    if args.smoke:  # each subprocess loads TensorFlow and builds its process
      log("peak RSS: not measured with --smoke")
    else:
      alone = {name: _rss_alone(name, args, kit) for name in names}
      log(f"peak RSS, each process alone (python + worker_binary, "
          f"{args.rss_rounds} rounds): plain {alone['plain'] / gib:.2f} GiB, "
          + ", ".join(f"{name} canaries {alone[name] / gib:.2f} GiB "
                      f"({(alone[name] - alone['plain']) / gib:+.2f} GiB)"
                      for name in names[1:]))
      if kit is not GAUSSIAN:
        reference = _rss_alone("reference", args, kit)
        log(f"peak RSS of plain DP-FedAvg alone (the reference): "
            f"{reference / gib:.2f} GiB; the canary processes' excess over "
            "it: " + ", ".join(
                f"{name} {(alone[name] - reference) / gib:+.2f} GiB"
                for name in names[1:]))
    log("aggregate disk: 0 MiB (nothing recorded; scores in the state)")
    repeats = 1 if args.smoke else 7
    t_emnist = transform_seconds(dim, repeats)
    t_so = transform_seconds(4_050_748, repeats)
    log(f"unit cost: forward + inverse transform {t_emnist * 1e3:.0f} ms at "
        f"d = {dim:,}, {t_so * 1e3:.0f} ms at d = 4,050,748")
    log("projection for the paper's StackOverflow setting (d = 4,050,748, "
        "2048 rounds, any number of canaries):")
    log("| design | scratch disk | RAM for the scores | CPU during training "
        "| wall time after training |")
    log("|---|---|---|---|---|")
    log(f"| orthogonal canaries, scored in the round | 0 | "
        f"{3 * 4 * 4_050_748 / 2**20:.0f} MiB (a few vectors) | "
        f"{2048 * t_so / 60:.0f} min (in the rounds) | {t_so / 2:.1f} s |")
    log("| gaussian canaries, every round recorded and one pass after "
        "training (docs/benchmarks.md, 2000 canaries) | 30.9 GiB | 2.0 GiB "
        "| 0 | 25 min |")
    log(f"total wall time {time.perf_counter() - began:.0f} s")
    a, b = (ratios[str(s)] for s in sizes)
    log(f"{kit.name}orthogonal canaries, per-round ratio: {a[0]:.3f} ± "
        f"{a[1]:.3f} at "
        f"{sizes[0]}, {b[0]:.3f} ± {b[1]:.3f} at {sizes[1]}")
  finally:
    worker_guard.stop_workers()
  return 0


def main(argv=None, kit: Aggregators = GAUSSIAN) -> int:
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("--rounds", type=int, default=40,
                      help="timed triples of rounds")
  parser.add_argument("--warmup", type=int, default=2,
                      help="untimed first triples")
  parser.add_argument("--clients_per_round", type=int, default=20)
  parser.add_argument("--examples", type=int, default=100)
  parser.add_argument("--batch", type=int, default=16)
  parser.add_argument("--noise_multiplier", type=float, default=1.0)
  parser.add_argument("--clip", type=float, default=0.1)
  peak_rss.add_flags(parser, "process",
                     "plain, reference or a number of canaries")
  args = smoke_mode.parse_args(
      parser, argv, SMOKE,
      "a one-layer model, the sizes of SMOKE, 20 and 40 canaries, no "
      "RSS subprocess (module docstring)")
  if args.smoke:
    global SMALL_MODEL
    SMALL_MODEL = True
  if args.rss_only is not None:
    return rss_only(args, kit)
  return run(args, kit)


if __name__ == "__main__":
  sys.exit(main())
