"""Argument checks shared by the public API.

Every check raises `TypeError` (wrong kind of value) or `ValueError` (right kind,
wrong value) with a message that names the argument and shows the value, so a
user never meets a deep NumPy, SciPy or TensorFlow traceback instead.
"""

from __future__ import annotations

import numbers
from typing import Any

import numpy as np

_MAX_SHOWN = 60


def show(value: Any) -> str:
  """A short repr of `value` for error messages.

  A NumPy scalar shows as the number it holds, `-7.0` (NumPy 2's repr is
  `np.float64(-7.0)`; its str, like NumPy 1's repr, is the number).
  """
  if isinstance(value, np.number):
    text = str(value)
  elif isinstance(value, np.generic):  # np.bool_, np.str_: as Python's
    text = repr(value.item())
  else:
    text = repr(value)
  if len(text) > _MAX_SHOWN:
    text = text[: _MAX_SHOWN - 3] + "..."
  return text


def _is_real(value: Any) -> bool:
  return isinstance(value, numbers.Real) and not isinstance(value, bool)


def as_float(value: Any, name: str) -> float:
  """`value` as a finite Python float; TypeError/ValueError otherwise."""
  if isinstance(value, np.ndarray) and value.ndim == 0:
    value = value.item()
  if not _is_real(value):
    raise TypeError(f"{name} must be a real number, got {show(value)} "
                    f"of type {type(value).__name__}.")
  value = float(value)
  if not np.isfinite(value):
    raise ValueError(f"{name} must be finite, got {value}.")
  return value


def as_int(value: Any, name: str, minimum: int | None = None) -> int:
  """`value` as a Python int (bools and floats refused), at least `minimum`."""
  if isinstance(value, np.ndarray) and value.ndim == 0:
    value = value.item()
  if isinstance(value, bool) or not isinstance(value, numbers.Integral):
    raise TypeError(f"{name} must be an integer, got {show(value)} "
                    f"of type {type(value).__name__}.")
  value = int(value)
  if minimum is not None and value < minimum:
    raise ValueError(f"{name} must be at least {minimum}, got {value}.")
  return value


def as_open_unit(value: Any, name: str) -> float:
  """`value` as a float strictly inside (0, 1): a delta, a confidence."""
  value = as_float(value, name)
  if not 0.0 < value < 1.0:
    raise ValueError(f"{name} must be strictly between 0 and 1, got {value}.")
  return value


def as_levels(delta: Any, confidence: Any) -> tuple[float, float]:
  """(delta, confidence), each checked to lie in (0, 1)."""
  return as_open_unit(delta, "delta"), as_open_unit(confidence, "confidence")


def as_unit_interval(value: Any, name: str, *, include_low: bool = True,
                     include_high: bool = True) -> float:
  """`value` as a float in [0, 1], (0, 1], [0, 1) or (0, 1) as the flags say.

  For quantiles, probabilities and momenta; deltas and confidences use
  `as_open_unit`.
  """
  value = as_float(value, name)
  low_ok = value >= 0.0 if include_low else value > 0.0
  high_ok = value <= 1.0 if include_high else value < 1.0
  if not (low_ok and high_ok):
    interval = ("[" if include_low else "(") + "0, 1" + (
        "]" if include_high else ")")
    raise ValueError(f"{name} must be in {interval}, got {value}.")
  return value


def as_positive(value: Any, name: str) -> float:
  value = as_float(value, name)
  if value <= 0.0:
    raise ValueError(f"{name} must be positive, got {value}.")
  return value


def as_nonnegative(value: Any, name: str) -> float:
  value = as_float(value, name)
  if value < 0.0:
    raise ValueError(f"{name} must be nonnegative, got {value}.")
  return value


def as_dim(value: Any, name: str = "dim") -> int:
  """A model dimension: an integer of at least 2 (a cosine needs d >= 2)."""
  return as_int(value, name, minimum=2)


