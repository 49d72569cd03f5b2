"""An experiment's training rounds, with evaluation, checkpoints and progress.

`train` runs rounds `done`..num_rounds-1 of a run: each round the sampler's
clients (`client_sampling.ClientSampler`, a function of seed and round), the
process's `next`, the noised aggregate recorded (gaussian canaries,
`aggregate_recorder.AggregateRecorder`), what the round records for the run's mechanism
(`mechanism_tff.TffMechanism.server_round`: its DpEvent for the ledger, or
its canaries' scores), a row of metrics.csv
(loss, accuracy, clip norm, canaries inserted, clients, seconds, and the
evaluation every `eval_every` rounds and after the last), and a checkpoint
every `checkpoint_every` rounds and after the last. A progress bar on stderr
shows the round, loss, accuracy, clip norm and canaries inserted.

With `clients` (a `client_insertion.ClientRounds`, `insertion="clients"`)
the round, its aggregate, clip, canaries and DpEvent are the client mode's
(`client_insertion`), and its canary outcomes are saved with each
checkpoint. A mechanism without a per-round DpEvent (the DDP aggregator:
TFF's DDP queries emit none; DP-FTRL: its privacy is per tree) writes no
ledger.json; the canary scores of a mechanism scored per round (DP-FTRL's
`TREE_SCORES_KEY`) are saved to tree_scores.npy with each checkpoint.
"""

from __future__ import annotations

import asyncio
import sys
import time
from typing import Optional


from tff_canary.federated.scores import aggregate_recorder
from tff_canary.harness.running import client_insertion
from tff_canary.harness.running import mechanism_tff
from tff_canary.harness.config import experiment_config
from tff_canary.harness.running import resume
from tff_canary.harness.running import round_metrics
from tff_canary.harness.recording import run_dir as run_dir_lib
from tff_canary.harness.running import tasks


def _evaluate(keras_model, test_data, model_weights) -> tuple[float, float]:
  model_weights.assign_weights_to(keras_model)
  loss, accuracy = keras_model.evaluate(test_data, verbose=0)
  return float(loss), float(accuracy)


def train(process, state, *, task: tasks.Task,
          config: experiment_config.ExperimentConfig,
          resolved: experiment_config.Resolved, rd: run_dir_lib.RunDir,
          manager,
          recorder: Optional[aggregate_recorder.AggregateRecorder],
          history: resume.History, done: int, progress: bool,
          clients: Optional[client_insertion.ClientRounds] = None):
  """The state after the run's last round (module docstring)."""
  num_rounds = resolved.num_rounds
  client_ids = task.baseline.datasets.train_data.client_ids
  keras_model = task.keras_model_fn()
  test_data = task.test_dataset(config.eval_examples)
  bar = None
  if progress:
    from tqdm.auto import tqdm  # pylint: disable=g-import-not-at-top
    bar = tqdm(total=num_rounds, initial=done, desc=config.task, unit="round",
               file=sys.stderr, dynamic_ncols=True)
  rows, events = history.rows, history.events
  mechanism = mechanism_tff.of(config)
  try:
    for round_num in range(done, num_rounds):
      start = time.perf_counter()
      chosen = resolved.sampler.clients(round_num)
      client_data = [task.preprocessed_client(client_ids[i]) for i in chosen]
      if clients is None:
        output = process.next(state, client_data)
        if recorder is not None:
          recorder.record(output.metrics)
        canary = round_metrics.canary_measurements(
            output.metrics.get("aggregator", {})) or {}
        clip = float(canary.get("clip", float("nan")))
        inserted = int(canary.get("canaries_inserted", 0))
        event, scores = mechanism.server_round(output, canary)
      else:
        output, clip, inserted, event, scores = clients.round(
            process, state, round_num, client_data, recorder)
      if scores is not None:  # a mechanism scored per round (DP-FTRL)
        history.tree_scores.append(scores)
      state = output.state
      loss, accuracy = round_metrics.train_loss_accuracy(output.metrics)
      if event is not None:  # None: DDP and DP-FTRL (module docstring)
        events.append(event)
      row = dict(round=round_num, loss=loss, accuracy=accuracy, clip=clip,
                 canaries_inserted=inserted, clients=len(chosen),
                 seconds=round(time.perf_counter() - start, 3))
      last = round_num + 1 == num_rounds
      if config.eval_every and ((round_num + 1) % config.eval_every == 0
                                or last):
        row["eval_loss"], row["eval_accuracy"] = _evaluate(
            keras_model, test_data, process.get_model_weights(state))
      rows.append(row)
      if (round_num + 1) % config.checkpoint_every == 0 or last:
        if clients is not None:
          clients.save(rd)
        _checkpoint(rd, manager, state, round_num + 1, history)
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


def _checkpoint(rd, manager, state, version, history: resume.History):
  """Round files first, then the state: a checkpoint never outruns them.

  (The recorder flushes every aggregate as it is written.)
  """
  rd.save_metrics(history.rows)
  if history.events:  # none with the DDP aggregator and DP-FTRL
    rd.save_ledger(history.events)
  if history.tree_scores:
    rd.save_tree_scores(history.tree_scores)
  asyncio.run(manager.save(state, version))
