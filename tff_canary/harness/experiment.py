"""A DP-FedAvg experiment with canaries, end to end, into a run directory.

`run_experiment(ExperimentConfig(...))` is what `experiments/emnist.py` and
`experiments/stackoverflow.py` run (they only turn flags into a config):

  1. load the data (built-in synthetic, or TFF's files from `cache_dir`) and
     build the task (`tff_canary.harness.tasks`);
  2. build DP-FedAvg (`tff.learning.algorithms.build_unweighted_fed_avg`) with
     the canary aggregator (`tff_canary.federated.factory`): fixed clipping when `clip`
     is set, else adaptive, with TFF's zeroing if asked;
  3. train: clients sampled per round from (seed, round) (shuffled epochs, or
     Poisson sampling per round; `client_sampling`), the canaries taking part
     the same way (checked before training; config.json's `participation`
     and participation.npz's `client_counts` record both), each round's
     noised aggregate recorded to disk
     (`aggregate_recorder.AggregateRecorder`), a progress bar with the round,
     loss, accuracy, clip norm and canaries inserted, evaluation every
     `eval_every` rounds, a checkpoint every `checkpoint_every` rounds;
  4. after training: the cosine table (`cosine_pass.compute_cosine_table`,
     checked against the seed and schedule in the trained aggregator state), the
     report (`tff_canary.harness.report`), all written into the run directory
     (`tff_canary.harness.run_dir` lists the files).

Reproducible: the data, the initial weights, the dropout masks
(`tasks.DeterministicDropout`), the client sampling, the canaries and (with
`seeded_noise`, the default for experiments) the DP noise all derive from the
seeds, so a run killed at any point and finished with `resume=True` writes the
same report as an uninterrupted one. Every file is written atomically (or by
TFF's own write-then-rename checkpointing); on resume, the per-round files are
cut back to the last checkpoint.

Before training, the run's aggregator is built afresh without canaries and
its noise tested on zero client values (`tff_canary.federated.noise_check`); the result
is noise_check.json, and the report shows its verdict.
"""

from __future__ import annotations

import asyncio
import csv
import dataclasses
import io
import os
import sys
import time
import warnings
from typing import Any, Optional

import numpy as np
import tensorflow as tf
import tensorflow_federated as tff

from tff_canary.stats import atomic_files
from tff_canary.stats import canary_config
from tff_canary.stats import client_sampling
from tff_canary.harness import datasets
from tff_canary.federated import factory
from tff_canary.federated import aggregate_recorder
from tff_canary.federated import canary_process
from tff_canary.federated import cosine_pass
from tff_canary.stats import ledger
from tff_canary.federated import noise_check
from tff_canary.harness import report as report_lib
from tff_canary.harness import run_dir as run_dir_lib
from tff_canary.stats import schedules
from tff_canary.harness import tasks
from tff_canary.federated import tree_search
from tff_canary.stats import validation
from tff_canary.federated import worker_guard

worker_guard.install()

SAMPLINGS = client_sampling.SAMPLINGS
OPTIMIZERS = ("sgd", "adam")
_NOISE_TAG = 0x401
_NOISE_CHECK_TAG = 0xC4EC

# Keys that may differ between a run and its resumption.
_RESUMABLE_KEYS = ("resume", "eval_every", "checkpoint_every",
                   "memory_budget_gb", "output_dir")


class CanaryFractionWarning(UserWarning):
  """Canaries are more than 1% of the run's participants (the paper's ratio)."""


