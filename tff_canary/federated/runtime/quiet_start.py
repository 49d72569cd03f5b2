"""A quiet start: TensorFlow's C++ log level, set before TensorFlow loads.

docs/guide/experiments.md: on a machine without a GPU, TensorFlow 2.14
prints three C++ ERROR lines (level 2) "Unable to register cuDNN / cuFFT /
cuBLAS factory" as it loads, which a newcomer reads as failures. Every
command line of the project calls `quiet_tensorflow()` before anything
imports TensorFlow (which reads the variable once); a TF_CPP_MIN_LOG_LEVEL
the user set is kept. Level 3 hides only TensorFlow's C++ log lines, not
Python exceptions, warnings or the tool's own output. Imports no TensorFlow.
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
