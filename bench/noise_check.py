"""Does the noise self-test catch noise bugs, and how often does it cry wolf?

  .venv/bin/python bench/noise_check.py [--trials 300] [--detect_trials 30]
      [--numpy_trials 1000] [--rounds 4] [--skip_emnist] [--smoke]

`tff_canary.federated.audit.noise_check.check_aggregation_noise` (4 rounds by default, level
0.001) on:

  * false alarms, TFF: `tff.aggregators.DifferentiallyPrivateFactory.
    gaussian_fixed` and `gaussian_adaptive` on a small model-like structure
    (`SMALL_SHAPES`), `--trials` runs each. TFF's noise is unseeded, so every
    run draws fresh noise (the runs are not reproducible; the rates are).
  * detection, TFF: TFF's factory around the planted tensorflow_privacy
    queries of `tests/planted_noise.py` (prefix reuse, std / 10, the same
    noise every round) on the MLP shapes w1 [784, 128], b1 [128], w2 [128, 5],
    b2 [5]; `--detect_trials` runs each, trial i seeded by i (the process is
    rebuilt per trial, since the seed is a graph constant).
  * the TF-free statistics on NumPy-simulated noise, trial i seeded by
    (seed, i): correct noise on `SMALL_SHAPES` (false alarm, `--numpy_trials`
    trials) and, on the MLP shapes, planted patterns (prefix reuse of the
    5-element tensor alone; a 2-value slice reused at a nonzero offset;
    `--numpy_trials / 20` trials each).

Each row: rejections / trials, the rate and its binomial standard error
sqrt(p (1 - p) / n) (0 when p is 0 or 1: then read the trial count). Then the
wall time of one check of TFF's adaptive factory at the EMNIST CNN's
d = 1,206,590, `--rounds` rounds. The last line is
`noise check: worst detection D, worst false alarm F` over every row.
"""

from __future__ import annotations

import argparse
import math
import os
import sys
import time

import numpy as np

import smoke_mode
from tff_canary.federated.runtime import quiet_start

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))), "tests"))

SMALL_SHAPES = ((256, 64), (64,), (64, 10), (10,))
MLP_NAMES = ("w1", "b1", "w2", "b2")


def _row(name, kind, rejections, trials, seconds):
  rate = rejections / trials
  se = math.sqrt(rate * (1 - rate) / trials)
  print(f"{name:44s} {kind:12s} {rejections:5d}/{trials:<5d} {rate:7.4f} "
        f"± {se:.4f}   ({seconds:.0f} s)", flush=True)
  return rate


def _numpy_noise(rng, shapes, stds, pattern):
  noise = [[(rng.standard_normal(int(np.prod(s))) * sd).astype(np.float32)
            for s in shapes] for sd in stds]
  for r in noise:
    if pattern == "prefix_reuse_5":
      r[3] = r[0][:5].copy()
    elif pattern == "slice_reuse_2":
      r[3][:2] = r[0][3001:3003]
  return noise