@dataclasses.dataclass(frozen=True)
class ExperimentConfig:
  """Everything that defines a run (config.json holds it, resolved).

  None means "derive": num_clients from the data (synthetic: enough clients
  for `presentations` shuffled epochs over the run), num_rounds from epochs,
  presentations from the client sampler, delta = num_clients^-1.1 (the
  paper's), canary_seed and noise_seed from seed.

  Canaries take part as clients do (METHOD §2; `client_sampling`): a
  `presentations` that contradicts the client sampler is refused before any
  training unless `allow_participation_mismatch`, and so is a per-round rate
  clients_per_round / num_clients above 1.
  """

  task: str = "emnist"
  output_dir: str = "runs/emnist"
  data: str = "synthetic"
  cache_dir: Optional[str] = None
  vocab_path: Optional[str] = None
  num_clients: Optional[int] = None
  examples_per_client: int = 32
  clients_per_round: int = 50
  num_rounds: Optional[int] = 100
  epochs: Optional[int] = None
  sampling: str = "shuffle"
  noise_multiplier: float = 0.5
  clip: Optional[float] = None
  target_unclipped_quantile: float = 0.5
  initial_clip: float = 0.1
  zeroing: bool = False
  client_optimizer: str = "sgd"
  client_learning_rate: float = 0.031
  server_optimizer: str = "sgd"
  server_learning_rate: float = 1.0
  server_momentum: float = 0.9
  batch_size: int = 16
  client_epochs: int = 1
  num_inserted: int = 100
  num_held_out: int = 100
  presentations: Optional[int] = None
  allow_participation_mismatch: bool = False
  assignment: str = "coin"
  seed: int = 0
  canary_seed: Optional[int] = None
  noise_seed: Optional[int] = None
  seeded_noise: bool = True
  delta: Optional[float] = None
  eval_every: int = 25
  eval_examples: Optional[int] = 2000
  checkpoint_every: int = 25
  record_aggregates: bool = True
  memory_budget_gb: float = 2.0
  resume: bool = False

  def __post_init__(self):
    v = validation
    check = {
        "task": lambda x: v.as_choice(x, "task", tasks.TASKS),
        "data": lambda x: v.as_choice(x, "data", ("synthetic", "tff")),
        "sampling": lambda x: v.as_choice(x, "sampling", SAMPLINGS),
        "client_optimizer": lambda x: v.as_choice(x, "client_optimizer",
                                                  OPTIMIZERS),
        "server_optimizer": lambda x: v.as_choice(x, "server_optimizer",
                                                  OPTIMIZERS),
        "assignment": lambda x: v.as_choice(x, "assignment",
                                            canary_config.ASSIGNMENTS),
        "examples_per_client": lambda x: v.as_int(x, "examples_per_client", 1),
        "clients_per_round": lambda x: v.as_int(x, "clients_per_round", 1),
        "noise_multiplier": lambda x: v.as_nonnegative(x, "noise_multiplier"),
        "target_unclipped_quantile": lambda x: v.as_unit_interval(
            x, "target_unclipped_quantile"),
        "initial_clip": lambda x: v.as_positive(x, "initial_clip"),
        "client_learning_rate": lambda x: v.as_positive(
            x, "client_learning_rate"),
        "server_learning_rate": lambda x: v.as_positive(
            x, "server_learning_rate"),
        "server_momentum": lambda x: v.as_unit_interval(
            x, "server_momentum", include_high=False),
        "batch_size": lambda x: v.as_int(x, "batch_size", 1),
        "client_epochs": lambda x: v.as_int(x, "client_epochs", 1),
        "num_inserted": lambda x: v.as_int(x, "num_inserted", 0),
        "num_held_out": lambda x: v.as_int(x, "num_held_out", 0),
        "seed": lambda x: v.as_int(x, "seed", 0),
        "eval_every": lambda x: v.as_int(x, "eval_every", 0),
        "checkpoint_every": lambda x: v.as_int(x, "checkpoint_every", 1),
        "memory_budget_gb": lambda x: v.as_positive(x, "memory_budget_gb"),
    }
    optional = {
        "num_clients": lambda x: v.as_int(x, "num_clients", 2),
        "num_rounds": lambda x: v.as_int(x, "num_rounds", 1),
        "epochs": lambda x: v.as_int(x, "epochs", 1),
        "presentations": lambda x: v.as_int(x, "presentations", 1),
        "clip": lambda x: v.as_positive(x, "clip"),
        "canary_seed": lambda x: v.as_int(x, "canary_seed", 0),
        "noise_seed": lambda x: v.as_int(x, "noise_seed", 0),
        "delta": lambda x: v.as_open_unit(x, "delta"),
        "eval_examples": lambda x: v.as_int(x, "eval_examples", 1),
    }
    for name, fn in check.items():
      object.__setattr__(self, name, fn(getattr(self, name)))
    for name, fn in optional.items():
      if getattr(self, name) is not None:
        object.__setattr__(self, name, fn(getattr(self, name)))
    for name in ("zeroing", "seeded_noise", "record_aggregates", "resume",
                 "allow_participation_mismatch"):
      if not isinstance(getattr(self, name), (bool, np.bool_)):
        raise TypeError(f"{name} must be a bool, got {getattr(self, name)!r}.")
    for name in ("output_dir", "cache_dir", "vocab_path"):
      value = getattr(self, name)
      if value is not None and not isinstance(value, (str, os.PathLike)):
        raise TypeError(f"{name} must be a path, got {value!r}.")
    if not self.output_dir:
      raise ValueError("output_dir must be a non-empty path.")
    if (self.num_rounds is None) == (self.epochs is None):
      raise ValueError("give exactly one of num_rounds and epochs; got "
                       f"num_rounds={self.num_rounds}, epochs={self.epochs}.")
    if self.num_inserted + self.num_held_out < 4:
      raise ValueError("the estimators need canaries: num_inserted + "
                       f"num_held_out must be at least 4, got "
                       f"{self.num_inserted + self.num_held_out}.")
    if self.data == "tff" and self.num_clients is not None:
      raise ValueError("num_clients is for --data=synthetic; TFF's data has "
                       "its own clients.")
    if self.num_clients is not None:  # the rate, before any data is loaded
      client_sampling.ClientSampler(self.num_clients, self.clients_per_round,
                                    self.sampling)

  def as_dict(self) -> dict[str, Any]:
    return dataclasses.asdict(self)


