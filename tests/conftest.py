"""Test-suite plumbing shared by every test module.

TFF's worker_binary: the TFF-using modules of tff_canary install
`tff_canary.federated.runtime.worker_guard` when imported, and the guard stops every worker at
exit. This file also stops them at the end of the session (of each xdist
worker: the suite runs on 2 processes, one test file each at a time) and fails
the run if one survives, so a leak shows up as a red test instead of a hung
pipe.
"""

import importlib.util
import os
import sys

import pytest

import stack_selection

# TensorFlow's C++ logging floods the test output; warnings and errors remain.
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

# The files that take longest, longest first (by CPU seconds of each file
# alone, -n 0, measured for tff-canary issue 35; the order is all that
# matters). xdist hands out files in collection order
# (pytest.ini: --dist loadfile --no-loadscope-reorder), so starting these
# first lets the two processes finish together instead of one of them
# running a 2-minute file alone at the end. Every other file follows in
# pytest's order. Paths are relative to tests/; one that no longer exists is an
# error.
SLOWEST_FIRST = (
    "project/test_smoke.py",
    "federated/insertion/test_factory.py",
    "harness/runner/test_experiment.py",
    "harness/runner/test_reproducible.py",
    "harness/runner/test_planted_bug_runs.py",
    "mechanisms/matrix/test_end_to_end.py",
    "mechanisms/tree/test_aggregation.py",
    "mechanisms/tree/test_end_to_end.py",
    "harness/runner/test_client_insertion.py",
    "federated/insertion/test_orthogonal_transform.py",
    "mechanisms/ddp/test_end_to_end.py",
    "stats/audit/test_audit.py",
    "mechanisms/tree/test_end_to_end_clients.py",
    "experiments/test_sweep.py",
    "mechanisms/matrix/test_planted_bugs.py",
    "federated/insertion/test_canary_clients.py",
    "experiments/test_experiment_cli.py",
    "stats/estimators/test_estimates.py",
    "harness/data/test_datasets.py",
    "mechanisms/ddp/test_noise_check.py",
)


# Without TensorFlow (the core install, and the Flower environment:
# noxfile.py's `flower` session), the test files that cannot import without
# it are left out; that session runs -m "not tff", leaving out the tests that
# need it at run time. Without Flower (the TFF environment), the Flower half's test
# files are left out the same way (tests/stack_selection.py).
_WITHOUT_TENSORFLOW = importlib.util.find_spec("tensorflow") is None
_WITHOUT_FLOWER = importlib.util.find_spec("flwr") is None


def pytest_ignore_collect(collection_path, config):
  del config  # unused
  if collection_path.suffix != ".py" or not collection_path.name.startswith(
      "test_"):
    return None
  if _WITHOUT_TENSORFLOW and stack_selection.needs_tensorflow(collection_path):
    return True
  if _WITHOUT_FLOWER and stack_selection.needs_flower(collection_path):
    return True
  return None


def pytest_collection_modifyitems(session, config, items):
  del session, config  # unused
  here = os.path.dirname(os.path.abspath(__file__))
  missing = [n for n in SLOWEST_FIRST
             if not os.path.exists(os.path.join(here, n))]
  if missing:
    raise pytest.UsageError(f"tests/conftest.py SLOWEST_FIRST names files "
                            f"that do not exist: {missing}")
  rank = {name: i for i, name in enumerate(SLOWEST_FIRST)}
  items.sort(key=lambda item: rank.get(
      os.path.relpath(item.path, here).replace(os.sep, "/"), len(rank)))


def pytest_runtest_setup(item):
  """Guards TFF's workers before any test runs a computation, also in a test
  file that imports TFF but no tff_canary module that installs the guard:
  an unguarded worker of a process started with SIGINT ignored (a
  background job) ignores TFF's SIGINT at exit, and TFF then waits for it
  forever (worker_guard's docstring)."""
  del item  # unused
  if "tensorflow_federated" in sys.modules:
    from tff_canary.federated.runtime import worker_guard  # pylint: disable=g-import-not-at-top

    worker_guard.install()


@pytest.fixture(scope="session", autouse=True)
def _no_worker_outlives_the_session():
  """Stops every worker at the end of the session (of each xdist worker) and
  fails the last test's teardown if one survives."""
  yield
  if "tensorflow_federated" not in sys.modules:
    return
  from tff_canary.federated.runtime import worker_guard  # pylint: disable=g-import-not-at-top

  worker_guard.stop_workers()
  leaked = worker_guard.live_workers()
  if leaked:
    pytest.fail(f"TFF worker_binary still running after stop: {leaked}")


@pytest.fixture(scope="module")
def small_emnist_model():
  """A module's in-process runs train tests/small_model.py's 9,030-parameter
  CNN in place of TFF's 1.2M-parameter one (what they check does not depend
  on the model; a module asks with
  `pytestmark = pytest.mark.usefixtures("small_emnist_model")`, which pytest
  sets up before the module's own run fixtures). Subprocesses are not
  affected: the scripts' runs keep the real CNN."""
  import small_model  # pylint: disable=g-import-not-at-top
  with small_model.emnist_cnn():
    yield


@pytest.fixture
def flower_server_process():
  """A test of the Flower half runs in a ServerApp process's identity
  (tests/flower_grid.py's `server_identity`: FedAvg's `configure_train`
  needs it), and NumPy's global RNG, which Flower's noise draws from, is
  put back as it was after the test. A module asks with
  `pytestmark = pytest.mark.usefixtures("flower_server_process")`; Flower
  is imported only then (the TFF environment has none)."""
  import flower_grid  # pylint: disable=g-import-not-at-top
  import numpy as np  # pylint: disable=g-import-not-at-top
  state = np.random.get_state()
  with flower_grid.server_identity():
    yield
  np.random.set_state(state)
