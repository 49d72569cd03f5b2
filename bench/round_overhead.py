"""What canaries cost: DP-FedAvg rounds with and without them, and the cosines.

The EMNIST character CNN (TFF's baseline `cnn_dropout`, 62 classes,
1,206,590 parameters) on synthetic data (28x28x1 images, 20 clients per
round, 100 examples each, batch 16), side by side in ONE process:

  plain:  tff.aggregators.DifferentiallyPrivateFactory.gaussian_fixed
  canary: tff_canary CanaryDPFactory.gaussian_fixed with 1000 inserted + 1000
          held-out canaries, schedule ShuffledEpochs(500, 500) (each inserted
          canary once in a 500-round run, the paper's one presentation: about
          2 canaries per round), recording every round's noised aggregate to
          disk with AggregateRecorder (part of the timed round).

(a) Steady-state seconds per round of both (mean), alternating plain and
    canary rounds so machine noise hits both alike, after warm-up rounds; their
    ratio (target <= 1.05), with a standard error from the paired per-round
    differences. 24 rounds each before (b) and 6 after, so the round times
    bracket the post-training work (on a shared host the speed drifts by up
    to 2x over minutes). Also the in-graph cost of one canary at this dim, so
    other schedules can be extrapolated: cost per round ~ per_canary x
    canaries per round.
(b) Seconds of the whole post-training cosine work (final model and all
    iterates, 2000 canaries) for a 500-round run: 500 synthetic aggregates of
    the right shape are written with the recorder (not timed), then
    compute_cosine_table runs (timed) with the default 2 GiB memory budget.

Last line: the amortized ratio for a 500-round run,
(500 t_canary_round + t_post) / (500 t_plain_round); target <= 1.10.

Peak memory: resident set size of this Python process plus TFF's worker_binary
(where TFF runs the computations), sampled every 20 ms, per phase.

Usage: .venv/bin/python bench/round_overhead.py [--rounds 16] [--warmup 2]
       [--post_rounds 500] [--quick]   (--quick: a 2-minute smoke run with
       small numbers, not the benchmark.)
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import threading
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # pylint: disable=g-import-not-at-top
import tensorflow as tf  # pylint: disable=g-import-not-at-top

from tff_canary.federated import aggregate_recorder  # pylint: disable=g-import-not-at-top
from tff_canary.federated import canary_directions  # pylint: disable=g-import-not-at-top
from tff_canary.federated import cosine_pass  # pylint: disable=g-import-not-at-top
from tff_canary.federated import factory  # pylint: disable=g-import-not-at-top
from tff_canary.federated import flat_layout  # pylint: disable=g-import-not-at-top
from tff_canary.stats import canary_config  # pylint: disable=g-import-not-at-top
from tff_canary.stats import schedules  # pylint: disable=g-import-not-at-top
from tff_canary.federated import worker_guard  # pylint: disable=g-import-not-at-top
import tensorflow_federated as tff  # pylint: disable=g-import-not-at-top
from tensorflow_federated.python.simulation.baselines.emnist import emnist_models  # pylint: disable=g-import-not-at-top

EMNIST_CNN_PARAMETERS = 1_206_590


def log(message: str) -> None:
  print(message, flush=True)


# ---------------------------------------------------------------- memory


def _rss_bytes(pid: int) -> int:
  try:
    with open(f"/proc/{pid}/status", encoding="ascii") as f:
      for line in f:
        if line.startswith("VmRSS:"):
          return int(line.split()[1]) * 1024
  except (FileNotFoundError, ProcessLookupError):
    pass
  return 0


class MemorySampler:
  """Samples RSS of this process + TFF workers; keeps the peak per phase."""

  def __init__(self, interval: float = 0.02):
    self._interval = interval
    self._phase = None
    self.peaks: dict[str, int] = {}
    self._stop = threading.Event()
    self._thread = threading.Thread(target=self._run, daemon=True)

  def start(self):
    self._thread.start()
    return self

  def phase(self, name: str | None) -> None:
    self._phase = name

  def _run(self):
    pid = os.getpid()
    while not self._stop.is_set():
      phase = self._phase
      if phase is not None:
        total = _rss_bytes(pid) + sum(
            _rss_bytes(w) for w in worker_guard.live_workers())
        self.peaks[phase] = max(self.peaks.get(phase, 0), total)
      time.sleep(self._interval)

  def stop(self):
    self._stop.set()
    self._thread.join()


# ---------------------------------------------------------------- setup


def model_fn():
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


def per_canary_cost(seed: int, dim: int, k: int = 20, repeats: int = 5
                   ) -> float:
  """Seconds per canary of the in-graph generation+sum at this dim."""

  @tf.function(input_signature=[tf.TensorSpec([None], tf.int32)])
  def total(ids):
    return canary_directions.canary_sum(tf.constant(seed, tf.int64), ids, dim)

  def timed(ids):
    total(ids).numpy()
    best = np.inf
    for _ in range(repeats):
      start = time.perf_counter()
      total(ids).numpy()
      best = min(best, time.perf_counter() - start)
    return best

  t0 = timed(np.zeros(0, np.int32))
  tk = timed(np.arange(k, dtype=np.int32))
  return (tk - t0) / k


def paired_se(times: dict[str, list[float]]) -> float:
  """Standard error of mean(canary) / mean(plain) from paired differences.

  Round r of both processes ran back to back, so the difference cancels most
  of the host's drift; SE = sd(canary_r - plain_r) / sqrt(n) / mean(plain).
  """
  plain = np.asarray(times["plain"])
  diff = np.asarray(times["canary"]) - plain
  if diff.size < 2:
    return float("nan")
  return float(diff.std(ddof=1) / np.sqrt(diff.size) / plain.mean())


# ---------------------------------------------------------------- main


def main(argv=None) -> int:
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("--rounds", type=int, default=24,
                      help="timed rounds of each process before (b)")
  parser.add_argument("--drift_rounds", type=int, default=6,
                      help="timed rounds of each process after (b)")
  parser.add_argument("--warmup", type=int, default=2,
                      help="untimed first rounds of each process")
  parser.add_argument("--post_rounds", type=int, default=500,
                      help="run length for the post-training work")
  parser.add_argument("--inserted", type=int, default=1000)
  parser.add_argument("--held_out", type=int, default=1000)
  parser.add_argument("--clients_per_round", type=int, default=20)
  parser.add_argument("--examples", type=int, default=100)
  parser.add_argument("--batch", type=int, default=16)
  parser.add_argument("--noise_multiplier", type=float, default=1.0)
  parser.add_argument("--clip", type=float, default=0.1)
  parser.add_argument("--memory_budget_bytes", type=int,
                      default=cosine_pass.DEFAULT_MEMORY_BUDGET_BYTES)
  parser.add_argument("--workdir", default=None,
                      help="directory for the aggregate file (default: a "
                           "temporary directory, removed at the end)")
  parser.add_argument("--quick", action="store_true",
                      help="smoke run: 2 timed rounds, 20 post rounds, 200 "
                           "canaries (not the benchmark)")
  args = parser.parse_args(argv)
  if args.quick:
    args.rounds, args.warmup, args.post_rounds = 2, 1, 20
    args.drift_rounds = 1
    args.inserted, args.held_out = 100, 100
  seed = 2024
  sampler = MemorySampler().start()
  workdir = args.workdir or tempfile.mkdtemp(prefix="round_overhead_")
  os.makedirs(workdir, exist_ok=True)
  began = time.perf_counter()
  try:
    log(f"TF {tf.__version__}, TFF {tff.__version__}, "
        f"{os.cpu_count()} CPUs; workdir {workdir}")
    keras_model = emnist_models.create_conv_dropout_model(only_digits=False)
    dim = int(sum(np.prod(w.shape) for w in keras_model.trainable_weights))
    log(f"EMNIST cnn_dropout: {dim:,} trainable parameters "
        f"({'matches' if dim == EMNIST_CNN_PARAMETERS else 'DIFFERS FROM'} "
        f"{EMNIST_CNN_PARAMETERS:,})")
    schedule = schedules.ShuffledEpochs(args.post_rounds, args.post_rounds)
    config = canary_config.CanaryConfig(seed=seed, num_inserted=args.inserted,
                                        num_held_out=args.held_out,
                                        schedule=schedule)
    per_round = config.participation.per_round()
    log(f"canaries: {args.inserted} inserted + {args.held_out} held out, "
        f"{schedule}: mean {per_round.mean():.2f} per round, max "
        f"{per_round.max()}")

    clients = synthetic_clients(args.clients_per_round, args.examples,
                                args.batch)
    plain_factory = tff.aggregators.DifferentiallyPrivateFactory.gaussian_fixed(
        float(args.noise_multiplier), float(args.clients_per_round),
        float(args.clip))
    canary_factory = factory.CanaryDPFactory.gaussian_fixed(
        args.noise_multiplier, args.clients_per_round, args.clip,
        canaries=config)
    log("building the plain process ...")
    start = time.perf_counter()
    plain = build(plain_factory)
    log(f"  {time.perf_counter() - start:.1f} s")
    log("building the canary process ...")
    start = time.perf_counter()
    canary = build(canary_factory)
    log(f"  {time.perf_counter() - start:.1f} s")

    state_plain = plain.initialize()
    state_canary = canary.initialize()
    theta0 = canary.get_model_weights(state_canary)

    times = {"plain": [], "canary": []}
    record_seconds = []
    inserted = []

    def alternate(rounds: int, label: str, timed: bool) -> None:
      nonlocal state_plain, state_canary
      for r in range(rounds):
        # Alternate which goes first, so drift hits both alike.
        order = ("plain", "canary") if r % 2 == 0 else ("canary", "plain")
        seconds = {}
        for name in order:
          sampler.phase(name)
          start = time.perf_counter()
          if name == "plain":
            output = plain.next(state_plain, clients)
            state_plain = output.state
          else:
            output = canary.next(state_canary, clients)
            state_canary = output.state
            before = time.perf_counter()
            recorder.record(output.metrics)
            record_seconds.append(time.perf_counter() - before)
            inserted.append(int(output.metrics["aggregator"][
                "canaries_inserted"]))
          seconds[name] = time.perf_counter() - start
          sampler.phase(None)
          if timed:
            times[name].append(seconds[name])
        log(f"{label} round {r + 1}/{rounds}: plain {seconds['plain']:.2f} s, "
            f"canary {seconds['canary']:.2f} s ({inserted[-1]} canaries "
            "inserted)")

    recorder = aggregate_recorder.AggregateRecorder(
        os.path.join(workdir, "train_aggregates.npy"), dim,
        args.warmup + args.rounds + args.drift_rounds)
    alternate(args.warmup, "warm-up", timed=False)
    alternate(args.rounds, "timed", timed=True)
    timed_inserted = inserted[args.warmup:]
    t_plain_a = float(np.mean(times["plain"]))
    t_canary_a = float(np.mean(times["canary"]))
    log("")
    log(f"(a) steady state over {args.rounds} rounds each (mean; median plain "
        f"{np.median(times['plain']):.3f} s, canary "
        f"{np.median(times['canary']):.3f} s):")
    log(f"    plain  {t_plain_a:.3f} s/round")
    log(f"    canary {t_canary_a:.3f} s/round  ({np.mean(timed_inserted):.1f} "
        f"canaries/round inserted in the timed rounds; recording the "
        f"aggregate {1e3 * np.mean(record_seconds):.0f} ms of it)")
    log(f"    ratio  {t_canary_a / t_plain_a:.3f} +- "
        f"{paired_se(times):.3f} (paired SE)  (target <= 1.05)")
    cost = per_canary_cost(seed, dim)
    log(f"    in-graph cost of one canary at d = {dim:,}: {cost * 1e3:.1f} ms "
        f"({cost * 1e3 / (dim / 1e6):.1f} ms per million parameters); a "
        f"schedule with n canaries per round adds about n x {cost * 1e3:.1f} "
        "ms")
    log(f"    reference approach (every canary regenerated every round): "
        f"about {config.num_canaries} x {cost * 1e3:.1f} ms = "
        f"{config.num_canaries * cost:.0f} s per round (extrapolated)")

    # (b) Post-training work for a post_rounds-round run.
    log("")
    log(f"(b) writing {args.post_rounds} synthetic aggregates of dim {dim:,} "
        f"({args.post_rounds * dim * 4 / 2**30:.2f} GiB, not timed) ...")
    path = os.path.join(workdir, "post_aggregates.npy")
    post = aggregate_recorder.AggregateRecorder(path, dim, args.post_rounds,
                                                overwrite=True)
    rng = np.random.default_rng(1)
    for r in range(args.post_rounds):
      post.write(r, rng.standard_normal(dim, dtype=np.float32))
      if (r + 1) % 100 == 0:
        log(f"    {r + 1}/{args.post_rounds}")
    post.close()
    theta_t = canary.get_model_weights(state_canary)
    chunk, block = cosine_pass.plan_blocks(dim, args.post_rounds,
                                           config.num_canaries,
                                           args.memory_budget_bytes)
    log(f"    memory budget {args.memory_budget_bytes / 2**30:.2f} GiB: "
        f"{block} canaries per block, {chunk} aggregates per chunk")
    sampler.phase("post")
    start = time.perf_counter()
    table = cosine_pass.compute_cosine_table(
        config, theta0, theta_t, path,
        memory_budget_bytes=args.memory_budget_bytes, progress=True)
    t_post = time.perf_counter() - start
    sampler.phase(None)
    log(f"    post-training cosines ({config.num_canaries} canaries, final + "
        f"all {args.post_rounds} iterates): {t_post:.1f} s  "
        f"({table.rounds_recorded} rounds)")

    # Precision check (untimed): three canaries' cosines redone in float64
    # over all rounds, against the float32 table.
    check_ids = np.array([0, 1, config.num_canaries - 1])
    c64 = canary_directions.canary_block(seed, check_ids, dim).astype(
        np.float64)
    c64 /= np.linalg.norm(c64, axis=1, keepdims=True)
    aggregates, _ = aggregate_recorder.load_aggregates(path)
    exact = np.empty((check_ids.size, args.post_rounds))
    for r0 in range(0, args.post_rounds, 50):
      a64 = np.asarray(aggregates[r0:r0 + 50], np.float64)
      exact[:, r0:r0 + 50] = (c64 @ a64.T) / np.linalg.norm(a64, axis=1)
    del aggregates, a64
    u64 = (flat_layout.flatten_numpy(theta0.trainable).astype(np.float64) -
           flat_layout.flatten_numpy(theta_t.trainable).astype(np.float64))
    exact_final = c64 @ u64 / np.linalg.norm(u64)
    error = max(
        np.abs(table.max_cosine[check_ids] - exact.max(axis=1)).max(),
        np.abs(table.final_cosine[check_ids] - exact_final).max())
    same_round = np.array_equal(table.max_round[check_ids],
                                exact.argmax(axis=1))
    log(f"    float32 vs float64 cosines at d = {dim:,}: max abs error "
        f"{error:.1e} (null sd 1/sqrt(d) = {1 / np.sqrt(dim):.1e}); rounds "
        f"of the max {'agree' if same_round else 'DIFFER'}")

    # Machine speed drifts (shared host): time more rounds after (b), so the
    # round times bracket the post-training work.
    if args.drift_rounds:
      log("")
      alternate(args.drift_rounds, "after (b)", timed=True)
    recorder.close()
    t_plain = float(np.mean(times["plain"]))
    t_canary = float(np.mean(times["canary"]))
    log("")
    log(f"rounds before and after (b), {len(times['plain'])} each: plain "
        f"{t_plain:.3f} s, canary {t_canary:.3f} s, ratio "
        f"{t_canary / t_plain:.3f} +- {paired_se(times):.3f} (paired SE)")
    gib = 2**30
    log(f"peak RSS (python + worker_binary): plain rounds "
        f"{sampler.peaks.get('plain', 0) / gib:.2f} GiB, canary rounds "
        f"{sampler.peaks.get('canary', 0) / gib:.2f} GiB, post-training "
        f"{sampler.peaks.get('post', 0) / gib:.2f} GiB")
    log(f"total wall time {time.perf_counter() - began:.0f} s")
    n = args.post_rounds
    amortized = (n * t_canary + t_post) / (n * t_plain)
    log(f"amortized ratio for a {n}-round run: ({n} x {t_canary:.3f} + "
        f"{t_post:.1f}) / ({n} x {t_plain:.3f}) = {amortized:.3f}  "
        "(target <= 1.10)")
  finally:
    sampler.stop()
    if args.workdir is None:
      shutil.rmtree(workdir, ignore_errors=True)
    worker_guard.stop_workers()
  return 0


if __name__ == "__main__":
  sys.exit(main())
