"""Test-suite plumbing shared by every test module.

TFF's worker_binary: the TFF-using modules of tff_canary install
`tff_canary.federated.worker_guard` when imported, and the guard stops every worker at
exit. This file also stops them at the end of the session (of each xdist
worker: the suite runs on 2 processes, one test file each at a time) and fails
the run if one survives, so a leak shows up as a red test instead of a hung
pipe.
"""

import os
import sys

import pytest

# TensorFlow's C++ logging floods the test output; warnings and errors remain.
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")


@pytest.fixture(scope="session", autouse=True)
def _no_worker_outlives_the_session():
  """Stops every worker at the end of the session (of each xdist worker) and
  fails the last test's teardown if one survives."""
  yield
  if "tensorflow_federated" not in sys.modules:
    return
  from tff_canary.federated import worker_guard  # pylint: disable=g-import-not-at-top

  worker_guard.stop_workers()
  leaked = worker_guard.live_workers()
  if leaked:
    pytest.fail(f"TFF worker_binary still running after stop: {leaked}")
