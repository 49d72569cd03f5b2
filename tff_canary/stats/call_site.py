"""The stack level of the user's call, for warnings raised deep inside.

`warnings.warn(..., stacklevel=k)` attributes a warning to the k-th frame up
the stack. A warning about the user's input should point at the user's line,
however many of this package's functions (and TensorFlow's or TFF's, when
TFF traces an aggregator) lie between it and the check. Python 3.11 has no
`skip_file_prefixes`; `user_stacklevel()` counts the frames instead.
"""

from __future__ import annotations

import os
import sys

_PACKAGE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# Libraries whose frames stand between a user's call and this package's check
# (TFF builds and traces aggregators; tests call through pytest's raises).
_LIBRARIES = ("tensorflow", "tensorflow_federated", "tensorflow_privacy",
              "keras", "absl")


def _internal(filename: str) -> bool:
  if filename.startswith(_PACKAGE + os.sep) or filename.startswith("<frozen"):
    return True
  parts = filename.split(os.sep)
  return any(lib in parts for lib in _LIBRARIES)


def user_stacklevel() -> int:
  """The `stacklevel` that points at the first frame outside tff_canary and
  the libraries above, for a `warnings.warn` in the function that calls
  this one."""
  frame = sys._getframe(1)  # pylint: disable=protected-access
  level = 1
  while frame is not None and _internal(frame.f_code.co_filename):
    frame = frame.f_back
    level += 1
  return level
