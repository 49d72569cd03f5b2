"""A plain `pip install .` gives the statistics layer, without TensorFlow.

The test installs the package (not editable: a wheel built from a copy of
this checkout's sources)
into a fresh virtual environment with `uv`, pinned to the versions installed
in the environment that runs the test (requirements/lock.txt's in the TFF
one, requirements/lock-flower.txt's NumPy 2 stack in noxfile.py's flower
session: so both stacks' core installs are checked, the Flower one without
Flower, which install_requires does not name), and checks there that
TensorFlow, Flower (and matplotlib) are absent, that the
top-level estimators import and run, and that `python -m tff_canary report
--no_plots` recomputes a run directory's every estimate from its saved cosines
to the same report.json as this environment computes (a TF-free import path
that silently fell back to different code, or a missing dependency in
setup.py's install_requires, fails here).
"""

import json
import os
import pathlib
import shutil
import subprocess
import sys

import pytest

import repo_paths
import fake_runs
from tff_canary.harness.reporting import report as report_lib
from tff_canary.stats import atomic_files

REPO = repo_paths.REPO

# Run inside the fresh environment, from a directory outside the checkout so
# that the installed copy (not the source tree) is imported.
PROBE = r"""
import importlib.util, json, sys
import numpy as np
import tff_canary
absent = {m: importlib.util.find_spec(m) is None
          for m in ("tensorflow", "tensorflow_federated", "matplotlib",
                    "flwr", "ray")}
rng = np.random.default_rng(0)
dim = 10_000
inserted = (3 + rng.standard_normal(200)) / np.sqrt(dim)
held_out = rng.standard_normal(200) / np.sqrt(dim)
final = tff_canary.epsilon_final(inserted, dim=dim, delta=1e-5)
fitted = tff_canary.epsilon_final(inserted, dim=dim, delta=1e-5,
                                  method="fitted_variance")
lo = tff_canary.epsilon_lo(inserted, dim=dim, delta=1e-5)
print(json.dumps(dict(
    file=tff_canary.__file__, absent=absent,
    loaded=sorted(m for m in ("tensorflow", "matplotlib") if m in sys.modules),
    final=final.epsilon, fitted=fitted.epsilon, lo=lo.epsilon,
    analytical=tff_canary.gaussian_epsilon(1.0, 1e-5))))
"""


@pytest.fixture(scope="module")
def stats_only_python(tmp_path_factory):
  venv = tmp_path_factory.mktemp("stats_only") / "venv"
  uv = [sys.executable, "-m", "uv"]
  subprocess.run(uv + ["venv", "-q", "--python", sys.executable, str(venv)],
                 check=True, capture_output=True, timeout=120)
  python = venv / "bin" / "python"
  # Built from a copy of the sources, so the build's build/ and egg-info
  # never land in the checkout.
  source = venv.parent / "source"
  shutil.copytree(REPO / "tff_canary", source / "tff_canary",
                  ignore=shutil.ignore_patterns("__pycache__"))
  for name in ("setup.py", "README.md"):
    shutil.copy(REPO / name, source / name)
  # This environment's versions (not the package itself), so that the
  # numbers compared below come from the same NumPy, SciPy and dp-accounting.
  frozen = subprocess.run(uv + ["pip", "freeze", "--python", sys.executable],
                          check=True, capture_output=True, text=True,
                          timeout=120).stdout.splitlines()
  constraints = venv.parent / "constraints.txt"
  constraints.write_text("".join(
      f"{line}\n" for line in frozen
      if "==" in line and not line.lower().startswith("tff-canary")))
  proc = subprocess.run(
      uv + ["pip", "install", "-q", "--python", str(python),
            "-c", str(constraints), str(source)],
      capture_output=True, text=True, timeout=600)
  assert proc.returncode == 0, proc.stderr[-3000:]
  return python


def _run(python, *args, cwd):
  env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
  return subprocess.run([str(python), *args], capture_output=True, text=True,
                        timeout=300, cwd=cwd, env=env)


def test_estimators_without_tensorflow(stats_only_python, tmp_path):
  proc = _run(stats_only_python, "-c", PROBE, cwd=tmp_path)
  assert proc.returncode == 0, proc.stderr[-3000:]
  got = json.loads(proc.stdout)
  assert all(got["absent"].values()), got["absent"]
  assert got["loaded"] == []
  assert not got["file"].startswith(str(REPO)), got["file"]
  # The same numbers as this (full) environment computes.
  expected = _run(sys.executable, "-c", PROBE, cwd=tmp_path)
  assert expected.returncode == 0, expected.stderr[-3000:]
  want = json.loads(expected.stdout)
  for key in ("final", "fitted", "lo", "analytical"):
    assert got[key] == pytest.approx(want[key], rel=1e-12, abs=0), key


def test_report_command_without_tensorflow(stats_only_python, tmp_path):
  run = tmp_path / "run"
  fake_runs.make_run(str(run))
  expected = report_lib.build_report(str(run)).as_dict()

  # Asking for plots without matplotlib: a clear error, nothing written.
  proc = _run(stats_only_python, "-m", "tff_canary", "report", str(run),
              cwd=tmp_path)
  assert proc.returncode == 2
  assert "tff-canary[plots]" in proc.stderr and "--no_plots" in proc.stderr
  assert not (run / "report.json").exists()

  proc = _run(stats_only_python, "-m", "tff_canary", "report", str(run),
              "--no_plots", "--details", cwd=tmp_path)
  assert proc.returncode == 0, proc.stderr[-3000:]
  assert proc.stdout.startswith("analytical ε ")  # the headline first
  assert "epsilon_final" in proc.stdout  # then, with --details, the table
  got = json.loads((run / "report.json").read_text())
  assert got == json.loads(atomic_files.dumps_json(expected))  # strict JSON
