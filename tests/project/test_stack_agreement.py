"""The statistics layer gives the same numbers on both tested stacks.

tests/stack_outputs.py computes a fixed set of seeded outputs (simulated
cosines, estimates, bounds, audit verdicts, analytical epsilons, a synthetic
run's report.json and cosines.csv); this test runs it with this interpreter
and with the other stack's (the TFF env, NumPy 1.25 / SciPy 1.9 /
dp-accounting 0.4.3, and noxfile.py's `flower` env, NumPy 2 / the newest
SciPy / dp-accounting 0.6) and compares the two.

The other stack's Python: $TFF_CANARY_OTHER_PYTHON (noxfile.py sets it),
else .venv/bin/python or .nox/flower/bin/python, whichever runs the other
NumPy major. Without one the test is skipped, saying how to make it.
"""

import json
import math
import os
import pathlib
import subprocess
import sys

import numpy as np
import pytest

import repo_paths
import stack_selection

REPO = repo_paths.REPO
SCRIPT = REPO / "tests" / "stack_outputs.py"
CANDIDATES = (REPO / ".venv" / "bin" / "python",
              REPO / ".nox" / "flower" / "bin" / "python")

# Relative tolerance of every float. Measured (2026-12-02, NumPy 1.25.2 /
# SciPy 1.9.3 / dp-accounting 0.4.3 against NumPy 2.4.6 / SciPy 1.17.1 /
# dp-accounting 0.6.0): the layer's own numbers differ by at most 4.9e-11
# relative (a Clopper-Pearson upper of 3.8e-8, via SciPy's beta quantile,
# whose Boost code changed; brentq's xtol is 2e-12 absolute; NumPy 2's
# SIMD loops move a cosine by 1 ulp), most by under 1e-13, the exact GDP,
# tree and matrix epsilons not at all. 1e-9 leaves 20x room for that and
# still catches any change of formula, seed or data, which moves a number
# by far more.
REL = 1e-9
# dp-accounting's accountants of Poisson-sampled rounds changed their
# numerics in 0.5/0.6 (the RDP accountant's log-A series sums log binomials
# and stops by a relative criterion; the PLD accountant passes the neighbour
# relation to the Gaussian PLD): measured 4.4e-8 (RDP) and 3.1e-10 (PLD)
# relative. 1e-6 is that with room; a wrong sampling rate or round count
# moves them by percent.
ACCOUNTANT_REL = 1e-6
ACCOUNTANT_KEYS = ("analytical.poisson", "analytical.poisson_rdp",
                   "analytical.ledger_poisson")


def _numpy_major(python) -> int:
  proc = subprocess.run(
      [str(python), "-c", "import numpy; print(numpy.__version__)"],
      capture_output=True, text=True, timeout=120)
  return int(proc.stdout.split(".")[0]) if proc.returncode == 0 else -1


def _other_python():
  given = os.environ.get("TFF_CANARY_OTHER_PYTHON")
  if given:
    return pathlib.Path(given)
  mine = int(np.__version__.split(".")[0])
  for python in CANDIDATES:
    if python.exists() and _numpy_major(python) not in (mine, -1):
      return python
  return None


def _outputs(python, tmp_path, name):
  out = tmp_path / f"{name}.json"
  env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
  proc = subprocess.run([str(python), str(SCRIPT), str(out)], cwd=tmp_path,
                        env=env, capture_output=True, text=True, timeout=300)
  assert proc.returncode == 0, proc.stderr[-3000:]
  return json.loads(out.read_text())


def differences(mine, other, path=""):
  """(path, mine, other) of every value that differs beyond the tolerance;
  numbers that are not floats, strings and keys must be equal."""
  if isinstance(mine, dict) and isinstance(other, dict):
    if mine.keys() != other.keys():
      return [(path, sorted(mine), sorted(other))]
    return [d for k in mine
            for d in differences(mine[k], other[k], f"{path}.{k}".lstrip("."))]
  if isinstance(mine, list) and isinstance(other, list):
    if len(mine) != len(other):
      return [(path, mine, other)]
    return [d for i, (a, b) in enumerate(zip(mine, other))
            for d in differences(a, b, f"{path}[{i}]")]
  if (isinstance(mine, float) and isinstance(other, (int, float))
      and not isinstance(other, bool)) or (
          isinstance(other, float) and isinstance(mine, int)
          and not isinstance(mine, bool)):
    rel = ACCOUNTANT_REL if path in ACCOUNTANT_KEYS else REL
    return [] if math.isclose(mine, other, rel_tol=rel, abs_tol=0.0) else [
        (path, mine, other)]
  return [] if mine == other else [(path, mine, other)]


def test_the_comparison_can_fail():
  assert differences({"a": [1.0, "x"]}, {"a": [1.0 + 1e-12, "x"]}) == []
  assert differences({"a": 1.0}, {"a": 1.0 + 1e-8}) == [("a", 1.0, 1.0 + 1e-8)]
  assert differences({"a": "refuted"}, {"a": "consistent"})
  assert differences({"a": 1}, {"b": 1})
  assert differences({"analytical": {"poisson": 1.0}},
                     {"analytical": {"poisson": 1.0 + 1e-7}}) == []


def test_the_two_stacks_agree(tmp_path):
  other = _other_python()
  if other is None:
    pytest.skip("no Python of the other stack: make both with ./install.sh "
                "or set TFF_CANARY_OTHER_PYTHON")
  mine = _outputs(sys.executable, tmp_path, "mine")
  theirs = _outputs(other, tmp_path, "theirs")
  assert mine["csv_loads_back"] and theirs["csv_loads_back"]
  found = differences(mine, theirs)
  assert not found, "\n".join(f"{p}: {a!r} here, {b!r} in {other}"
                              for p, a, b in found[:20])


def test_tensorflow_test_files_are_told_apart():
  # tests/conftest.py leaves these out where TensorFlow is not installed:
  # the checker must find a file's TF imports through helpers, and pass a
  # statistics file.
  def needs(path):
    return stack_selection.needs_tensorflow(REPO / "tests" / path)

  assert needs("federated/insertion/test_factory.py")
  assert needs("stats/correlated/test_tree_noise.py")
  assert not needs("stats/estimators/test_estimates.py")
  assert not needs("stats/canaries/test_cosine_table.py")
  assert not needs("harness/reporting/test_report.py")
  assert not needs("project/test_stack_agreement.py")