# --------------------------------------------------------------- the pieces


def load_data(config: ExperimentConfig) -> datasets.FederatedData:
  """The run's federated data; nothing is written on failure."""
  cache_dir = config.cache_dir or os.path.join(os.path.expanduser("~"), ".tff")
  if config.data == "tff":
    if config.task == "emnist":
      return datasets.load_emnist(cache_dir)
    return datasets.load_stackoverflow(cache_dir, vocab_path=config.vocab_path)
  num_clients = config.num_clients or default_num_clients(config)
  if config.task == "emnist":
    return datasets.synthetic_emnist(
        num_clients=num_clients, examples_per_client=config.examples_per_client,
        seed=config.seed)
  return datasets.synthetic_stackoverflow(
      num_clients=num_clients, sentences_per_client=config.examples_per_client,
      seed=config.seed)


def default_num_clients(config: ExperimentConfig) -> int:
  """Synthetic population: every client takes part `presentations` times
  (default 1), like the canaries (epochs of num_rounds // presentations
  rounds)."""
  rounds = config.num_rounds if config.num_rounds is not None else 1
  per_epoch = max(1, rounds // (config.presentations or 1))
  return max(2, config.clients_per_round * per_epoch)


def build_task(config: ExperimentConfig, data: datasets.FederatedData):
  builder = (tasks.emnist_task if config.task == "emnist"
             else tasks.stackoverflow_task)
  return builder(data, batch_size=config.batch_size,
                 client_epochs=config.client_epochs)


def _optimizer(name, learning_rate, momentum=None):
  if name == "sgd":
    return tff.learning.optimizers.build_sgdm(learning_rate=learning_rate,
                                              momentum=momentum or None)
  return tff.learning.optimizers.build_adam(learning_rate=learning_rate)


def client_sampler(config: ExperimentConfig,
                   num_clients: int) -> client_sampling.ClientSampler:
  """The run's client sampler (refuses a per-round rate above 1)."""
  return client_sampling.ClientSampler(num_clients, config.clients_per_round,
                                       config.sampling, config.seed)


def canary_schedule(config: ExperimentConfig, num_rounds: int,
                    num_clients: int) -> schedules.Schedule:
  """Canaries take part the way the clients do (METHOD §2; see
  `client_sampling.canary_schedule`)."""
  return client_sampling.canary_schedule(
      client_sampler(config, num_clients), num_rounds, config.presentations,
      allow_mismatch=config.allow_participation_mismatch)


def sample_clients(round_num: int, *, num_clients: int, clients_per_round: int,
                   sampling: str, seed: int) -> np.ndarray:
  """Indices of the clients of `round_num` (`client_sampling.ClientSampler`)."""
  return client_sampling.ClientSampler(num_clients, clients_per_round,
                                       sampling, seed).clients(round_num)


def _canary_measurements(metrics) -> dict:
  return tree_search.find_first(
      metrics, lambda m: isinstance(m, dict) and "canaries_inserted" in m
  ) or {}


def _canary_state(state) -> Any:
  return tree_search.find_first(state.aggregator, lambda s: isinstance(
      s, canary_process.CanaryDPAggregatorState))


def _train_metrics(metrics) -> tuple[float, float]:
  train = tree_search.find_first(metrics.get("client_work", metrics),
                                 lambda m: isinstance(m, dict) and "loss" in m)
  if not train:
    return float("nan"), float("nan")
  accuracy = next((v for k, v in train.items() if "accuracy" in k),
                  float("nan"))
  return float(train["loss"]), float(accuracy)


def _flat_trainable(model_weights) -> np.ndarray:
  return np.concatenate([np.asarray(w, np.float32).ravel()
                         for w in model_weights.trainable])


# --------------------------------------------------------------- the run


@dataclasses.dataclass
class _Progress:
  """Per-round rows of metrics.csv and the ledger's events, up to a round."""

  rows: list[dict[str, Any]]
  events: list[Any]


METRIC_COLUMNS = ("round", "loss", "accuracy", "clip", "canaries_inserted",
                  "clients", "seconds", "eval_loss", "eval_accuracy")


def _write_metrics(path: str, rows: list[dict[str, Any]]) -> None:
  buffer = io.StringIO()
  writer = csv.DictWriter(buffer, fieldnames=METRIC_COLUMNS,
                          extrasaction="ignore", lineterminator="\n")
  writer.writeheader()
  for row in rows:
    writer.writerow({k: ("" if row.get(k) is None else row[k])
                     for k in METRIC_COLUMNS})
  atomic_files.write_text(path, buffer.getvalue())


def resolve(config: ExperimentConfig,
            data: datasets.FederatedData, dim: int) -> dict[str, Any]:
  """config.json: the config with every derived value filled in.

  Refuses, before any training, a per-round rate clients_per_round /
  num_clients above 1 and a `presentations` that contradicts the client
  sampler (unless `allow_participation_mismatch`). `presentations` resolves
  to the clients' whole epochs with shuffle sampling.
  """
  num_clients = len(data.train.client_ids)
  sampler = client_sampler(config, num_clients)
  num_rounds = config.num_rounds
  if num_rounds is None:
    num_rounds = config.epochs * sampler.rounds_per_epoch
  canary_schedule(config, num_rounds, num_clients)  # refuses a mismatch
  presentations = config.presentations
  if presentations is None and config.sampling == "shuffle":
    presentations = sampler.whole_epochs(num_rounds)
  resolved = config.as_dict()
  resolved.update(
      num_clients=num_clients, num_rounds=num_rounds, dim=dim,
      presentations=presentations,
      delta=config.delta if config.delta is not None else num_clients ** -1.1,
      canary_seed=(config.canary_seed if config.canary_seed is not None
                   else config.seed + 1),
      noise_seed=((config.noise_seed if config.noise_seed is not None
                   else config.seed + _NOISE_TAG) if config.seeded_noise
                  else None),
      output_dir=os.path.abspath(config.output_dir),
      versions={"tensorflow": tf.__version__,
                "tensorflow_federated": tff.__version__,
                "tff_canary": __import__("tff_canary").__version__})
  return resolved


def _check_resumable(saved: dict[str, Any], resolved: dict[str, Any],
                     path: str) -> None:
  differ = [k for k in resolved if k not in _RESUMABLE_KEYS
            and k != "versions" and saved.get(k) != resolved[k]]
  if differ:
    details = ", ".join(f"{k}: {saved.get(k)!r} -> {resolved[k]!r}"
                        for k in differ)
    raise ValueError(f"--resume: {path} was started with other settings "
                     f"({details}); use a new --output_dir or the same flags.")


def run_experiment(config: ExperimentConfig, *, progress: bool = True,
                   log=print) -> report_lib.RunReport:
  """Runs (or resumes) one experiment; returns its report (module docstring)."""
  if not isinstance(config, ExperimentConfig):
    raise TypeError(f"config must be an ExperimentConfig, got {config!r}.")
  rd = run_dir_lib.RunDir(config.output_dir)
  started = rd.exists(run_dir_lib.CONFIG)
  if started and not config.resume:
    raise FileExistsError(
        f"{rd.file(run_dir_lib.CONFIG)} exists: pass --resume to finish that "
        "run, or choose another --output_dir.")

  data = load_data(config)  # before anything is written
  task = build_task(config, data)
  dim = tasks.num_parameters(task)
  resolved = resolve(config, data, dim)
  num_rounds, num_clients = resolved["num_rounds"], resolved["num_clients"]

  canaries = canary_config.CanaryConfig(
      seed=resolved["canary_seed"], num_inserted=config.num_inserted,
      num_held_out=config.num_held_out,
      schedule=canary_schedule(config, num_rounds, num_clients),
      assignment=config.assignment, record_aggregates=config.record_aggregates)
  sampler = client_sampler(config, num_clients)
  resolved["participation"] = client_sampling.participation_summary(
      sampler, num_rounds, canaries.counts()[canaries.inserted],
      canaries.schedule, mismatch=client_sampling.participation_mismatch(
          sampler, num_rounds, config.presentations))
  if started:
    _check_resumable(rd.load_config(), resolved, rd.file(run_dir_lib.CONFIG))
  canary_slots = canaries.participation.num_events
  fraction = canary_slots / (config.clients_per_round * num_rounds
                             + canary_slots)
  if fraction > 0.01:
    warnings.warn(
        f"canaries are {fraction:.1%} of the run's participants "
        f"({canary_slots} canary participations, {config.clients_per_round} "
        f"clients x {num_rounds} rounds); the paper keeps them under 1% so "
        "that they barely change training. Use fewer inserted canaries or "
        "more clients or rounds.", CanaryFractionWarning, stacklevel=2)

  aggregator = _aggregator(config, canaries, resolved["noise_seed"])
  process = tff.learning.algorithms.build_unweighted_fed_avg(
      task.model_fn,
      client_optimizer_fn=_optimizer(config.client_optimizer,
                                     config.client_learning_rate),
      server_optimizer_fn=_optimizer(config.server_optimizer,
                                     config.server_learning_rate,
                                     config.server_momentum),
      model_aggregator=aggregator)

  os.makedirs(rd.path, exist_ok=True)
  if not started:
    rd.save_config(resolved)
  else:
    _remove_leftovers(rd)
  atomic_files.save_npz(rd.file(run_dir_lib.PARTICIPATION),
                        events=canaries.participation.events,
                        client_counts=sampler.counts(num_rounds))
  if not rd.exists(run_dir_lib.NOISE_CHECK):
    _noise_check(config, resolved, task, rd, log)
  manager = tff.program.FileProgramStateManager(
      rd.file(run_dir_lib.CHECKPOINTS), keep_total=2)
  state, done = _initial_or_resumed(process, manager, task, config, rd)
  progress_state = _load_progress(rd, done)
  aggregates_path = rd.file(run_dir_lib.AGGREGATES)
  if not config.record_aggregates:
    recorder = None
  elif done and os.path.exists(aggregates_path):
    recorder = aggregate_recorder.AggregateRecorder.open(aggregates_path)
  else:  # a fresh start; a file here is from a run killed before round 1
    recorder = aggregate_recorder.AggregateRecorder(
        aggregates_path, dim, num_rounds, overwrite=True)

  if done < num_rounds:
    log(f"{'resuming' if done else 'training'} {config.task} "
        f"({data.source} data, {num_clients} clients, d={dim}) in {rd.path}"
        + (f" from round {done}" if done else ""))
    state = _train(process, state, task, config, resolved, rd, manager,
                   recorder, progress_state, done, progress)
  if recorder is not None:
    recorder.close()

  final_weights = process.get_model_weights(state)
  atomic_files.save_npy(rd.file(run_dir_lib.FINAL_WEIGHTS),
                        _flat_trainable(final_weights))
  log("computing the canary cosines ...")
  initial = np.load(rd.file(run_dir_lib.INITIAL_WEIGHTS))
  table = cosine_pass.compute_cosine_table(
      canaries, initial, _flat_trainable(final_weights),
      aggregates_path if config.record_aggregates else None,
      memory_budget_bytes=int(config.memory_budget_gb * 1024 ** 3),
      progress=progress, state=state)
  table.save_npz(rd.file(run_dir_lib.COSINES_NPZ))
  table.save_csv(rd.file(run_dir_lib.COSINES_CSV))
  report = report_lib.build_report(rd.path)
  report_lib.write_report(report)
  return report


def _remove_leftovers(rd) -> None:
  """Temporary files of writes a killed run did not finish (never results)."""
  import shutil  # pylint: disable=g-import-not-at-top
  for directory in (rd.path, rd.file(run_dir_lib.PLOTS),
                    rd.file(run_dir_lib.CHECKPOINTS)):
    if not os.path.isdir(directory):
      continue
    for name in os.listdir(directory):
      path = os.path.join(directory, name)
      if name.startswith(".tmp-") and os.path.isfile(path):
        os.remove(path)
      elif "_temp" in name and os.path.isdir(path):  # TFF's checkpoint writes
        shutil.rmtree(path)


def _aggregator(config, canaries, noise_seed):
  if config.clip is not None:
    aggregator = factory.CanaryDPFactory.gaussian_fixed(
        config.noise_multiplier, config.clients_per_round, config.clip,
        canaries=canaries, noise_seed=noise_seed)
  else:
    aggregator = factory.CanaryDPFactory.gaussian_adaptive(
        config.noise_multiplier, config.clients_per_round,
        initial_l2_norm_clip=config.initial_clip,
        target_unclipped_quantile=config.target_unclipped_quantile,
        canaries=canaries, noise_seed=noise_seed)
  return factory.with_zeroing(aggregator) if config.zeroing else aggregator


def _noise_check(config, resolved, task, rd, log) -> None:
  """noise_check.json: the run's aggregator, built afresh without canaries,
  on zero client values (`tff_canary.federated.noise_check`), before training.

  With seeded noise the check draws from its own seed (noise_seed + a tag),
  so the file holds statistics of the same noise code path, never of the
  run's own draws.
  """
  no_canaries = canary_config.CanaryConfig(
      seed=resolved["canary_seed"], num_inserted=0, num_held_out=0,
      schedule=schedules.FixedPresentations(
          num_rounds=noise_check.DEFAULT_ROUNDS, presentations=0),
      record_aggregates=False)
  noise_seed = resolved["noise_seed"]
  aggregator = _aggregator(config, no_canaries, None if noise_seed is None
                           else noise_seed + _NOISE_CHECK_TAG)
  value_type = tff.learning.models.weights_type_from_model(
      task.model_fn).trainable
  names = [w.name.split(":")[0]
           for w in task.keras_model_fn().trainable_weights]
  if len(set(names)) != len(names) or len(names) != len(value_type):
    names = None
  result = noise_check.check_aggregation_noise(aggregator, value_type,
                                               tensor_names=names)
  atomic_files.write_json(rd.file(run_dir_lib.NOISE_CHECK), result.as_dict())
  log(str(result))


def _initial_or_resumed(process, manager, task, config, rd):
  """(state, rounds done): the latest checkpoint, or a fresh seeded start."""
  initial = process.initialize()
  versions = asyncio.run(manager.get_versions())
  if versions:
    state, version = asyncio.run(manager.load_latest(initial))
    return state, int(version)
  weights = process.get_model_weights(initial)
  trainable = task.initial_weights(config.seed)
  weights = tff.learning.models.ModelWeights(
      trainable=trainable, non_trainable=list(weights.non_trainable))
  state = process.set_model_weights(initial, weights)
  atomic_files.save_npy(rd.file(run_dir_lib.INITIAL_WEIGHTS),
                        _flat_trainable(weights))
  return state, 0


def _load_progress(rd, done) -> _Progress:
  rows, events = [], []
  if done and rd.exists(run_dir_lib.METRICS):
    rows = [r for r in rd.load_metrics() if r["round"] < done]
  if done and rd.exists(run_dir_lib.LEDGER):
    events = list(rd.load_ledger().events)[:done]
  if len(rows) != done or len(events) != done:
    raise run_dir_lib.RunDirError(
        f"{rd.path}: the checkpoint is at round {done} but metrics.csv has "
        f"{len(rows)} and ledger.json {len(events)} rounds before it; the "
        "run directory was changed by hand.")
  return _Progress(rows=rows, events=events)


def _evaluate(keras_model, test_data, model_weights) -> tuple[float, float]:
  model_weights.assign_weights_to(keras_model)
  loss, accuracy = keras_model.evaluate(test_data, verbose=0)
  return float(loss), float(accuracy)


def _train(process, state, task, config, resolved, rd, manager, recorder,
           progress_state, done, progress):
  num_rounds = resolved["num_rounds"]
  client_ids = task.baseline.datasets.train_data.client_ids
  keras_model = task.keras_model_fn()
  test_data = task.test_dataset(config.eval_examples)
  bar = None
  if progress:
    from tqdm.auto import tqdm  # pylint: disable=g-import-not-at-top
    bar = tqdm(total=num_rounds, initial=done, desc=config.task, unit="round",
               file=sys.stderr, dynamic_ncols=True)
  rows, events = progress_state.rows, progress_state.events
  sampler = client_sampler(config, resolved["num_clients"])
  try:
    for round_num in range(done, num_rounds):
      start = time.perf_counter()
      chosen = sampler.clients(round_num)
      client_data = [task.preprocessed_client(client_ids[i]) for i in chosen]
      output = process.next(state, client_data)
      state = output.state
      if recorder is not None:
        recorder.record(output.metrics)
      canary = _canary_measurements(output.metrics.get("aggregator", {}))
      loss, accuracy = _train_metrics(output.metrics)
      events.append(tff.aggregators.differential_privacy.
                    extract_dp_event_from_state(_canary_state(state)))
      row = dict(round=round_num, loss=loss, accuracy=accuracy,
                 clip=float(canary.get("clip", float("nan"))),
                 canaries_inserted=int(canary.get("canaries_inserted", 0)),
                 clients=len(chosen),
                 seconds=round(time.perf_counter() - start, 3))
      last = round_num + 1 == num_rounds
      if config.eval_every and ((round_num + 1) % config.eval_every == 0
                                or last):
        row["eval_loss"], row["eval_accuracy"] = _evaluate(
            keras_model, test_data, process.get_model_weights(state))
      rows.append(row)
      if (round_num + 1) % config.checkpoint_every == 0 or last:
        _checkpoint(rd, manager, state, round_num + 1, rows, events, recorder)
      if bar is not None:
        postfix = dict(loss=f"{loss:.3f}", acc=f"{accuracy:.3f}",
                       clip=f"{row['clip']:.3g}",
                       canaries=row["canaries_inserted"])
        if row.get("eval_accuracy") is not None:
          postfix["eval_acc"] = f"{row['eval_accuracy']:.3f}"
        bar.set_postfix(postfix, refresh=False)
        bar.update(1)
  finally:
    if bar is not None:
      bar.close()
  return state


def _checkpoint(rd, manager, state, version, rows, events, recorder):
  """Round files first, then the state: a checkpoint never outruns them.

  (The recorder flushes every aggregate as it is written.)
  """
  _write_metrics(rd.file(run_dir_lib.METRICS), rows)
  atomic_files.write_text(rd.file(run_dir_lib.LEDGER),
                          ledger.Ledger(events).to_json())
  asyncio.run(manager.save(state, version))
