"""The estimator side of the package never imports TensorFlow."""

import pathlib
import subprocess
import sys
import repo_paths

# Modules that a TF-free analysis (the report command, notebooks on saved
# runs) relies on: the whole statistics layer, the report side of the
# harness, the experiments' config (checked before TensorFlow loads) and the
# federated modules that need no TF (reading recorded aggregates).
PACKAGE = repo_paths.REPO / "tff_canary"
# The harness's TF-free folders (tff_canary/harness/config, mechanisms,
# recording and reporting) are imported whole, module by module, so a new module there is
# covered the day it is added.
TF_FREE_HARNESS = ("config", "mechanisms", "recording", "reporting")
TF_FREE = (["tff_canary"] + [
    f"tff_canary.stats.{p.stem}" for p in sorted((PACKAGE / "stats").glob("*.py"))
    if p.stem != "__init__"] + [
    f"tff_canary.harness.{folder}.{p.stem}" for folder in TF_FREE_HARNESS
    for p in sorted((PACKAGE / "harness" / folder).glob("*.py"))] + [
    "tff_canary.federated.structures.nested_search",
    "tff_canary.federated.scores.aggregate_recorder"])


def test_estimator_modules_do_not_import_tensorflow():
  # One fresh interpreter imports them in turn and names the first module
  # after which a TensorFlow package is loaded.
  code = (
      "import importlib, sys\n"
      f"for module in {TF_FREE!r}:\n"
      "  importlib.import_module(module)\n"
      "  bad = [m for m in ('tensorflow', 'tensorflow_federated',\n"
      "                     'tensorflow_privacy') if m in sys.modules]\n"
      "  if bad:\n"
      "    print(module, 'imported', bad)\n"
      "    sys.exit(1)\n")
  proc = subprocess.run([sys.executable, "-c", code], capture_output=True,
                        text=True, timeout=120)
  assert proc.returncode == 0, (proc.stdout, proc.stderr[-2000:])


def test_public_names():
  import tff_canary

  for name in ["epsilon_final", "epsilon_all", "epsilon_lo", "one_run_bound",
               "CosineNull", "gaussian_epsilon", "Ledger", "epsilon_for_delta"]:
    assert callable(getattr(tff_canary, name)), name


def test_site_packages_have_bytecode():
  # install.sh compiles the environment (uv --compile-bytecode). On machines
  # with PYTHONDONTWRITEBYTECODE=1, as this project's are, a module without a
  # .pyc is compiled from source at every import: TensorFlow's thousands of
  # files cost each test subprocess seconds of CPU.
  import importlib.util  # pylint: disable=g-import-not-at-top
  import os  # pylint: disable=g-import-not-at-top
  missing = []
  for name in ("tensorflow", "tensorflow_federated", "tensorflow_privacy",
               "jax", "numpy", "scipy"):
    spec = importlib.util.find_spec(name)
    if spec is None and name not in ("numpy", "scipy"):
      continue  # noxfile.py's flower session: no TF
    origin = spec.origin
    if not os.path.exists(importlib.util.cache_from_source(origin)):
      missing.append(name)
  assert not missing, (
      f"no bytecode for {missing} in {sys.prefix}: run ./install.sh")
