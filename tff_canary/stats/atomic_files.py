"""Atomic file writes: a crash never leaves a half-written result behind.

Every writer puts the bytes in a temporary file in the destination's directory
(same file system), flushes and fsyncs it, then `os.replace`s it onto the
destination, which POSIX makes atomic: a reader sees the old file or the new
one, never a mix, even if the process is killed with SIGKILL mid-write. The
temporary file is removed if writing fails.

File modes are a plain `open()`'s: the temporary file is created with mode
0o666 less the process's umask, which the kernel applies as for `open()`
(`tempfile.mkstemp` makes it 0o600, readable by its owner only; reading the
umask means setting it, which is not thread-safe), and a file that is
replaced keeps its mode, as a file rewritten in place does.

JSON (`write_json`, `read_json`) is strict (RFC 8259; docs/guide/report.md,
"report.json is strict JSON"): a non-finite float is written as the string
"Infinity", "-Infinity" or "NaN" (`NONFINITE`), and `read_json` turns these
three strings back into floats.
"""

from __future__ import annotations

import contextlib
import io
import json
import math
import os
import secrets
import stat
from typing import Any, Iterator

import numpy as np


@contextlib.contextmanager
def replacing(path: str | os.PathLike, suffix: str = "") -> Iterator[str]:
  """Yields a temporary path; on success moves it onto `path` atomically.

  For writers that insist on a file name of their own (matplotlib's savefig,
  TFF's savers). The temporary file keeps `suffix` so format detection works.
  """
  path = os.fspath(path)
  directory = os.path.dirname(os.path.abspath(path))
  os.makedirs(directory, exist_ok=True)
  temp = _create_temp(directory, suffix)
  try:
    yield temp
    with open(temp, "rb") as f:
      os.fsync(f.fileno())
    with contextlib.suppress(FileNotFoundError):  # keep a replaced file's mode
      os.chmod(temp, stat.S_IMODE(os.stat(path).st_mode))
    os.replace(temp, path)
  except BaseException:
    with contextlib.suppress(FileNotFoundError):
      os.remove(temp)
    raise


def _create_temp(directory: str, suffix: str) -> str:
  """A new empty file `.tmp-<random><suffix>` in `directory`, created with
  mode 0o666 and so the umask's permissions (module docstring)."""
  for _ in range(100):
    temp = os.path.join(directory, f".tmp-{secrets.token_hex(8)}{suffix}")
    try:
      fd = os.open(temp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
    except FileExistsError:
      continue
    os.close(fd)
    return temp
  raise FileExistsError(f"no free temporary name in {directory}.")


def write_bytes(path: str | os.PathLike, data: bytes) -> None:
  """Writes `data` to `path` atomically."""
  with replacing(path) as temp:
    with open(temp, "wb") as f:
      f.write(data)
      f.flush()


def write_text(path: str | os.PathLike, text: str) -> None:
  write_bytes(path, text.encode("utf-8"))


# A non-finite float's JSON string (module docstring), and back.
NONFINITE = {math.inf: "Infinity", -math.inf: "-Infinity"}
_FROM_STRING = {"Infinity": math.inf, "-Infinity": -math.inf, "NaN": math.nan}


def strict_json_value(value: Any) -> Any:
  """`value` with every non-finite float (NumPy's too, in arrays) replaced by
  its string (module docstring); NumPy scalars and arrays become Python's."""
  if isinstance(value, np.ndarray):
    value = value.tolist()
  elif isinstance(value, np.generic):
    value = value.item()
  if isinstance(value, float):
    if math.isnan(value):
      return "NaN"
    return NONFINITE.get(value, value)
  if isinstance(value, dict):
    return {k: strict_json_value(v) for k, v in value.items()}
  if isinstance(value, (list, tuple)):
    return [strict_json_value(v) for v in value]
  return value


def from_strict_json(value: Any) -> Any:
  """The inverse of `strict_json_value` on parsed JSON: "Infinity",
  "-Infinity" and "NaN" become floats again."""
  if isinstance(value, str):
    return _FROM_STRING.get(value, value)
  if isinstance(value, dict):
    return {k: from_strict_json(v) for k, v in value.items()}
  if isinstance(value, list):
    return [from_strict_json(v) for v in value]
  return value


def dumps_json(value: Any) -> str:
  """`value` as indented strict JSON (module docstring)."""
  return json.dumps(strict_json_value(value), indent=1,
                    allow_nan=False) + "\n"


def write_json(path: str | os.PathLike, value: Any) -> None:
  """Writes `dumps_json(value)` to `path` atomically."""
  write_text(path, dumps_json(value))


def read_json(path: str | os.PathLike) -> Any:
  """A file `write_json` wrote, non-finite floats restored (module
  docstring); also reads the bare NaN / Infinity older versions wrote."""
  with open(path, encoding="utf-8") as f:
    return from_strict_json(json.load(f))


def save_npz(path: str | os.PathLike, **arrays: Any) -> None:
  """`np.savez` to `path`, atomically."""
  buffer = io.BytesIO()
  np.savez(buffer, **arrays)
  write_bytes(path, buffer.getvalue())


def save_npy(path: str | os.PathLike, array: np.ndarray) -> None:
  """`np.save` to `path`, atomically."""
  buffer = io.BytesIO()
  np.save(buffer, array)
  write_bytes(path, buffer.getvalue())
