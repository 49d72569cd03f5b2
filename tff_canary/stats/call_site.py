"""The stack level of the user's call, for warnings raised deep inside.

`warnings.warn(..., stacklevel=k)` attributes a warning to the k-th frame up
the stack. A warning about the user's input should point at the user's line,
however many of this package's functions (and TensorFlow's or TFF's, when
TFF traces an aggregator) lie between it and the check. Python 3.11 has no
`skip_file_prefixes`; `user_stacklevel()` counts the frames instead.

A command line has no user's line: there the call is the command itself, and
`line_showwarning` shows such a warning as its message alone.
"""

from __future__ import annotations

import os
import sys
from typing import Callable

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


# Python's file name of a warning whose stack level passes the outermost
# frame (`python -m tff_canary`: no frame outside the package): "sys:1".
_NO_FILE = "sys"


def line_showwarning(show: Callable[..., None], *folders: str
                     ) -> Callable[..., None]:
  """A `warnings.showwarning` for a command line: a warning attributed to
  this package, to a file under one of `folders` (a command's own scripts)
  or to no file is printed as one line, `warning: <message>`; any other
  (TensorFlow's, Keras's) goes to `show`, Python's format.

  On a command line, `user_stacklevel` attributes the package's warnings to
  the script's own line, or, with no frame outside the package, to Python's
  "sys:1"; Python's format then prints that file and line and its source
  line (`report = experiment.run_experiment(config)`), which tell the person
  who typed the command nothing. The message alone is what they need, as a
  refused command's `error: <message>`. A library's warning keeps its file:
  it says whose it is.
  """
  own = tuple(os.path.abspath(folder) + os.sep
              for folder in (_PACKAGE, *folders))

  def show_line(message, category, filename, lineno, file=None, line=None):
    if filename != _NO_FILE and not os.path.abspath(filename).startswith(own):
      show(message, category, filename, lineno, file, line)
      return
    file = sys.stderr if file is None else file
    if file is None:  # pythonw: no stderr, as Python's own showwarning
      return
    try:
      file.write(f"warning: {message}\n")
    except OSError:  # as Python's own showwarning
      pass

  return show_line
