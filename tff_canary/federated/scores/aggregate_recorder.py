"""Each round's noised aggregate, written to disk during training.

The training-side half of `tff_canary.federated.scores.cosine_pass` (its
module docstring): `AggregateRecorder.record(output.metrics)` pops the
round's `noised_aggregate` (a flat float32 vector of d floats) out of the
metrics and writes it to a memory-mapped .npy file, row = round. It reads
the measurements the canary aggregation process names (`AGGREGATE_KEY`,
`ROUND_KEY`), hence its place in the federated layer; it imports no
TensorFlow (tests/project/test_package.py checks it), so `load_aggregates` reads a
finished run's aggregates without it.
"""

from __future__ import annotations

import json
import os
from typing import Any, Mapping

import numpy as np

from tff_canary.federated.insertion import measurement_keys
from tff_canary.stats import atomic_files
from tff_canary.stats import validation

# The measurement names (`measurement_keys`), re-exported for the recorder's users.
AGGREGATE_KEY = measurement_keys.AGGREGATE_KEY
ROUND_KEY = measurement_keys.ROUND_KEY
_DTYPES = ("float16", "float32", "float64")


def _find_aggregate_dicts(metrics: Any, path: str = "metrics"
                         ) -> list[tuple[str, Any]]:
  found = []
  if isinstance(metrics, Mapping):
    if AGGREGATE_KEY in metrics:
      found.append((path, metrics))
    for key, value in metrics.items():
      if key != AGGREGATE_KEY:
        found.extend(_find_aggregate_dicts(value, f"{path}[{key!r}]"))
  elif isinstance(metrics, (list, tuple)):
    for i, value in enumerate(metrics):
      found.extend(_find_aggregate_dicts(value, f"{path}[{i}]"))
  return found


def pop_aggregate(metrics: Any) -> tuple[int, Any]:
  """(round_num, noised_aggregate) of a round's metrics; removes the
  aggregate.

  Raises:
    ValueError: if there is no `noised_aggregate` (a `CanaryConfig` with
      `record_aggregates=False`, or orthogonal canaries?) or more than one,
      or no `round_num` beside it.
  """
  found = _find_aggregate_dicts(metrics)
  if not found:
    raise ValueError(f"metrics has no {AGGREGATE_KEY!r}: build the "
                     "CanaryConfig with directions='gaussian' and "
                     "record_aggregates=True (the default for gaussian "
                     "canaries) and pass the round's output.metrics.")
  if len(found) > 1:
    raise ValueError(f"metrics has {len(found)} {AGGREGATE_KEY!r} entries "
                     f"(at {[p for p, _ in found]}); record one factory's "
                     "measurements at a time.")
  where, holder = found[0]
  if ROUND_KEY not in holder:
    raise ValueError(f"{where} has {AGGREGATE_KEY!r} but no {ROUND_KEY!r}.")
  round_num = validation.as_int(np.asarray(holder[ROUND_KEY]).item(),
                                ROUND_KEY, minimum=0)
  return round_num, holder.pop(AGGREGATE_KEY)