def numpy_rows(trials, rounds, seed):
  from tff_canary.stats.noise import noise_stats  # pylint: disable=g-import-not-at-top
  from planted_noise import MLP_SHAPES  # pylint: disable=g-import-not-at-top
  out = []
  stds = [0.01 * (1 + 0.05 * t) for t in range(rounds)]
  for pattern, kind, n, shapes, label in (
      ("correct", "false alarm", trials, SMALL_SHAPES, "small"),
      ("prefix_reuse_5", "detection", max(1, trials // 20), MLP_SHAPES, "MLP"),
      ("slice_reuse_2", "detection", max(1, trials // 20), MLP_SHAPES, "MLP")):
    start, rejections = time.perf_counter(), 0
    for i in range(n):
      rng = np.random.default_rng([seed, i])
      result = noise_stats.check_noise(
          _numpy_noise(rng, shapes, stds, pattern), stds, seed=i,
          tensor_names=MLP_NAMES)
      rejections += not result.passed
    out.append((kind, _row(f"numpy {label} noise: {pattern}", kind,
                           rejections, n, time.perf_counter() - start)))
  return out


def tff_rows(trials, detect_trials, rounds):
  import tensorflow_federated as tff  # pylint: disable=g-import-not-at-top
  import planted_noise  # pylint: disable=g-import-not-at-top
  from tff_canary.federated.audit import noise_check  # pylint: disable=g-import-not-at-top
  out = []
  dp = tff.aggregators.DifferentiallyPrivateFactory
  small = planted_noise.value_type(SMALL_SHAPES)
  for name, aggregator in (
      ("TFF gaussian_fixed (z=1, 10 clients)", dp.gaussian_fixed(1.0, 10.0, 0.5)),
      ("TFF gaussian_adaptive (z=1, 100 clients)",
       dp.gaussian_adaptive(1.0, 100.0))):
    process = aggregator.create(small)
    start, rejections = time.perf_counter(), 0
    for _ in range(trials):
      result = noise_check.check_aggregation_noise(process, num_rounds=rounds)
      rejections += not result.passed
    out.append(("false alarm", _row(name, "false alarm", rejections, trials,
                                    time.perf_counter() - start)))
  mlp = planted_noise.value_type()
  for kind in planted_noise.BUGS:
    start, rejections = time.perf_counter(), 0
    for i in range(detect_trials):
      result = noise_check.check_aggregation_noise(
          planted_noise.planted_factory(kind, seed=i), mlp, num_rounds=rounds,
          tensor_names=MLP_NAMES)
      rejections += not result.passed
    out.append(("detection", _row(f"planted {kind} (MLP, TFF)", "detection",
                                  rejections, detect_trials,
                                  time.perf_counter() - start)))
  return out


def emnist_time(rounds):
  import tensorflow_federated as tff  # pylint: disable=g-import-not-at-top
  import planted_noise  # pylint: disable=g-import-not-at-top
  from tff_canary.federated.audit import noise_check  # pylint: disable=g-import-not-at-top
  from tff_canary.harness.data import tasks
  shapes = [tuple(w.shape) for w in tasks.emnist_cnn().trainable_weights]
  value_type = planted_noise.value_type(shapes)
  aggregator = tff.aggregators.DifferentiallyPrivateFactory.gaussian_adaptive(
      0.1, 50.0)
  start = time.perf_counter()
  result = noise_check.check_aggregation_noise(aggregator, value_type,
                                               num_rounds=rounds)
  seconds = time.perf_counter() - start
  print(f"one check, TFF gaussian_adaptive, EMNIST CNN d={result.dim}, "
        f"{rounds} rounds: {seconds:.1f} s wall (create + run + statistics); "
        f"{result}", flush=True)


# --smoke: every row once (the NumPy detection rows need trials >= 20).
SMOKE = dict(trials=1, detect_trials=1, numpy_trials=20, skip_emnist=True)


def main(argv=None):
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("--trials", type=int, default=300,
                      help="false-alarm runs per TFF factory")
  parser.add_argument("--detect_trials", type=int, default=30,
                      help="runs per planted TFF bug")
  parser.add_argument("--numpy_trials", type=int, default=1000,
                      help="NumPy-simulated correct-noise trials")
  parser.add_argument("--rounds", type=int, default=4)
  parser.add_argument("--seed", type=int, default=0)
  parser.add_argument("--skip_emnist", action="store_true")
  args = smoke_mode.parse_args(
      parser, argv, SMOKE,
      "one TFF run per row, 20 NumPy trials, no EMNIST timing")
  quiet_start.quiet_tensorflow()  # before TensorFlow loads, below
  start = time.perf_counter()
  print(f"{'process':44s} {'kind':12s} {'rejected':>11s} {'rate':>7s} "
        "± SE", flush=True)
  rows = numpy_rows(args.numpy_trials, args.rounds, args.seed)
  rows += tff_rows(args.trials, args.detect_trials, args.rounds)
  if not args.skip_emnist:
    emnist_time(args.rounds)
  print(f"total {time.perf_counter() - start:.0f} s")
  detection = min(r for k, r in rows if k == "detection")
  false_alarm = max(r for k, r in rows if k == "false alarm")
  print(f"noise check: worst detection {detection:.4f}, worst false alarm "
        f"{false_alarm:.4f}")


if __name__ == "__main__":
  main()
