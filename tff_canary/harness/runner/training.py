"""An experiment's training rounds, with evaluation, checkpoints and progress.

`train(run, state, history)` runs rounds len(history.rows)..num_rounds-1 of
a run (`Run`: what `experiment.run_experiment` built): each round the
sampler's clients (`client_sampling.ClientSampler`, a function of seed and
round), the round itself (`Run.rounds`: `ServerRounds`, or with
`insertion="clients"` `client_insertion.ClientRounds`; a `RoundResult`), a
row of metrics.csv (with the evaluation every `eval_every` rounds and after
the last), and a checkpoint every `checkpoint_every` rounds and after the
last. A progress bar on stderr shows the round, loss, accuracy, clip norm
and canaries inserted.
"""

from __future__ import annotations

import asyncio
import dataclasses
import sys
import time
from typing import Any, NamedTuple, Optional

import numpy as np

from tff_canary.federated.scores import aggregate_recorder
from tff_canary.harness.config import experiment_config
from tff_canary.harness.recording import run_dir as run_dir_lib
from tff_canary.harness.runner import resume
from tff_canary.harness.writing import round_metrics
from tff_canary.harness.data import tasks
from tff_canary.mechanisms import protocol_tff


class RoundResult(NamedTuple):
  """What a round gives `train`.

  Attributes:
    output: The process's round output.
    clip: C_r, the clip of the round.
    inserted: The canaries inserted in the round.
    event: Its DpEvent; None for a mechanism without a ledger
      (`Mechanism.records_ledger` false).
    tree_scores: DP-FTRL: every candidate's u_{j,r}, float64 [m]; else None.
  """
  output: Any
  clip: float
  inserted: int
  event: Any
  tree_scores: Optional[np.ndarray]


class ServerRounds:
  """Rounds with server-side canaries: the process's `next`; the clip and
  the canaries inserted from the canary aggregator's measurements, what the
  round records from the mechanism (`TffMechanism.server_round`)."""

  def __init__(self, mechanism: protocol_tff.TffMechanism):
    self.mechanism = mechanism

  def round(self, process, state, round_num: int, client_data: list,
            recorder) -> RoundResult:
    del round_num  # the canary aggregator counts its rounds
    output = process.next(state, client_data)
    if recorder is not None:
      recorder.record(output.metrics)
    canary = round_metrics.canary_measurements(
        output.metrics.get("aggregator", {})) or {}
    event, scores = self.mechanism.server_round(output, canary)
    return RoundResult(output, float(canary.get("clip", float("nan"))),
                       int(canary.get("canaries_inserted", 0)), event, scores)

  def save(self, rd: run_dir_lib.RunDir) -> None:
    """Nothing beyond the round files (client mode saves its outcomes)."""


@dataclasses.dataclass(frozen=True)
class Run:
  """What a run's rounds are made of (`experiment.run_experiment` builds it).

  Attributes:
    resolved: The config's resolved values, client sampler and canary
      schedule.
    task: The task (its clients and its Keras twin for evaluation).
    rounds: `ServerRounds` or `client_insertion.ClientRounds`.
    recorder: The recorder of the rounds' aggregates, or None.
    manager: The program state manager of its checkpoints.
  """

  config: experiment_config.ExperimentConfig
  resolved: experiment_config.Resolved
  task: tasks.Task
  process: Any
  rounds: Any
  recorder: Optional[aggregate_recorder.AggregateRecorder]
  rd: run_dir_lib.RunDir
  manager: Any


def _evaluate(keras_model, test_data, model_weights) -> tuple[float, float]:
  model_weights.assign_weights_to(keras_model)
  loss, accuracy = keras_model.evaluate(test_data, verbose=0)
  return float(loss), float(accuracy)


def train(run: Run, state, history: resume.History, progress: bool = True):
  """The state after the run's last round (module docstring)."""
  config, num_rounds = run.config, run.resolved.num_rounds
  done = len(history.rows)
  client_ids = run.task.baseline.datasets.train_data.client_ids
  keras_model = run.task.keras_model_fn()
  test_data = run.task.test_dataset(config.eval_examples)
  from tqdm.auto import tqdm  # pylint: disable=g-import-not-at-top
  bar = tqdm(total=num_rounds, initial=done, desc=config.task, unit="round",
             file=sys.stderr, dynamic_ncols=True, disable=not progress)
  try:
    for round_num in range(done, num_rounds):
      start = time.perf_counter()
      chosen = run.resolved.sampler.clients(round_num)
      client_data = [run.task.preprocessed_client(client_ids[i])
                     for i in chosen]
      result = run.rounds.round(run.process, state, round_num, client_data,
                                run.recorder)
      state = result.output.state
      loss, accuracy = round_metrics.train_loss_accuracy(result.output.metrics)
      row = dict(round=round_num, loss=loss, accuracy=accuracy,
                 clip=result.clip, canaries_inserted=result.inserted,
                 clients=len(chosen),
                 seconds=round(time.perf_counter() - start, 3))
      last = round_num + 1 == num_rounds
      if config.eval_every and ((round_num + 1) % config.eval_every == 0
                                or last):
        row["eval_loss"], row["eval_accuracy"] = _evaluate(
            keras_model, test_data, run.process.get_model_weights(state))
      history.add(row, result.event, result.tree_scores)
      if (round_num + 1) % config.checkpoint_every == 0 or last:
        _checkpoint(run, state, round_num + 1, history)
      postfix = dict(loss=f"{loss:.3f}", acc=f"{accuracy:.3f}",
                     clip=f"{row['clip']:.3g}",
                     canaries=row["canaries_inserted"])
      if row.get("eval_accuracy") is not None:
        postfix["eval_acc"] = f"{row['eval_accuracy']:.3f}"
      bar.set_postfix(postfix, refresh=False)
      bar.update(1)
  finally:
    bar.close()
  return state


def _checkpoint(run: Run, state, version: int, history: resume.History):
  """Round files first, then the state: a checkpoint never outruns them
  (the recorder flushes every aggregate as it is written)."""
  run.rounds.save(run.rd)
  history.save(run.rd)
  asyncio.run(run.manager.save(state, version))