class AggregateRecorder:
  """Writes each round's noised aggregate to a memory-mapped .npy file.

  The file `path` is a .npy array of shape [num_rounds, dim] (row r = round
  r's aggregate a_r); `path + ".rounds.json"` lists the rounds written so far
  (updated atomically after each row is flushed, so it never claims a row
  that is not on disk). Open a new file with the constructor and reopen an
  existing one (to resume a run) with `AggregateRecorder.open(path)`.
  """

  def __init__(self, path: str | os.PathLike, dim: int, num_rounds: int,
               dtype: Any = np.float32, *, overwrite: bool = False):
    """Creates the file.

    Args:
      path: The .npy file to create.
      dim: d, the length of each aggregate.
      num_rounds: Rows of the file (rounds 0..num_rounds-1 can be recorded).
      dtype: float32 (default), float16 (half the disk, relative rounding
        5e-4 per entry) or float64.
      overwrite: Whether an existing file may be replaced.

    Raises:
      FileExistsError: if `path` exists and not `overwrite`.
    """
    path = os.fspath(path)
    dim = validation.as_dim(dim)
    num_rounds = validation.as_int(num_rounds, "num_rounds", minimum=1)
    dtype = np.dtype(dtype)
    if dtype.name not in _DTYPES:
      raise ValueError(f"dtype must be one of {_DTYPES}, got {dtype.name}.")
    validation.as_bool(overwrite, "overwrite")
    if os.path.exists(path) and not overwrite:
      raise FileExistsError(f"{path} exists; reopen it with "
                            "AggregateRecorder.open(path) to resume, or pass "
                            "overwrite=True.")
    self._path = path
    self._array = np.lib.format.open_memmap(path, mode="w+", dtype=dtype,
                                            shape=(num_rounds, dim))
    self._recorded = np.zeros(num_rounds, bool)
    self._save_rounds()

  @classmethod
  def open(cls, path: str | os.PathLike) -> AggregateRecorder:
    """Reopens an existing recorder file for more rounds (resume)."""
    path = os.fspath(path)
    recorder = cls.__new__(cls)
    recorder._path = path  # pylint: disable=protected-access
    recorder._array = np.load(path, mmap_mode="r+")  # pylint: disable=protected-access
    recorder._recorded = _load_rounds(path, recorder._array.shape[0])  # pylint: disable=protected-access
    return recorder

  @property
  def path(self) -> str:
    return self._path

  @property
  def dim(self) -> int:
    return int(self._array.shape[1])

  @property
  def num_rounds(self) -> int:
    return int(self._array.shape[0])

  @property
  def recorded(self) -> np.ndarray:
    """bool [num_rounds]: which rounds have been written."""
    return self._recorded.copy()

  def record(self, metrics: Any) -> int:
    """Pops `noised_aggregate` out of a round's `output.metrics`
    (`pop_aggregate`) and writes it; returns the round written.

    Raises:
      ValueError: as `pop_aggregate`, or if the round is out of range.
    """
    round_num, aggregate = pop_aggregate(metrics)
    self.write(round_num, aggregate)
    return round_num

  def write(self, round_num: int, aggregate: Any) -> None:
    """Writes round `round_num`'s flat aggregate (length dim) and flushes it."""
    round_num = validation.as_int(round_num, "round_num", minimum=0)
    if round_num >= self.num_rounds:
      raise ValueError(f"round_num = {round_num} is beyond this recorder's "
                       f"num_rounds = {self.num_rounds} (the run is longer "
                       "than the recorder was made for).")
    aggregate = np.asarray(aggregate)
    if aggregate.shape != (self.dim,):
      raise ValueError(f"the aggregate must have shape ({self.dim},), got "
                       f"{aggregate.shape}.")
    if not np.all(np.isfinite(aggregate)):
      raise ValueError(f"the aggregate of round {round_num} is not finite.")
    self._array[round_num] = aggregate
    self._array.flush()
    self._recorded[round_num] = True
    self._save_rounds()

  def _save_rounds(self):
    text = json.dumps({"num_rounds": int(self._recorded.size),
                       "recorded": np.flatnonzero(self._recorded).tolist()})
    atomic_files.write_text(self._path + ".rounds.json", text)

  def close(self) -> None:
    """Flushes and releases the memory map."""
    if self._array is not None:
      self._array.flush()
      self._array = None

  def __enter__(self):
    return self

  def __exit__(self, *exc):
    self.close()


def _load_rounds(path: str, num_rounds: int) -> np.ndarray:
  try:
    with open(path + ".rounds.json", encoding="utf-8") as f:
      data = json.load(f)
    recorded = np.zeros(num_rounds, bool)
    rounds = np.asarray(data["recorded"], np.int64)
    if data["num_rounds"] != num_rounds or (rounds.size and (
        rounds.min() < 0 or rounds.max() >= num_rounds)):
      raise ValueError("inconsistent with the data file")
    recorded[rounds] = True
    return recorded
  except FileNotFoundError:
    raise ValueError(f"{path}.rounds.json is missing: {path} was not written "
                     "by an AggregateRecorder.") from None
  except (ValueError, KeyError, TypeError) as e:
    raise ValueError(f"{path}.rounds.json is corrupt: {e}") from None


def load_aggregates(path: str | os.PathLike) -> tuple[np.ndarray, np.ndarray]:
  """A recorder file, read-only: (memmap [num_rounds, dim], recorded mask)."""
  path = os.fspath(path)
  try:
    array = np.load(path, mmap_mode="r")
  except (ValueError, OSError) as e:
    raise ValueError(f"{path} is not an aggregate file: {e}") from None
  if array.ndim != 2:
    raise ValueError(f"{path} must hold a [num_rounds, dim] array, got shape "
                     f"{array.shape}.")
  return array, _load_rounds(path, array.shape[0])
