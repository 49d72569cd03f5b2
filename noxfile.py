"""The test suite on both stacks the package supports, one nox session each.

  nox -s stats   the core install (`pip install .`, no TensorFlow) on the
                 newest stack, requirements/lock-numpy2.txt: NumPy 2, the
                 newest SciPy, dp-accounting 0.6, matplotlib and the test
                 tools; runs the statistics layer's and the report command's
                 tests (tests/stack_selection.py), -m "not tff"
  nox -s tff     ./install.sh's .venv (TF 2.14, TFF 0.87, NumPy 1.25,
                 dp-accounting 0.4.3, requirements/lock.txt) and the whole
                 suite, as README.md's two commands

`nox` runs both, stats first, so that the tff session's
tests/project/test_stack_agreement.py compares the two stacks' seeded outputs (it
finds .nox/stats/bin/python; the stats session points it at .venv/bin/python
when that exists). Arguments after `--` go to pytest in place of the
default files: `nox -s stats -- tests` runs every test that needs no
TensorFlow (tests/conftest.py leaves out the files that import it), `nox -s
stats -- tests/stats/canaries/test_cosine_table.py` one file. uv makes the stats
environment (the `uv` backend); the tff one is install.sh's, which needs
uv's overrides.

Regenerate requirements/lock-numpy2.txt after changing setup.py, or to move
to newer releases (add --upgrade), with
  .venv/bin/uv pip compile setup.py --extra plots --extra test \\
    --python-version 3.11 --no-header -o requirements/lock-numpy2.txt
"""

import os
import sys

import nox

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                "tests"))
import stack_selection  # pylint: disable=g-import-not-at-top,wrong-import-position

nox.options.sessions = ["stats", "tff"]
REPO = os.path.dirname(os.path.abspath(__file__))


def _other_python(path):
  """TFF_CANARY_OTHER_PYTHON for tests/project/test_stack_agreement.py, if `path`
  (the other stack's interpreter) exists."""
  path = os.path.join(REPO, path)
  return {"TFF_CANARY_OTHER_PYTHON": path} if os.path.exists(path) else {}


@nox.session(python="3.11", venv_backend="uv")
def stats(session):
  # Bytecode at install time: this project's machines set
  # PYTHONDONTWRITEBYTECODE=1, and the tests start many interpreters.
  # uv itself: tests/project/test_install_without_tf.py makes a venv with it.
  session.install("--compile-bytecode", "-r", "requirements/lock-numpy2.txt",
                  "uv==0.13.9")
  session.install("--compile-bytecode", "--no-deps", "-e", ".")
  env = _other_python(".venv/bin/python")
  # NumPy 2.4's OpenBLAS (0.3.31) with its default 2 threads took 22.5 s for
  # 300 QRs of 256 x 96 that take 1.1 s on one thread (one process on this
  # project's 2-core machine, 2026-12-02; NumPy 1.25's OpenBLAS: 1.3 s with
  # its default threads); test_orthogonal_mechanism's KS power test took
  # 63 s instead of 4 s. The suite runs 2 processes on 2 cores anyway.
  env["OPENBLAS_NUM_THREADS"] = "1"
  files = session.posargs or stack_selection.statistics_files()
  session.run("python", "-m", "pytest", "-m", "not tff", *files, env=env)


@nox.session(venv_backend="none")
def tff(session):
  session.run("./install.sh", external=True)
  session.run(".venv/bin/python", "-m", "pytest", *session.posargs,
              external=True, env=_other_python(".nox/stats/bin/python"))
