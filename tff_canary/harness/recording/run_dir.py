"""The files of a run directory, and their validated loading (NumPy only).

What a run directory holds, file by file: docs/guide/report.md, "The run
directory". Loading checks what it reads and names the file in every
error: a missing file, a corrupt one, or one that disagrees with
config.json (a cosine table whose dim or seed differs from the config's).
"""

from __future__ import annotations

import csv
import io
import os
import pathlib
from typing import Any

import numpy as np

from tff_canary.mechanisms import records as records_lib
from tff_canary.stats import atomic_files
from tff_canary.stats.accounting import ledger
from tff_canary.stats.canaries.cosine_table import CosineTable

CONFIG = "config.json"
METRICS = "metrics.csv"
LEDGER = "ledger.json"
PARTICIPATION = "participation.npz"
COSINES_CSV = "cosines.csv"
COSINES_NPZ = "cosines.npz"
REPORT_JSON = "report.json"
REPORT_MD = "report.md"
PLOTS = "plots"
AGGREGATES = "aggregates.npy"
INITIAL_WEIGHTS = "initial_weights.npy"
FINAL_WEIGHTS = "final_weights.npy"
CHECKPOINTS = "checkpoints"
NOISE_CHECK = "noise_check.json"
CANARY_OUTCOMES = "canary_outcomes.json"
TREE_SCORES = "tree_scores.npy"

# Columns of metrics.csv, in order.
METRIC_COLUMNS = ("round", "loss", "accuracy", "clip", "canaries_inserted",
                  "clients", "seconds", "eval_loss", "eval_accuracy")

# Keys config.json must have for the report.
REQUIRED_CONFIG = ("task", "seed", "canary_seed", "dim", "noise_multiplier",
                   "clients_per_round", "num_rounds", "num_inserted",
                   "num_held_out", "sampling", "num_clients", "delta")


# A run directory's error is its records' (`records.RunDirError`): one class
# for a file missing or corrupt and for records that cannot be read together.
RunDirError = records_lib.RunDirError


