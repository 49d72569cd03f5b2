#!/usr/bin/env bash
# Sets up a fresh machine for tff-canary, from nothing but Python 3.11 and pip:
# both environments the tests run on (noxfile.py), with this package editable.
#   .venv         TF 2.14 / TFF 0.87 / tensorflow-privacy 0.9 / dp-accounting
#                 0.4.3 / NumPy 1.25, the test tools, nox and uv
#   .nox/flower   Flower 1.42 / NumPy 2.4 / dp-accounting 0.6, no TensorFlow
#                 (requirements/lock-flower.txt), made by .venv's nox with uv
#
# TFF 0.87 pins jaxlib==0.4.14, which has no wheel here, so plain pip cannot
# install it. uv can, with requirements/overrides.txt (jaxlib==0.4.13). Every
# package, the test tools included, is resolved in ONE uv command: a later,
# separate install would ignore TFF's pins. requirements/lock.txt pins the whole
# tree; regenerate it after changing setup.py with
#   .venv/bin/uv pip compile setup.py --extra tff --extra test --extra docs \
#     --override requirements/overrides.txt --python-version 3.11 \
#     --no-header -o requirements/lock.txt
set -euo pipefail
cd "$(dirname "$0")"

PYTHON=${PYTHON:-}
if [ -z "$PYTHON" ]; then
  if command -v python3.11 >/dev/null 2>&1; then PYTHON=python3.11; else PYTHON=python3; fi
fi
if ! "$PYTHON" -c 'import sys; sys.exit(sys.version_info[:2] != (3, 11))'; then
  echo "install.sh: need Python 3.11, but '$PYTHON' is $("$PYTHON" --version 2>&1)." >&2
  echo "install.sh: set PYTHON=/path/to/python3.11 and run again." >&2
  exit 1
fi

if [ ! -x .venv/bin/python ]; then
  echo "install.sh: creating .venv with $("$PYTHON" --version)"
  "$PYTHON" -m venv .venv
fi
echo "install.sh: installing uv into .venv"
.venv/bin/python -m pip install --quiet --disable-pip-version-check "uv==0.13.9"
echo "install.sh: resolving TFF 0.87 + tff-canary in one uv command (about 30 s cold)"
# --compile-bytecode writes the .pyc files at install time. Without them a
# process under PYTHONDONTWRITEBYTECODE=1 (set on this project's machines)
# compiles TensorFlow's sources at every import: `import tensorflow_federated`
# measured 14.5 s of CPU without them, 5.3 s with, and the tests start well
# over a hundred such processes (tests/project/test_package.py checks the files).
.venv/bin/python -m uv pip install --quiet --python .venv/bin/python \
  --compile-bytecode --override requirements/overrides.txt \
  -r requirements/lock.txt -e ".[tff,test,docs]"
# uv compiles only when it installs something; a .venv made before this line
# existed gets its bytecode here (a few files of Python 2 syntax in the tree
# never compile, hence -qq and the || true; tests/project/test_package.py checks).
if ! .venv/bin/python -c 'import importlib.util as u, os, sys
spec = u.find_spec("tensorflow_federated")
sys.exit(not os.path.exists(u.cache_from_source(spec.origin)))'; then
  echo "install.sh: compiling site-packages to bytecode (about 30 s)"
  .venv/bin/python -m compileall -qq -j 0 .venv/lib/python3.11/site-packages \
    || true
fi
.venv/bin/python - <<'PY'
import importlib.metadata as md
for name in ("nox", "tensorflow", "tensorflow-federated", "tensorflow-privacy",
             "dp-accounting", "numpy", "scipy"):
    print(f"install.sh: .venv: {name} {md.version(name)}")
PY
# The other environment, by the session that tests it (--install-only: make
# it, run nothing; -r: a second ./install.sh updates it in place).
echo "install.sh: making .nox/flower (Flower 1.42, NumPy 2) with nox and uv"
.venv/bin/nox --reuse-existing-virtualenvs --install-only --sessions flower
.nox/flower/bin/python - <<'PY'
import importlib.metadata as md
for name in ("flwr", "ray", "dp-accounting", "numpy", "scipy"):
    print(f"install.sh: .nox/flower: {name} {md.version(name)}")
PY
echo "install.sh: done. Run the tests with: .venv/bin/nox -R"
