"""A quiet start: TensorFlow's C++ log level, set before TensorFlow loads.

On a machine without a GPU, TensorFlow 2.14 prints three "E ... Unable to
register cuDNN / cuFFT / cuBLAS factory" lines as it loads. They are
C++ ERROR lines (level 2), which TF_CPP_MIN_LOG_LEVEL=2 keeps and 3 hides;
a newcomer reads them as failures. Every command line of the project
(experiments/, bench/, `python -m tff_canary`) calls `quiet_tensorflow()`
before anything imports TensorFlow, so that the first line a user sees is
the tool's own. A TF_CPP_MIN_LOG_LEVEL the user set is kept
(`TF_CPP_MIN_LOG_LEVEL=0 python experiments/emnist.py ...` shows every C++
line again). Level 3 hides only TensorFlow's C++ log lines: Python
exceptions, warnings and the tool's own output are unchanged.

Imports no TensorFlow (it must run before TensorFlow loads, which reads the
variable once).
"""

from __future__ import annotations

import os

LOG_LEVEL_VARIABLE = "TF_CPP_MIN_LOG_LEVEL"
# 3: FATAL only; hides the cuDNN / cuFFT / cuBLAS registration errors.
QUIET_LEVEL = "3"


def quiet_tensorflow() -> str:
  """Sets TensorFlow's C++ log level to `QUIET_LEVEL` unless the user set
  it; returns the level in force. Call before TensorFlow is imported."""
  return os.environ.setdefault(LOG_LEVEL_VARIABLE, QUIET_LEVEL)


__all__ = ["LOG_LEVEL_VARIABLE", "QUIET_LEVEL", "quiet_tensorflow"]