class RunDir:
  """Paths and validated readers of one run directory."""

  def __init__(self, path: str | os.PathLike):
    if not isinstance(path, (str, os.PathLike)):
      raise TypeError(f"run_dir must be a path, got {path!r}.")
    self.path = os.path.abspath(os.fspath(path))

  def file(self, name: str) -> str:
    return os.path.join(self.path, name)

  def exists(self, name: str) -> bool:
    return os.path.exists(self.file(name))

  def _require(self, name: str) -> str:
    if not os.path.isdir(self.path):
      raise RunDirError(f"run directory {self.path} does not exist.")
    path = self.file(name)
    if not os.path.isfile(path):
      raise RunDirError(f"{path} is missing: is {self.path} a finished "
                        "tff-canary run? (Run the experiment with --resume to "
                        "finish an interrupted one.)")
    return path

  @staticmethod
  def _read(path: str, read, what: str, errors=Exception) -> Any:
    """`read(path)`; a RunDirError "`path` is not `what`" on `errors`."""
    try:
      return read(path)
    except errors as e:  # pylint: disable=broad-except
      raise RunDirError(f"{path} is not {what}: {e}") from None

  def _json(self, path: str) -> Any:
    # strict JSON, non-finite floats as strings (`atomic_files`)
    return self._read(path, atomic_files.read_json, "valid JSON",
                      (ValueError, UnicodeDecodeError))

  def load_report(self) -> dict[str, Any]:
    """report.json as the report wrote it (`RunReport.as_dict`), its
    infinite and NaN numbers restored from their strings."""
    path = self._require(REPORT_JSON)
    report = self._json(path)
    if not isinstance(report, dict):
      raise RunDirError(f"{path} is not a report (not a JSON object).")
    return report

  # Config ------------------------------------------------------------------
  def load_noise_check(self) -> dict[str, Any] | None:
    """noise_check.json as the experiment wrote it (None if the run has
    none); RunDirError if it is corrupt."""
    if not self.exists(NOISE_CHECK):
      return None
    path = self.file(NOISE_CHECK)
    data = self._json(path)
    if not isinstance(data, dict) or not isinstance(data.get("passed"), bool):
      raise RunDirError(f"{path} is not a noise check result (no boolean "
                        "'passed').")
    return data

  def load_config(self) -> dict[str, Any]:
    path = self._require(CONFIG)
    config = self._json(path)
    if not isinstance(config, dict):
      raise RunDirError(f"{path} must hold a JSON object, got "
                        f"{type(config).__name__}.")
    missing = [k for k in REQUIRED_CONFIG if k not in config]
    if missing:
      raise RunDirError(f"{path} lacks the keys {missing}.")
    return config

  def save_config(self, config: dict[str, Any]) -> None:
    atomic_files.write_json(self.file(CONFIG), config)

  # Cosine table ------------------------------------------------------------
  def load_table(self, config: dict[str, Any] | None = None) -> CosineTable:
    """The cosine table (NPZ preferred, else CSV), checked against config."""
    name = COSINES_NPZ if self.exists(COSINES_NPZ) else COSINES_CSV
    path = self._require(name)
    config = self.load_config() if config is None else config
    try:
      table = CosineTable.load(path)
    except ValueError as e:  # it names the path: "<path> is not a valid ..."
      raise RunDirError(str(e)) from None
    except OSError as e:
      raise RunDirError(f"{path} cannot be read: {e.strerror or e}.") from None
    for table_key, key in (("dim", "dim"), ("seed", "canary_seed")):
      if int(config[key]) != getattr(table, table_key):
        raise RunDirError(
            f"{path} has {table_key}={getattr(table, table_key)} but "
            f"{self.file(CONFIG)} says {key}={config[key]}: the table is not "
            "from this run.")
    return table

  # Ledger ------------------------------------------------------------------
  def load_ledger(self) -> ledger.Ledger:
    return self._read(
        self._require(LEDGER),
        lambda p: ledger.Ledger.from_json(pathlib.Path(p).read_text("utf-8")),
        "a valid DpEvent ledger", (ValueError, TypeError, KeyError))

  def save_ledger(self, events) -> None:
    """ledger.json from the run's DpEvents, one per round."""
    atomic_files.write_text(self.file(LEDGER),
                            ledger.Ledger(events).to_json())

  # DP-FTRL scores ------------------------------------------------------------
  def save_tree_scores(self, rows: list[np.ndarray]) -> None:
    """tree_scores.npy: one row of candidate scores per round."""
    atomic_files.save_npy(self.file(TREE_SCORES),
                          np.asarray(rows, dtype=np.float64))

  def load_tree_scores(self, num_candidates: int) -> np.ndarray:
    """float64 [rounds, num_candidates] of tree_scores.npy, checked."""
    path = self._require(TREE_SCORES)
    scores = self._read(path, np.load, "a valid .npy file")
    if scores.ndim != 2 or scores.shape[1] != num_candidates:
      raise RunDirError(f"{path}: scores must have shape [rounds, "
                        f"{num_candidates}] (the config's candidates), got "
                        f"{scores.shape}.")
    if not np.isfinite(scores).all():
      raise RunDirError(f"{path} holds non-finite scores.")
    return scores.astype(np.float64)

  # Participation -----------------------------------------------------------
  def load_participation(self) -> np.ndarray:
    """int [n, 2] (round, canary id) events of the inserted canaries."""
    path = self._require(PARTICIPATION)
    events = self._read(path, lambda p: np.load(p)["events"],
                        "a valid participation file")
    if events.ndim != 2 or events.shape[1] != 2:
      raise RunDirError(f"{path}: events must have shape [n, 2], got "
                        f"{events.shape}.")
    return events.astype(np.int64)

  # Metrics -----------------------------------------------------------------
  def save_metrics(self, rows: list[dict[str, Any]]) -> None:
    """metrics.csv: `METRIC_COLUMNS` of every row, None as an empty cell."""
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=METRIC_COLUMNS,
                            extrasaction="ignore", lineterminator="\n")
    writer.writeheader()
    for row in rows:
      writer.writerow({k: ("" if row.get(k) is None else row[k])
                       for k in METRIC_COLUMNS})
    atomic_files.write_text(self.file(METRICS), buffer.getvalue())

  def final_evaluation(self) -> tuple[float | None, float | None]:
    """(accuracy, loss) of metrics.csv's last evaluated round, or (None,
    None) without metrics.csv or an evaluation."""
    if not self.exists(METRICS):
      return None, None
    evaluated = [r for r in self.load_metrics()
                 if r.get("eval_accuracy") is not None]
    if not evaluated:
      return None, None
    return evaluated[-1]["eval_accuracy"], evaluated[-1]["eval_loss"]

  def load_metrics(self) -> list[dict[str, Any]]:
    """metrics.csv as a list of rows (numbers parsed; empty cells None).

    Integer cells ("round", "clients", ...) parse as int, the others as float,
    so that rows written back with `str` keep their exact text.
    """
    path = self._require(METRICS)
    with open(path, newline="", encoding="utf-8") as f:
      return [{key: _cell(value) for key, value in row.items()}
              for row in csv.DictReader(f)]


def _cell(value: str | None) -> Any:
  """A metrics.csv cell: None if empty, else an int, a float or the text."""
  if value in ("", None):
    return None
  for parse in (int, float):
    try:
      return parse(value)
    except ValueError:
      pass
  return value
