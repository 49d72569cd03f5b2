"""What canaries cost: DP-FedAvg rounds with and without them, streamed cosines.

The EMNIST character CNN (TFF's baseline `cnn_dropout`, 62 classes,
1,206,590 parameters) on synthetic data (28x28x1 images, 20 clients per
round, 100 examples each, batch 16), side by side in ONE process:

  plain:  tff.aggregators.DifferentiallyPrivateFactory.gaussian_fixed
  canary: tff_canary CanaryDPFactory.gaussian_fixed with 1000 inserted + 1000
          held-out canaries, schedule ShuffledEpochs(500, 500) (each inserted
          canary once in a 500-round run, the paper's one presentation: about
          2 canaries per round), each round's noised aggregate streamed
          (`cosine_stream.CosineStream`, part of the timed round): chunks of B
          rounds (B from --disk_budget_bytes, as in a 500-round run) taken by
          the background worker process while the rounds go on, without the
          other inserted canaries as the experiments take them; the worker
          keeps the canaries it generates in its cache (--cache_bytes,
          default half the available memory), filled while it is idle.

(a) Seconds per round of both, alternating plain and canary rounds (which
    goes first alternates too) after warm-up rounds, so machine noise hits
    both alike. The worker runs during canary rounds only (SIGSTOP during
    plain rounds, SIGCONT after), as it would in a canary run and not in a
    plain one. The per-round ratio with the standard error of the paired
    per-round ratios (target SE <= 0.01).
(b) The end of the run (`CosineStream.finish`), timed: the worker stopped,
    then the rounds it had not taken (the last chunk, and one it was still
    on) and the final-model cosines in one pass over the 2000 canaries, read
    from the worker's cache where it holds them. A 500-round run ends the
    same way (its last chunk has at most B rounds).
(c) Unit costs, measured here: canary generation per canary per million
    parameters (one thread, as in the worker, and all threads, as at the
    end), the float32 GEMM rate of one thread, disk per round (4 d bytes);
    and from them the projection for the paper's StackOverflow setting
    (d = 4,050,748, 2048 rounds, 1000 + 1000 canaries), streaming with
    and without a canary cache against keeping every round (a markdown
    table).

Last lines: `aggregate disk: X MiB of Y MiB` (the peak of the chunk files
against keeping every round of a 500-round run), the peak RSS (this process,
TFF's worker_binary and the stream worker, sampled every 20 ms), and the
amortized ratio for a 500-round run,
(500 t_canary_round + t_end) / (500 t_plain_round) = R (target <= 1.02).

Usage: .venv/bin/python bench/round_overhead.py [--rounds 320] [--warmup 2]
       [--directions orthogonal]  (bench/orthogonal_rounds.py)
       [--quick]   (--quick: a smoke run with small numbers, not the
       benchmark.)
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # pylint: disable=g-import-not-at-top
import tensorflow as tf  # pylint: disable=g-import-not-at-top

from tff_canary.federated.scores import canary_cache  # pylint: disable=g-import-not-at-top
from tff_canary.federated.insertion import canary_directions  # pylint: disable=g-import-not-at-top
from tff_canary.federated.scores import cosine_pass  # pylint: disable=g-import-not-at-top
from tff_canary.federated.scores import cosine_stream  # pylint: disable=g-import-not-at-top
from tff_canary.federated.insertion import factory  # pylint: disable=g-import-not-at-top
from tff_canary.stats.canaries import canary_config  # pylint: disable=g-import-not-at-top
from tff_canary.stats.canaries import schedules  # pylint: disable=g-import-not-at-top
from tff_canary.federated.runtime import worker_guard  # pylint: disable=g-import-not-at-top
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
    self.extra_pids: list[int] = []
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
      if self.extra_pids:
        self.peaks["worker"] = max(self.peaks.get("worker", 0), sum(
            _rss_bytes(w) for w in self.extra_pids))
      if phase is not None:
        total = _rss_bytes(pid) + sum(
            _rss_bytes(w) for w in worker_guard.live_workers()) + sum(
                _rss_bytes(w) for w in self.extra_pids)
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
  """Standard error of the mean per-round ratio canary_r / plain_r.

  Round r of both processes ran back to back, so the ratio cancels most of
  the host's drift; SE = sd(ratio_r) / sqrt(n).
  """
  ratio = np.asarray(times["canary"]) / np.asarray(times["plain"])
  if ratio.size < 2:
    return float("nan")
  return float(ratio.std(ddof=1) / np.sqrt(ratio.size))


def generation_ms_per_million(seed: int, dim: int, threads: int,
                              k: int = 10) -> float:
  """ms per canary per million parameters of `canary_block`, in a fresh
  process with `threads` threads (TF's intra-op pool and BLAS)."""
  code = (
      "import os,time,sys\n"
      "import tensorflow as tf\n"
      f"tf.config.threading.set_intra_op_parallelism_threads({threads})\n"
      f"tf.config.threading.set_inter_op_parallelism_threads({threads})\n"
      "from tff_canary.federated import canary_directions as cd\n"
      f"cd.canary_block({seed}, [0], {dim})\n"
      "t=time.perf_counter()\n"
      f"cd.canary_block({seed}, range({k}), {dim})\n"
      "print(time.perf_counter()-t)\n")
  env = dict(os.environ, OMP_NUM_THREADS=str(threads),
             OPENBLAS_NUM_THREADS=str(threads), TF_CPP_MIN_LOG_LEVEL="2")
  out = subprocess.run([sys.executable, "-c", code], env=env, check=True,
                       capture_output=True, text=True).stdout
  return float(out.split()[-1]) / k * 1e3 / (dim / 1e6)


def gemm_gflops_one_thread(dim: int) -> float:
  """float32 GEMM rate of one thread, [64, d] x [d, 32] as in the worker."""
  code = (
      "import time, numpy as np\n"
      f"a=np.ones((64,{dim}),np.float32); b=np.ones((32,{dim}),np.float32)\n"
      "a@b.T; t=time.perf_counter(); a@b.T; a@b.T\n"
      f"print(2*2*64*32*{dim}/(time.perf_counter()-t)/1e9)\n")
  env = dict(os.environ, OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1")
  out = subprocess.run([sys.executable, "-c", code], env=env, check=True,
                       capture_output=True, text=True).stdout
  return float(out.split()[-1])


def projection(gen1_ms: float, gen_all_ms: float, gflops: float, *,
               dim: int, rounds: int, canaries: int, memory_gib: float,
               threads: int, designs=((0.5, 0.0), (0.5, 8.0), (2.0, 8.0),
                                      (0.5, None)),
               worker_rss_gib: float = 0.0) -> str:
  """Markdown: scratch disk, RAM and extra CPU of streaming vs keeping every
  round, from the unit costs (module docstring (c)).

  `designs`: (disk budget GiB, canary cache GiB; None: every canary). The
  worker generates the cached canaries once and the others once per chunk;
  the end pass generates what the cache lacks (on `threads` threads) and
  takes the last chunk and the final cosines.
  """
  gib = 2**30
  row = 4 * dim
  gen1 = gen1_ms * dim / 1e6 / 1e3  # s per canary, one thread
  gen_all = gen_all_ms * dim / 1e6 / 1e3  # s per canary, every thread
  gemm = 2 * canaries * dim / (gflops * 1e9)  # s per round, one thread
  lines = [
      f"| design (d = {dim:,}, {rounds} rounds, {canaries} canaries) | "
      "scratch disk | RAM for the cosines | CPU during training (spare "
      "core) | wall time after training |",
      "|---|---|---|---|---|",
      f"| keep every round, one pass after training | "
      f"{rounds * row / gib:.1f} GiB | {memory_gib:.1f} GiB | 0 | "
      f"{(canaries * gen_all + rounds * gemm / threads) / 60:.0f} min |"]
  for disk, cache_gib in designs:
    plan = cosine_stream.plan_stream(dim, canaries, rounds,
                                     int(memory_gib * gib), int(disk * gib))
    cached = canaries if cache_gib is None else canary_cache.cacheable_canaries(
        canaries, dim, plan.canaries_per_block, int(cache_gib * gib))
    chunks = plan.num_chunks
    last = rounds - (chunks - 1) * plan.chunk_rounds
    background = (cached + (chunks - 1) * (canaries - cached)) * gen1 + (
        rounds - last) * gemm
    end = (canaries - cached) * gen_all + last * gemm / threads
    cache_text = ("every canary" if cached == canaries else
                  f"{cached} canaries" if cached else "no")
    lines.append(
        f"| streamed, disk budget {disk:g} GiB (B = {plan.chunk_rounds}, "
        f"{chunks} chunks), {cache_text} cache | "
        f"{3 * plan.chunk_rounds * row / gib:.2f} GiB | "
        f"{memory_gib + worker_rss_gib + cached * row / gib:.1f} GiB | "
        f"{background / 60:.0f} min | {end / 60:.1f} min |")
  return "\n".join(lines)


def _plan_json(stream) -> dict:
  with open(os.path.join(stream._dir, cosine_stream.PLAN),  # pylint: disable=protected-access
            encoding="utf-8") as f:
    return json.load(f)


# ---------------------------------------------------------------- main


def main(argv=None) -> int:
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("--rounds", type=int, default=320,
                      help="timed rounds of each process")
  parser.add_argument("--warmup", type=int, default=2,
                      help="untimed first rounds of each process")
  parser.add_argument("--run_rounds", type=int, default=500,
                      help="run length the ratio is amortized over")
  parser.add_argument("--inserted", type=int, default=1000)
  parser.add_argument("--held_out", type=int, default=1000)
  parser.add_argument("--clients_per_round", type=int, default=20)
  parser.add_argument("--examples", type=int, default=100)
  parser.add_argument("--batch", type=int, default=16)
  parser.add_argument("--noise_multiplier", type=float, default=1.0)
  parser.add_argument("--clip", type=float, default=0.1)
  parser.add_argument("--memory_budget_bytes", type=int,
                      default=cosine_pass.DEFAULT_MEMORY_BUDGET_BYTES)
  parser.add_argument("--disk_budget_bytes", type=int,
                      default=cosine_stream.DEFAULT_DISK_BUDGET_BYTES)
  parser.add_argument("--cache_bytes", type=int, default=None,
                      help="the stream worker's canary cache (default: half "
                           "the memory available when it starts; 0: none)")
  parser.add_argument("--workdir", default=None,
                      help="directory for the stream's files (default: a "
                           "temporary directory, removed at the end)")
  parser.add_argument("--directions", choices=("gaussian", "orthogonal"),
                      default="gaussian",
                      help="orthogonal: bench/orthogonal_rounds.py (plain vs "
                           "2000 and 20000 orthogonal canaries, scored in "
                           "the round)")
  parser.add_argument("--quick", action="store_true",
                      help="smoke run: 4 timed rounds, 100 + 100 canaries, "
                           "chunks of 2 rounds (not the benchmark)")
  args = parser.parse_args(argv)
  if args.directions == "orthogonal":
    import orthogonal_rounds  # pylint: disable=g-import-not-at-top
    if args.quick:
      args.rounds, args.warmup = 3, 1
    return orthogonal_rounds.run(args)
  if args.quick:
    args.rounds, args.warmup = 4, 1
    args.inserted, args.held_out = 100, 100
    args.disk_budget_bytes = 6 * 4 * EMNIST_CNN_PARAMETERS
  seed = 2024
  sampler = MemorySampler().start()
  workdir = args.workdir or tempfile.mkdtemp(prefix="round_overhead_")
  os.makedirs(workdir, exist_ok=True)
  began = time.perf_counter()
  stream = None
  try:
    log(f"TF {tf.__version__}, TFF {tff.__version__}, "
        f"{os.cpu_count()} CPUs; workdir {workdir}")
    keras_model = emnist_models.create_conv_dropout_model(only_digits=False)
    dim = int(sum(np.prod(w.shape) for w in keras_model.trainable_weights))
    log(f"EMNIST cnn_dropout: {dim:,} trainable parameters "
        f"({'matches' if dim == EMNIST_CNN_PARAMETERS else 'DIFFERS FROM'} "
        f"{EMNIST_CNN_PARAMETERS:,})")
    n = args.run_rounds
    schedule = schedules.ShuffledEpochs(n, n)
    config = canary_config.CanaryConfig(seed=seed, num_inserted=args.inserted,
                                        num_held_out=args.held_out,
                                        schedule=schedule)
    per_round = config.participation.per_round()
    log(f"canaries: {args.inserted} inserted + {args.held_out} held out, "
        f"{schedule}: mean {per_round.mean():.2f} per round, max "
        f"{per_round.max()}")
    recorded = args.warmup + args.rounds
    run_plan = cosine_stream.plan_stream(dim, config.num_canaries, n,
                                         args.memory_budget_bytes,
                                         args.disk_budget_bytes)
    # The bench records `recorded` rounds, split as a full run would be.
    plan = dataclasses.replace(run_plan, num_rounds=recorded)
    log(f"stream plan: chunks of B = {plan.chunk_rounds} rounds, "
        f"{plan.canaries_per_block} canaries per block "
        f"({plan.num_chunks} chunks in the {recorded} recorded rounds)")

    clients = synthetic_clients(args.clients_per_round, args.examples,
                                args.batch)
    plain_factory = tff.aggregators.DifferentiallyPrivateFactory.gaussian_fixed(
        float(args.noise_multiplier), float(args.clients_per_round),
        float(args.clip))
    canary_factory = factory.CanaryDPFactory.gaussian_fixed(
        args.noise_multiplier, args.clients_per_round, args.clip,
        canaries=config)
    plain = build(plain_factory)
    canary = build(canary_factory)
    state_plain = plain.initialize()
    state_canary = canary.initialize()
    theta0 = canary.get_model_weights(state_canary)

    # As the experiments stream: without the other inserted canaries
    # (each round's clip comes with its aggregate in the metrics).
    stream = cosine_stream.CosineStream(
        os.path.join(workdir, "stream"), config, plan,
        clients_per_round=args.clients_per_round,
        cache_bytes=args.cache_bytes)
    worker_pid = stream._worker.pid  # pylint: disable=protected-access
    sampler.extra_pids.append(worker_pid)
    while not stream._worker.ready:  # pylint: disable=protected-access
      stream._worker.poll(block=True)  # its start (TensorFlow) is not timed  # pylint: disable=protected-access
    worker_idle_gib = _rss_bytes(worker_pid) / 2**30  # TF, before any chunk
    cached = stream._worker.cached_canaries  # pylint: disable=protected-access
    log(f"canary cache: {cached} of {config.num_canaries} canaries "
        f"({cached * 4 * dim / 2**30:.2f} GiB), filled while the worker is "
        "idle during the canary rounds")
    os.kill(worker_pid, signal.SIGSTOP)
    times = {"plain": [], "canary": []}
    inserted = []
    round_num = 0

    def alternate(rounds: int, label: str, timed: bool) -> None:
      nonlocal state_plain, state_canary, round_num
      for r in range(rounds):
        order = ("plain", "canary") if r % 2 == 0 else ("canary", "plain")
        seconds = {}
        for name in order:
          sampler.phase(name)
          if name == "canary":
            os.kill(worker_pid, signal.SIGCONT)
          start = time.perf_counter()
          if name == "plain":
            output = plain.next(state_plain, clients)
            state_plain = output.state
          else:
            output = canary.next(state_canary, clients)
            state_canary = output.state
            inserted.append(int(output.metrics["aggregator"][
                "canaries_inserted"]))
            # Round numbers of the bench's run (the process counts its own).
            output.metrics["aggregator"]["round_num"] = round_num
            stream.record(output.metrics)
            stream.checkpointed(round_num + 1)
            round_num += 1
          seconds[name] = time.perf_counter() - start
          if name == "canary":
            os.kill(worker_pid, signal.SIGSTOP)
          sampler.phase(None)
          if timed:
            times[name].append(seconds[name])
        log(f"{label} round {r + 1}/{rounds}: plain {seconds['plain']:.2f} s, "
            f"canary {seconds['canary']:.2f} s ({inserted[-1]} canaries "
            "inserted)")

    alternate(args.warmup, "warm-up", timed=False)
    alternate(args.rounds, "timed", timed=True)
    t_plain = float(np.mean(times["plain"]))
    t_canary = float(np.mean(times["canary"]))
    ratio = np.asarray(times["canary"]) / np.asarray(times["plain"])
    log("")
    log(f"(a) {args.rounds} alternated rounds each: plain {t_plain:.3f} s, "
        f"canary {t_canary:.3f} s (mean); per-round ratio "
        f"{ratio.mean():.3f} +- {paired_se(times):.3f} (paired SE, target "
        f"<= 0.01); ratio of means {t_canary / t_plain:.3f}")
    cost = per_canary_cost(seed, dim)
    log(f"    in-graph cost of one canary at d = {dim:,}: {cost * 1e3:.1f} ms")

    # (b) The end of the run.
    os.kill(worker_pid, signal.SIGCONT)
    theta_t = canary.get_model_weights(state_canary)
    sampler.phase("end")
    start = time.perf_counter()
    table = stream.finish(theta0, theta_t, progress=True)
    t_end = time.perf_counter() - start
    sampler.phase(None)
    log(f"(b) end of the run (the rounds the worker had not taken, at least the last "
        f"{recorded - (plan.num_chunks - 1) * plan.chunk_rounds} rounds and "
        f"the final cosines of {config.num_canaries} canaries): {t_end:.1f} s"
        f" ({table.rounds_recorded} rounds in the table; canary blocks "
        f"from the worker's cache: {_plan_json(stream)['end_pass_blocks_from_the_cache']})")

    # (c) Unit costs and the projection.
    gen1 = generation_ms_per_million(seed, dim, threads=1)
    gen_all = generation_ms_per_million(seed, dim, threads=os.cpu_count())
    gflops = gemm_gflops_one_thread(dim)
    log(f"(c) unit costs: canary generation {gen1:.1f} ms per canary per "
        f"million parameters on one thread, {gen_all:.1f} on "
        f"{os.cpu_count()}; float32 GEMM {gflops:.1f} GFLOP/s on one thread;"
        f" disk {4 * dim / 2**20:.2f} MiB per round")
    log(f"    stream worker RSS: {worker_idle_gib:.2f} GiB started (TensorFlow),"
        f" {sampler.peaks.get('worker', 0) / 2**30:.2f} GiB at its peak")
    log("projection for the paper's StackOverflow setting:")
    log(projection(gen1, gen_all, gflops, dim=4_050_748, rounds=2048,
                   canaries=2000,
                   memory_gib=args.memory_budget_bytes / 2**30,
                   threads=os.cpu_count(), worker_rss_gib=worker_idle_gib))
    log("")
    log(f"total wall time {time.perf_counter() - began:.0f} s")
    gib = 2**30
    log(f"peak RSS (python + worker_binary + stream worker): plain rounds "
        f"{sampler.peaks.get('plain', 0) / gib:.2f} GiB, canary rounds "
        f"{sampler.peaks.get('canary', 0) / gib:.2f} GiB, end "
        f"{sampler.peaks.get('end', 0) / gib:.2f} GiB")
    log(f"aggregate disk: {stream.peak_disk_bytes / 2**20:.0f} MiB of "
        f"{n * 4 * dim / 2**20:.0f} MiB (peak chunk files, B = "
        f"{plan.chunk_rounds}; keeping every round of a {n}-round run)")
    amortized = (n * t_canary + t_end) / (n * t_plain)
    log(f"amortized ratio for a {n}-round run: ({n} x {t_canary:.3f} + "
        f"{t_end:.1f}) / ({n} x {t_plain:.3f}) = {amortized:.3f}  "
        "(target <= 1.02)")
  finally:
    if stream is not None:
      try:
        os.kill(stream._worker.pid, signal.SIGCONT)  # pylint: disable=protected-access
      except (AttributeError, ProcessLookupError):
        pass
      stream.close()
    sampler.stop()
    if args.workdir is None:
      shutil.rmtree(workdir, ignore_errors=True)
    worker_guard.stop_workers()
  return 0


if __name__ == "__main__":
  sys.exit(main())
