"""What server-side canaries cost a Flower round: DP-FedAvg with and without them.

  .nox/flower/bin/python bench/flower_overhead.py [--rounds 30] [--warmup 2]
      [--clients_per_round 50] [--examples 32] [--batch 16]
      [--canaries 2000] [--rss_rounds 4] [--smoke]

Flower's environment (requirements/lock-flower.txt, flwr 1.42). The cost
half of issue 36's Flower targets, measured as bench/round_overhead.py
measures the TFF half: two strategies side by side in ONE process,

  plain:     experiments/flower_app's DP strategy (`server_app.dp_strategy`:
             DifferentialPrivacyServerSideFixedClipping(FedAvg(...)),
             the app's z = 0.1, C = 0.1, n = clients_per_round)
  canaries:  the same strategy (a second object, the same settings) wrapped
             in `tff_canary.mechanisms.gaussian.flower.ServerSideCanaries`
             with `--canaries` orthogonal candidates (CanaryConfig's
             defaults: coin assignment, orthogonal directions; half of them
             inserted in expectation), ShuffledEpochs over the bench's
             rounds as the app schedules its run (each inserted canary
             enters once: about canaries / 2 / rounds a round)

on the app's model, the EMNIST CNN of experiments/flower_app/
tff_canary_emnist/task.py (d = 1,206,590, JAX on CPU).

A round is what `Strategy.start` does in one round, called step by step so
that the two strategies' rounds can alternate: `configure_train` (FedAvg
samples all `clients_per_round` nodes), the Grid's `send_and_receive`,
`aggregate_train` (Flower's clip, FedAvg's mean and Flower's noise from
np.random; with canaries also their insertion and every canary's score,
one inverse and one forward Walsh-Hadamard transform at d), and the
evaluation steps (`fraction_evaluate` = 0, as in the app: no message).
The Grid is bench/flower_audit.py's in-process `AppGrid` (no Ray, no
SuperLink: what is timed is the strategy and the clients, not transport),
each node answering with the app's own ClientApp (`client_app.app`):
writer `partition-id`'s synthetic EMNIST (`--examples` examples, drawn in
the round as the app does), local SGD at the app's learning rate, batches
of `--batch`, one epoch. The defaults are the app's (50 clients a round of
32 examples, batch 16): a round of about 5 s here.

Rounds are taken in pairs, the order alternating (plain first in even
pairs), so machine noise hits both sides alike; after one untimed
plain-only round (JAX compiles the training step) and `--warmup` untimed
pairs, the per-round ratio canaries / plain of each timed pair, its mean
and its paired standard error. The server's share (configure_train plus
aggregate_train, without the clients) is printed beside it.

Peak RSS: each side alone in a subprocess of this script (`--rss_only
plain|canaries`) that builds it and runs `--rss_rounds` rounds, VmRSS of
the process sampled every 20 ms from before the strategy is built
(bench/peak_rss.py); the canary side's excess over the plain side's is
what canaries cost in memory (target: within 0.5 GiB).

Last line: `Flower: orthogonal canaries, per-round ratio R ± SE at 2000;
peak RSS +X GiB` (target R <= 1.05). Measured (commit 4b6275c, the
defaults, nice'd, 378 s on the shared 2-core machine; docs/benchmarks.md,
"Flower"): 4.944 s a round with canaries against 4.680 s plain, the
server's share 632 ms against 425 ms (+207 ms), peak RSS 0.85 GiB against
0.86 GiB: `Flower: orthogonal canaries, per-round ratio 1.063 ± 0.025 at
2000; peak RSS -0.00 GiB` (the ratio target not shown met: 1.05 is within
one SE).
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
import time

import numpy as np
from flwr.app import ConfigRecord

import flower_audit
import peak_rss
import smoke_mode
from tff_canary.mechanisms.gaussian import flower
from tff_canary.stats import validation
from tff_canary.stats.canaries import canary_config
from tff_canary.stats.canaries import schedules

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))), "experiments", "flower_app"))
from tff_canary_emnist import client_app  # noqa: E402  pylint: disable=g-import-not-at-top
from tff_canary_emnist import server_app  # noqa: E402  pylint: disable=g-import-not-at-top
from tff_canary_emnist import task  # noqa: E402  pylint: disable=g-import-not-at-top

SIDES = ("plain", "canaries")
SEED = 0
# --smoke: the app's small CNN (19,838 parameters), 2 timed pairs (a paired
# SE needs two) of 2 clients of 4 examples, 20 canaries, 1 round alone.
SMOKE = dict(rounds=2, warmup=0, clients_per_round=2, examples=4, batch=4,
             canaries=20, rss_rounds=1, model_size="small")


def log(message: str) -> None:
  print(message, flush=True)


def app_settings(args) -> dict:
  """The app's settings (pyproject.toml's defaults) with the bench's sizes."""
  return server_app.settings({
      "clients-per-round": args.clients_per_round,
      "examples-per-client": args.examples, "batch-size": args.batch,
      "model-size": args.model_size, "seed": SEED})


