"""The recorded aggregate rows that the cosine pass reads, with bounded memory.

`RowReader` reads rows of the noised aggregates as float32, and their norms
chunk by chunk, so that `cosine_pass` never holds more rows than its budget.
"""

from __future__ import annotations

import os
from typing import Any

import numpy as np

from tff_canary.federated.scores import aggregate_recorder


class RowReader:
  """Reads rows of the aggregates as float32 with bounded memory.

  From a file, rows are read with plain reads into fresh arrays (not through a
  memory map, whose file pages would stay mapped and count in the process's
  memory); from an array, by slicing.
  """

  def __init__(self, aggregates: Any):
    self._path = None
    self._array = None
    self.from_file = False
    if isinstance(aggregates, aggregate_recorder.AggregateRecorder):
      aggregates = aggregates.path
    if isinstance(aggregates, (str, os.PathLike)):
      path = os.fspath(aggregates)
      array, recorded = aggregate_recorder.load_aggregates(path)
      if array.dtype.kind != "f" or not array.flags.c_contiguous:
        raise ValueError(f"{path} must hold a C-ordered float array.")
      self._path, self._offset, self.from_file = path, array.offset, True
      self.rows = np.flatnonzero(recorded)
    else:
      array = aggregates
      if not isinstance(array, np.ndarray):
        try:
          array = np.asarray(array, np.float32)
        except (TypeError, ValueError) as e:
          raise TypeError("aggregates must be an AggregateRecorder, a path or "
                          f"a [num_rounds, dim] array: {e}") from None
      if array.dtype.kind != "f":
        raise TypeError(f"aggregates must be floating point, got dtype "
                        f"{array.dtype}.")
      if array.ndim != 2:
        raise ValueError(f"aggregates must have shape [num_rounds, dim], got "
                         f"{array.shape}.")
      self._array = array
      self.rows = np.arange(array.shape[0])
    self.shape, self.dtype = array.shape, array.dtype

  def read(self, rows: np.ndarray, out: np.ndarray | None = None
          ) -> np.ndarray:
    """Rows `rows` (sorted) as a float32 [len(rows), dim] array.

    From a file, into `out` (at least len(rows) rows; allocated if None), so
    a reused buffer costs no new memory; from an array, a view when the rows
    are contiguous and already float32.
    """
    dim = self.shape[1]
    if self._array is not None:
      if rows.size and rows[-1] - rows[0] + 1 == rows.size:
        part = self._array[int(rows[0]):int(rows[-1]) + 1]
      else:
        part = self._array[rows]
      return np.asarray(part, np.float32)
    if out is None:
      out = np.empty((rows.size, dim), np.float32)
    out = out[:rows.size]
    breaks = np.flatnonzero(np.diff(rows) != 1) + 1
    with open(self._path, "rb") as f:
      for run in np.split(np.arange(rows.size), breaks):
        if not run.size:
          continue
        first = int(rows[run[0]])
        f.seek(self._offset + first * dim * self.dtype.itemsize)
        target = out[run[0]:run[-1] + 1]
        if self.dtype == np.float32:
          got = f.readinto(memoryview(target).cast("B"))
          if got != target.nbytes:
            raise ValueError(f"{self._path} is truncated.")
        else:
          data = np.fromfile(f, self.dtype, count=run.size * dim)
          if data.size != run.size * dim:
            raise ValueError(f"{self._path} is truncated.")
          target[...] = data.reshape(run.size, dim)
    return out

  def norms(self, chunk: int, buffer: np.ndarray | None = None
            ) -> np.ndarray:
    """float64 [len(rows)]: |a_r| of every row, the squares summed in
    float64, read `chunk` rows at a time (into `buffer`, if given).

    Raises:
      ValueError: if a row holds a non-finite value.
    """
    norms = np.empty(self.rows.size, np.float64)
    for start in range(0, self.rows.size, chunk):
      part = self.read(self.rows[start:start + chunk], out=buffer)
      squares = np.einsum("ij,ij->i", part, part, dtype=np.float64)
      if not np.all(np.isfinite(squares)):
        raise ValueError("aggregates hold non-finite values.")
      norms[start:start + chunk] = np.sqrt(squares)
    return norms


__all__ = ["RowReader"]