def as_sample(values: Any, name: str, min_size: int = 2,
              lower: float = -np.inf, upper: float = np.inf) -> np.ndarray:
  """A 1-D float64 sample of at least `min_size` finite values in [lower, upper].

  Refuses strings, scalars, 2-D arrays, NaN and inf, and values out of range,
  naming `name` and showing the offending value.
  """
  if isinstance(values, (str, bytes)) or values is None:
    raise TypeError(f"{name} must be a 1-D array of numbers, got "
                    f"{show(values)}.")
  try:
    array = np.asarray(values)
  except Exception as e:  # ragged nested lists and the like
    raise TypeError(f"{name} must be a 1-D array of numbers, got "
                    f"{show(values)}: {e}") from None
  if array.dtype == bool or not (np.issubdtype(array.dtype, np.integer)
                                 or np.issubdtype(array.dtype, np.floating)):
    raise TypeError(f"{name} must hold real numbers, got dtype {array.dtype} "
                    f"in {show(values)}.")
  if array.ndim != 1:
    raise ValueError(f"{name} must be 1-D, got shape {array.shape}.")
  if array.size < min_size:
    raise ValueError(f"{name} needs at least {min_size} values, got "
                     f"{array.size}.")
  array = array.astype(np.float64)
  bad = ~np.isfinite(array)
  if bad.any():
    index = int(np.flatnonzero(bad)[0])
    raise ValueError(f"{name} must be finite, but {name}[{index}] = "
                     f"{array[index]}.")
  out = (array < lower) | (array > upper)
  if out.any():
    index = int(np.flatnonzero(out)[0])
    raise ValueError(f"{name} must lie in [{lower}, {upper}], but "
                     f"{name}[{index}] = {show(array[index])}.")
  return array


def as_cosines(values: Any, name: str, min_size: int = 2) -> np.ndarray:
  """A 1-D sample of cosines: finite values in [-1, 1], at least `min_size`."""
  return as_sample(values, name, min_size=min_size, lower=-1.0, upper=1.0)


def as_counts(values: Any, name: str, maximum: int,
              min_size: int = 1) -> np.ndarray:
  """A 1-D int64 array of counts: whole numbers in [0, maximum]."""
  array = as_sample(values, name, min_size=min_size, lower=0.0,
                    upper=float(maximum))
  fractional = array != np.round(array)
  if fractional.any():
    index = int(np.flatnonzero(fractional)[0])
    raise ValueError(f"{name} must hold whole numbers, but {name}[{index}] = "
                     f"{show(array[index])}.")
  return array.astype(np.int64)


def check_spread(sample: np.ndarray, name: str) -> None:
  """Refuses a sample with zero variance (a Gaussian cannot be fitted to it)."""
  if np.ptp(sample) == 0.0:
    raise ValueError(f"{name} has zero variance (all {sample.size} values "
                     f"equal {show(sample[0])}); a Gaussian cannot be fitted.")


def as_bool(value: Any, name: str, optional: bool = False) -> bool | None:
  """`value` as a Python bool; with `optional`, None passes through."""
  if optional and value is None:
    return None
  if not isinstance(value, (bool, np.bool_)):
    raise TypeError(f"{name} must be a bool{' or None' if optional else ''}, "
                    f"got {show(value)}.")
  return bool(value)


def as_mask(values: Any, name: str, shape: tuple[int, ...],
            shape_of: str) -> np.ndarray:
  """`values` as a bool array of `shape`, the shape of the argument `shape_of`."""
  mask = np.asarray(values)
  if mask.dtype != bool:
    raise TypeError(f"{name} must be a bool array, got dtype {mask.dtype}.")
  if mask.shape != shape:
    raise ValueError(f"{name} has shape {mask.shape} but {shape_of} has shape "
                     f"{shape}; they must match.")
  return mask


def as_choice(value: Any, name: str, choices: tuple[str, ...]) -> str:
  if not isinstance(value, str) or value not in choices:
    raise ValueError(f"{name} must be one of {choices}, got {show(value)}.")
  return value