def build(side: str, s: dict, canaries: int, num_rounds: int):
  """Side `side`'s strategy: the app's DP strategy, alone or wrapped."""
  dp = server_app.dp_strategy(s, s["clients-per-round"])
  if side == "plain":
    return dp
  config = canary_config.CanaryConfig(
      seed=SEED, num_inserted=canaries // 2,
      num_held_out=canaries - canaries // 2,
      schedule=schedules.ShuffledEpochs(num_rounds, num_rounds))
  return flower.ServerSideCanaries(dp, config)


class Side:
  """One strategy's run, a round at a time (`Strategy.start`'s loop body)."""

  def __init__(self, strategy, grid, initial, train_config):
    self.strategy, self.grid, self.arrays = strategy, grid, initial
    self.config, self.round = train_config, 0

  def next(self) -> tuple[float, float]:
    """Runs the next round; (its seconds, the server's share of them)."""
    self.round += 1
    start = time.perf_counter()
    messages = self.strategy.configure_train(self.round, self.arrays,
                                             self.config, self.grid)
    sent = time.perf_counter()
    replies = self.grid.send_and_receive(messages)
    received = time.perf_counter()
    arrays, _ = self.strategy.aggregate_train(self.round, replies)
    if arrays is not None:
      self.arrays = arrays
    aggregated = time.perf_counter()
    evaluate = self.strategy.configure_evaluate(
        self.round, self.arrays, ConfigRecord(), self.grid)
    self.strategy.aggregate_evaluate(self.round,
                                     self.grid.send_and_receive(evaluate))
    end = time.perf_counter()
    return end - start, (sent - start) + (aggregated - received)


def sides(args, names, num_rounds: int) -> dict[str, Side]:
  s = app_settings(args)
  grid = flower_audit.AppGrid(s["clients-per-round"], client_app.app)
  initial = task.to_record(task.initial_params(SEED, s["model-size"]))
  config = ConfigRecord({k: s[k] for k in server_app.CLIENT_KEYS})
  return {name: Side(build(name, s, args.canaries, num_rounds), grid,
                     initial, config) for name in names}


def rss_only(args) -> int:
  """Builds side `args.rss_only` alone, runs it, prints its peak RSS: the
  last line `peak RSS bytes: N`."""
  side = validation.as_choice(args.rss_only, "rss_only", SIDES)
  sampler = peak_rss.PeakSampler(lambda: [os.getpid()]).start()
  sampler.phase("alone")
  try:
    with flower_audit.server_identity():
      run = sides(args, [side], args.rss_rounds)[side]
      for _ in range(args.rss_rounds):
        run.next()
  finally:
    sampler.stop()
  peak_rss.print_peak(sampler.peaks["alone"])
  return 0


