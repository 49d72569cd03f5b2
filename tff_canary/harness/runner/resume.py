"""Where a run starts: a fresh seeded state, or what a killed run left behind.

A run directory is resumable at its last checkpoint (TFF's
`FileProgramStateManager`, which writes then renames): `start_state` loads it,
or builds the seeded initial state and writes initial_weights.npy;
`load_history` reads metrics.csv's rows and ledger.json's events up to the
checkpoint's round (the rounds after it are redone); `remove_leftovers`
deletes the temporary files of writes a killed run did not finish. Every
other file is written atomically, so a kill loses only the rounds since the
last checkpoint.
"""

from __future__ import annotations

import asyncio
import dataclasses
import os
import shutil
from typing import Any, Optional

import tensorflow_federated as tff

from tff_canary.harness.recording import run_dir as run_dir_lib
from tff_canary.harness.writing import round_metrics
from tff_canary.harness.data import tasks
from tff_canary.stats import atomic_files


@dataclasses.dataclass
class History:
  """Per-round rows of metrics.csv, the ledger's events and (DP-FTRL) the
  canaries' tree scores, up to a round."""

  rows: list[dict[str, Any]]
  events: list[Any]
  tree_scores: list[Any] = dataclasses.field(default_factory=list)

  def add(self, row: dict[str, Any], event: Any, scores: Any) -> None:
    """A round's row, its DpEvent and its canaries' scores (None: the
    mechanism records none, `training.RoundResult`)."""
    self.rows.append(row)
    if event is not None:
      self.events.append(event)
    if scores is not None:
      self.tree_scores.append(scores)

  def save(self, rd: run_dir_lib.RunDir) -> None:
    """metrics.csv, and ledger.json and tree_scores.npy when recorded."""
    rd.save_metrics(self.rows)
    if self.events:
      rd.save_ledger(self.events)
    if self.tree_scores:
      rd.save_tree_scores(self.tree_scores)


def remove_leftovers(rd: run_dir_lib.RunDir) -> None:
  """Temporary files of writes a killed run did not finish (never results)."""
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


def start_state(process, manager, task: tasks.Task, seed: int,
                rd: run_dir_lib.RunDir):
  """(state, rounds done): the latest checkpoint, or a fresh seeded start
  (whose trainable weights go to initial_weights.npy)."""
  initial = process.initialize()
  versions = asyncio.run(manager.get_versions())
  if versions:
    state, version = asyncio.run(manager.load_latest(initial))
    return state, int(version)
  weights = process.get_model_weights(initial)
  trainable = task.initial_weights(seed)
  weights = tff.learning.models.ModelWeights(
      trainable=trainable, non_trainable=list(weights.non_trainable))
  state = process.set_model_weights(initial, weights)
  atomic_files.save_npy(rd.file(run_dir_lib.INITIAL_WEIGHTS),
                        round_metrics.flat_trainable(weights, finite=False))
  return state, 0


def load_history(rd: run_dir_lib.RunDir, done: int, *,
                 ledger: bool = True,
                 tree_candidates: Optional[int] = None) -> History:
  """The rows and events of the `done` rounds before the checkpoint
  (`ledger=False`: a run without DpEvents, the DDP aggregator's and
  DP-FTRL's, whose events stay empty), and with `tree_candidates` (DP-FTRL)
  the rows of tree_scores.npy."""
  rows, events, scores = [], [], []
  if done and rd.exists(run_dir_lib.METRICS):
    rows = [r for r in rd.load_metrics() if r["round"] < done]
  if done and ledger and rd.exists(run_dir_lib.LEDGER):
    events = list(rd.load_ledger().events)[:done]
  if done and tree_candidates is not None and rd.exists(
      run_dir_lib.TREE_SCORES):
    scores = list(rd.load_tree_scores(tree_candidates)[:done])
  counts = {"metrics.csv": len(rows)}
  if ledger:
    counts["ledger.json"] = len(events)
  if tree_candidates is not None:
    counts[run_dir_lib.TREE_SCORES] = len(scores)
  short = {name: n for name, n in counts.items() if n != done}
  if short:
    raise run_dir_lib.RunDirError(
        f"{rd.path}: the checkpoint is at round {done} but "
        + " and ".join(f"{name} has {n}" for name, n in short.items())
        + " rounds before it; the run directory was changed by hand.")
  return History(rows=rows, events=events, tree_scores=scores)
