"""Test-suite plumbing shared by every test module.

TFF's worker_binary: the TFF-using modules of tff_canary install
`tff_canary.federated.worker_guard` when imported, and the guard stops every worker at
exit. This file also stops them at the end of the session and fails the run if
one survives, so a leak shows up as a red test instead of a hung pipe.
"""

import os
import sys

import pytest

# TensorFlow's C++ logging floods the test output; warnings and errors remain.
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")


def pytest_sessionfinish(session, exitstatus):
  del exitstatus
  if "tensorflow_federated" not in sys.modules:
    return
  from tff_canary.federated import worker_guard

  worker_guard.stop_workers()
  leaked = worker_guard.live_workers()
  if leaked:
    session.exitstatus = pytest.ExitCode.TESTS_FAILED
    print(f"\nconftest: TFF worker_binary still running after stop: {leaked}")
