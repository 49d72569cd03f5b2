"""What orthogonal canaries cost a round: `bench/round_overhead.py --directions orthogonal`.

The EMNIST character CNN (1,206,590 parameters) on synthetic data, as in
`round_overhead.py`, three learning processes side by side in ONE process:

  plain:  tff.aggregators.DifferentiallyPrivateFactory.gaussian_fixed
  2000:   CanaryDPFactory.gaussian_fixed with 1000 inserted + 1000 held-out
          orthogonal canaries, ShuffledEpochs(500, 500) (each inserted
          canary once in a 500-round run: about 2 a round)
  20000:  the same with 10000 + 10000 (about 20 a round)

Orthogonal canaries are inserted by one inverse transform and every canary is
scored by one forward transform of the round's aggregate, inside the round
(`tff_canary.federated.insertion.round_scores`): nothing is recorded, nothing
runs in the background, nothing is left to do after training but one
transform of the final model. So the per-round ratio is the whole cost.

Rounds are taken in triples (plain, 2000, 20000), the order rotating each
triple, so machine noise hits all three alike; the ratio of each canary
round to the plain round of its triple, with its paired standard error.
Peak RSS (this process and TFF's worker_binary, sampled every 20 ms) during
plain-only warm-up rounds and during the triples. Unit cost of the
transforms at d = 1,206,590 and d = 4,050,748 and the projection for the
paper's StackOverflow setting (2048 rounds).

Last line: `orthogonal canaries, per-round ratio: A at 2000, B at 20000`.
"""

from __future__ import annotations

import time

import numpy as np
import tensorflow as tf

from tff_canary.federated.insertion import factory
from tff_canary.federated.insertion import orthogonal_transform
from tff_canary.federated.runtime import worker_guard
from tff_canary.stats.canaries import canary_config
from tff_canary.stats.canaries import schedules
import tensorflow_federated as tff  # pylint: disable=g-bad-import-order

import round_overhead as ro  # pylint: disable=g-bad-import-order

SIZES = (2000, 20000)


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


def _config(total: int, seed: int) -> canary_config.CanaryConfig:
  return canary_config.CanaryConfig(
      seed=seed, num_inserted=total // 2, num_held_out=total // 2,
      schedule=schedules.ShuffledEpochs(500, 500), assignment="fixed",
      directions="orthogonal")


def run(args) -> int:
  """The benchmark (module docstring); `args` from round_overhead's parser."""
  seed = 2024
  sampler = ro.MemorySampler().start()
  began = time.perf_counter()
  sizes = SIZES if not args.quick else (200, 2000)
  try:
    clients = ro.synthetic_clients(args.clients_per_round, args.examples,
                                   args.batch)
    plain = ro.build(tff.aggregators.DifferentiallyPrivateFactory
                     .gaussian_fixed(args.noise_multiplier,
                                     args.clients_per_round, args.clip))
    processes = {"plain": plain}
    for size in sizes:
      processes[str(size)] = ro.build(
          factory.CanaryDPFactory.gaussian_fixed(
              noise_multiplier=args.noise_multiplier,
              clients_per_round=args.clients_per_round, clip=args.clip,
              canaries=_config(size, seed)))
    states = {name: p.initialize() for name, p in processes.items()}
    dim = sum(int(np.size(w)) for w in
              plain.get_model_weights(states["plain"]).trainable)
    names = list(processes)

    def one_round(name):
      start = time.perf_counter()
      output = processes[name].next(states[name], clients)
      states[name] = output.state
      return time.perf_counter() - start

    sampler.phase("plain only")
    for r in range(args.warmup + 2):
      seconds = one_round("plain")
      ro.log(f"plain-only round {r + 1}: {seconds:.2f} s")
    sampler.phase(None)
    times = {name: [] for name in names}
    for r in range(args.warmup + args.rounds):
      order = names[r % 3:] + names[:r % 3]
      seconds = {}
      for name in order:
        sampler.phase("triples")
        seconds[name] = one_round(name)
        sampler.phase(None)
      timed = r >= args.warmup
      if timed:
        for name in names:
          times[name].append(seconds[name])
      inserted = {name: int(schedules_count(states[name])) for name in names[1:]}
      ro.log(f"{'timed' if timed else 'warm-up'} triple {r + 1}: " + ", ".join(
          f"{name} {seconds[name]:.2f} s" for name in names)
             + f" (canaries inserted so far: {inserted})")

    plain_t = np.asarray(times["plain"])
    ratios = {}
    ro.log("")
    for name in names[1:]:
      ratio = np.asarray(times[name]) / plain_t
      se = float(ratio.std(ddof=1) / np.sqrt(ratio.size))
      ratios[name] = (float(ratio.mean()), se)
      ro.log(f"{name} orthogonal canaries: {np.mean(times[name]):.3f} s a "
             f"round vs plain {plain_t.mean():.3f} s; per-round ratio "
             f"{ratio.mean():.3f} +- {se:.3f} (paired SE, {ratio.size} "
             "triples)")
    gib = 2**30
    base = sampler.peaks.get("plain only", 0)
    peak = sampler.peaks.get("triples", 0)
    ro.log(f"peak RSS (python + worker_binary): plain-only rounds "
           f"{base / gib:.2f} GiB, triples (three processes) {peak / gib:.2f} "
           f"GiB: +{(peak - base) / gib:.2f} GiB")
    ro.log("aggregate disk: 0 MiB (nothing recorded; scores in the state)")
    t_emnist = transform_seconds(dim)
    t_so = transform_seconds(4_050_748)
    ro.log(f"unit cost: forward + inverse transform {t_emnist * 1e3:.0f} ms at "
           f"d = {dim:,}, {t_so * 1e3:.0f} ms at d = 4,050,748")
    ro.log("projection for the paper's StackOverflow setting (d = 4,050,748, "
           "2048 rounds, any number of canaries):")
    ro.log("| design | scratch disk | RAM for the scores | CPU during training "
           "| wall time after training |")
    ro.log("|---|---|---|---|---|")
    ro.log(f"| orthogonal canaries, scored in the round | 0 | "
           f"{3 * 4 * 4_050_748 / 2**20:.0f} MiB (a few vectors) | "
           f"{2048 * t_so / 60:.0f} min (in the rounds) | "
           f"{t_so / 2:.1f} s |")
    ro.log("| gaussian canaries (docs/benchmarks.md, 2000 canaries) | "
           "0.5-30.9 GiB | 2.0-34.7 GiB | 48-542 min (a spare core) | "
           "0-25 min |")
    ro.log(f"total wall time {time.perf_counter() - began:.0f} s")
    a, b = (ratios[str(s)] for s in sizes)
    ro.log(f"orthogonal canaries, per-round ratio: {a[0]:.3f} ± {a[1]:.3f} at "
           f"{sizes[0]}, {b[0]:.3f} ± {b[1]:.3f} at {sizes[1]}")
  finally:
    sampler.stop()
    worker_guard.stop_workers()
  return 0


def schedules_count(state) -> int:
  """Canaries inserted so far, from the state's round counter and schedule."""
  node = state.aggregator
  events = np.asarray(node.schedule)
  return int(np.sum(events[:, 0] < int(node.round_num)))
