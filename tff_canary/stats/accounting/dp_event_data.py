"""DpEvents as plain data (to_named_tuple form, TFF state, JSON), and back.

A dp_accounting DpEvent comes in three forms: the DpEvent itself, its
`DpEvent.to_named_tuple()` form (what TFF's DP aggregators keep in their state
as `state.dp_event`, after TF with bytes names and NumPy values), and the dict
`{"class_name": ..., <fields>}` of a saved `ledger.Ledger`, nested events as
dicts. `event_to_plain` turns any of them into that dict with plain Python
values; `as_event` rebuilds the DpEvent from it, loading only classes of
`dp_accounting.dp_event`, so every event ends up with plain Python fields.
"""

from __future__ import annotations

import collections.abc
import numbers
from typing import Any

import attr
import dp_accounting
from dp_accounting import dp_event as dp_event_module
import numpy as np

from tff_canary.stats import validation


def _plain_value(value: Any, where: str) -> Any:
  """A field value of an event as JSON-ready plain Python data."""
  if isinstance(value, dp_accounting.DpEvent) or looks_like_event(value):
    return event_to_plain(value, where)
  if isinstance(value, np.ndarray):
    value = value.tolist() if value.ndim else value.item()
  if isinstance(value, (bytes, np.bytes_)):
    return bytes(value).decode()
  if isinstance(value, bool) or value is None or isinstance(value, str):
    return value
  if isinstance(value, numbers.Integral):
    return int(value)
  if isinstance(value, numbers.Real):
    return float(value)
  if isinstance(value, collections.abc.Mapping):
    return {str(k): _plain_value(v, f"{where}.{k}") for k, v in value.items()}
  if isinstance(value, collections.abc.Sequence):
    return [_plain_value(v, f"{where}[{i}]") for i, v in enumerate(value)]
  raise TypeError(f"{where}: cannot store {validation.show(value)} of type "
                  f"{type(value).__name__} in a ledger.")


def looks_like_event(value: Any) -> bool:
  """A DpEvent as a named tuple (to_named_tuple, TFF state) or a dict."""
  if isinstance(value, collections.abc.Mapping):
    return "class_name" in value
  return hasattr(value, "_fields") and "class_name" in value._fields


def event_to_plain(event: Any, where: str) -> dict[str, Any]:
  """{"class_name": ..., field: value, ...} for a DpEvent in any form."""
  if isinstance(event, dp_accounting.DpEvent):
    class_name = type(event).__name__
    fields = {f.name: getattr(event, f.name) for f in attr.fields(type(event))}
  elif looks_like_event(event):
    fields = dict(event) if isinstance(event, collections.abc.Mapping) else {
        name: getattr(event, name) for name in event._fields}
    class_name = fields.pop("class_name")
    fields.pop("module_name", None)
  else:
    raise TypeError(f"{where}: expected a dp_accounting.DpEvent, its "
                    f"to_named_tuple() form or a dict, got "
                    f"{validation.show(event)} of type "
                    f"{type(event).__name__}.")
  if isinstance(class_name, (bytes, np.bytes_)):
    class_name = bytes(class_name).decode()
  return {"class_name": class_name, **{
      name: _plain_value(value, f"{where}.{name}")
      for name, value in fields.items()}}


def _event_from_plain(plain: dict[str, Any],
                      where: str) -> dp_accounting.DpEvent:
  """Rebuilds a DpEvent from `event_to_plain` output (classes whitelisted)."""
  class_name = plain.get("class_name")
  cls = getattr(dp_event_module, class_name, None) if isinstance(
      class_name, str) else None
  if not (isinstance(cls, type) and issubclass(cls, dp_accounting.DpEvent)):
    raise ValueError(f"{where}: {class_name!r} is not a DpEvent class of "
                     f"dp_accounting.dp_event.")
  expected = {f.name for f in attr.fields(cls)}
  given = set(plain) - {"class_name"}
  if given != expected:
    raise ValueError(f"{where}: {cls.__name__} needs fields "
                     f"{sorted(expected)}, got {sorted(given)}.")

  def rebuild(value: Any, at: str) -> Any:
    if isinstance(value, dict) and "class_name" in value:
      return _event_from_plain(value, at)
    if isinstance(value, list):
      return [rebuild(v, f"{at}[{i}]") for i, v in enumerate(value)]
    return value

  try:
    return cls(**{name: rebuild(plain[name], f"{where}.{name}")
                  for name in expected})
  except Exception as e:  # attrs or DpEvent validation
    raise ValueError(f"{where}: cannot build {cls.__name__} from "
                     f"{validation.show(plain)}: {e}") from None


def as_event(event: Any, where: str) -> dp_accounting.DpEvent:
  """A DpEvent with plain Python field values, from any accepted form."""
  return _event_from_plain(event_to_plain(event, where), where)