def run(args) -> int:
  """The benchmark (module docstring)."""
  began = time.perf_counter()
  pairs = args.warmup + args.rounds
  with flower_audit.server_identity():
    # The plain side runs one more round (JAX's compile): the canary
    # schedule covers the canary side's rounds.
    runs = sides(args, SIDES, pairs)
    dim = sum(int(np.size(a)) for a in runs["plain"].arrays.to_numpy_ndarrays())
    log(f"d = {dim:,}, {args.clients_per_round} clients a round of "
        f"{args.examples} examples (batch {args.batch}), {args.canaries} "
        f"candidate canaries, {os.cpu_count()} CPUs")
    seconds, _ = runs["plain"].next()
    log(f"plain-only round (JAX compiles): {seconds:.2f} s")
    times = {name: [] for name in SIDES}
    server = {name: [] for name in SIDES}
    for r in range(pairs):
      order = SIDES if r % 2 == 0 else SIDES[::-1]
      took = {name: runs[name].next() for name in order}
      timed = r >= args.warmup
      if timed:
        for name in SIDES:
          times[name].append(took[name][0])
          server[name].append(took[name][1])
      log(f"{'timed' if timed else 'warm-up'} pair {r + 1}: " + ", ".join(
          f"{name} {took[name][0]:.2f} s (server {took[name][1] * 1e3:.0f} "
          "ms)" for name in SIDES))
  canary = runs["canaries"].strategy
  inserted = sum(int(s.inserted_ids.size) for s in canary.rounds)
  ratio = np.asarray(times["canaries"]) / np.asarray(times["plain"])
  mean, se = float(ratio.mean()), float(ratio.std(ddof=1) / np.sqrt(ratio.size))
  log("")
  log(f"canaries: {np.mean(times['canaries']):.3f} s a round vs plain "
      f"{np.mean(times['plain']):.3f} s; per-round ratio {mean:.3f} +- "
      f"{se:.3f} (paired SE, {ratio.size} pairs); {inserted} canaries "
      f"inserted in {len(canary.rounds)} rounds")
  log(f"server's share a round (configure_train + aggregate_train): plain "
      f"{np.mean(server['plain']) * 1e3:.0f} ms, canaries "
      f"{np.mean(server['canaries']) * 1e3:.0f} ms (+"
      f"{(np.mean(server['canaries']) - np.mean(server['plain'])) * 1e3:.0f}"
      " ms)")
  gib = 2**30
  alone = {name: peak_rss.alone(
      os.path.abspath(__file__), name, args,
      ("clients_per_round", "examples", "batch", "canaries", "model_size"))
           for name in SIDES}
  excess = (alone["canaries"] - alone["plain"]) / gib
  log(f"peak RSS, each side alone ({args.rss_rounds} rounds): plain "
      f"{alone['plain'] / gib:.2f} GiB, canaries {alone['canaries'] / gib:.2f}"
      f" GiB ({excess:+.2f} GiB)")
  log(f"total wall time {time.perf_counter() - began:.0f} s")
  log(f"Flower: orthogonal canaries, per-round ratio {mean:.3f} ± {se:.3f} "
      f"at {args.canaries}; peak RSS {excess:+.2f} GiB")
  return 0


def main(argv=None) -> int:
  logging.getLogger("flwr").setLevel(logging.ERROR)  # lines per round
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("--rounds", type=int, default=30, help="timed pairs")
  parser.add_argument("--warmup", type=int, default=2,
                      help="untimed first pairs")
  parser.add_argument("--clients_per_round", type=int, default=50)
  parser.add_argument("--examples", type=int, default=32,
                      help="examples per client")
  parser.add_argument("--batch", type=int, default=16)
  parser.add_argument("--canaries", type=int, default=2000,
                      help="candidate canaries (coin-flipped)")
  parser.add_argument("--model_size", default="full",
                      help="the app's model size (full: d = 1,206,590)")
  peak_rss.add_flags(parser, "side", "plain or canaries")
  args = smoke_mode.parse_args(
      parser, argv, SMOKE, "the app's small CNN, the sizes of SMOKE "
      "(module docstring)")
  validation.as_int(args.rounds, "rounds", minimum=2)
  validation.as_int(args.warmup, "warmup", minimum=0)
  validation.as_int(args.canaries, "canaries", minimum=2)
  validation.as_int(args.rss_rounds, "rss_rounds", minimum=1)
  if args.rss_only is not None:
    return rss_only(args)
  return run(args)


if __name__ == "__main__":
  sys.exit(main())
