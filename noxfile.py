"""The test suite on both environments the package supports, one nox session
each. README.md's two commands: `./install.sh` makes both (the second with
`nox --install-only -s flower`), `.venv/bin/nox -R` runs both sessions on
them as they are (-R: reuse the environments, install nothing).

  nox -s flower  .nox/flower, today's stack without TensorFlow:
                 requirements/lock-flower.txt (Flower 1.42 with Ray and its
                 accountant, NumPy 2.4, the newest SciPy, dp-accounting 0.6,
                 matplotlib, the test tools) and this package (no deps). It
                 runs the statistics layer's and the report command's tests
                 on NumPy 2 (tests/stack_selection.py), the core install
                 itself (tests/project/test_install_without_tf.py installs a
                 plain `pip install .` into a fresh venv of this stack and
                 runs the estimators and `python -m tff_canary report`
                 there) and the Flower half's tests, -m "not tff". Not the
                 other test files that import no TensorFlow: the TFF session
                 runs them, and some start TFF at run time.
  nox -s tff     ./install.sh's .venv (TF 2.14, TFF 0.87, NumPy 1.25,
                 dp-accounting 0.4.3, requirements/lock.txt) and the whole
                 suite, `.venv/bin/python -m pytest` (the Flower files are
                 left out there: tests/conftest.py)

`nox` runs both, flower first. Each session points
tests/project/test_stack_agreement.py at the other's interpreter
(TFF_CANARY_OTHER_PYTHON), so the seeded outputs of the two stacks are
compared in both. Arguments after `--` go to pytest in place of the default
files: `nox -R -s flower -- tests/stats/canaries/test_cosine_table.py` runs
one file, `nox -R -s tff -- -n 0 tests/project` a folder in one process.
The tff session makes nothing (install.sh does, with uv's overrides, which
TFF 0.87 needs); the flower session makes its venv and installs into it with
uv (install.sh's, in .venv beside this nox).
"""

import importlib.metadata
import os
import pathlib
import sys

import nox

REPO = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(REPO, "tests"))
import stack_selection  # pylint: disable=g-import-not-at-top,wrong-import-position

nox.options.sessions = ["flower", "tff"]


def flower_session_files():
  """The statistics layer's and the report command's test files
  (tests/stack_selection.py) and the Flower half's: those that import Flower
  or are named for it (`flower.py` in each mechanism package, and their
  tests), relative to the repository; not those that import TensorFlow
  (tests/experiments/test_flower_app_data.py compares the app's data with
  the TFF generator's: the tff session runs it)."""
  flower = [str(path.relative_to(REPO))
            for path in sorted(pathlib.Path(REPO, "tests").rglob("test_*.py"))
            if ("flower" in path.stem or stack_selection.needs_flower(path))
            and not stack_selection.needs_tensorflow(path)]
  return list(dict.fromkeys(stack_selection.statistics_files() + flower))


def _other_python(path):
  """TFF_CANARY_OTHER_PYTHON for tests/project/test_stack_agreement.py, if `path`
  (the other stack's interpreter) exists."""
  path = os.path.join(REPO, path)
  return {"TFF_CANARY_OTHER_PYTHON": path} if os.path.exists(path) else {}


# The environment: stdlib venv (no pip: uv installs), then install.sh's uv
# installs into it. Not nox's "uv" backend: the nox that runs here is
# .venv's, 2025.2.9 (TFF 0.87's attrs<24 excludes later ones: setup.py), and
# it finds no uv 0.13 (it reads `uv version`, which uv 0.7+ made the
# project's version).
@nox.session(python="3.11", venv_backend="venv", venv_params=["--without-pip"])
def flower(session):
  # Bytecode at install time: this project's machines set
  # PYTHONDONTWRITEBYTECODE=1, and the tests start many interpreters.
  install = [sys.executable, "-m", "uv", "pip", "install", "--quiet",
             "--python", session.virtualenv.location, "--compile-bytecode"]
  # uv itself, the version install.sh put beside this nox:
  # tests/project/test_install_without_tf.py makes a venv with it.
  session.run_install(*install, "-r", "requirements/lock-flower.txt",
                      f"uv=={importlib.metadata.version('uv')}", external=True)
  session.run_install(*install, "--no-deps", "-e", ".", external=True)
  env = _other_python(".venv/bin/python")
  # NumPy 2.4's OpenBLAS (0.3.31) with its default 2 threads took 22.5 s for
  # 300 QRs of 256 x 96 that take 1.1 s on one thread (one process on this
  # project's 2-core machine, 2026-12-02; NumPy 1.25's OpenBLAS: 1.3 s with
  # its default threads); test_orthogonal_mechanism's KS power test took
  # 63 s instead of 4 s. The suite runs 2 processes on 2 cores anyway.
  env["OPENBLAS_NUM_THREADS"] = "1"
  session.run("python", "-m", "pytest", "-m", "not tff",
              *(session.posargs or flower_session_files()), env=env)


@nox.session(venv_backend="none")
def tff(session):
  if not os.path.exists(os.path.join(REPO, ".venv", "bin", "python")):
    session.error("no .venv: make it with ./install.sh")
  session.run(".venv/bin/python", "-m", "pytest", *session.posargs,
              external=True, env=_other_python(".nox/flower/bin/python"))
