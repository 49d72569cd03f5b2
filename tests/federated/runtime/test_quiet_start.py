"""A quiet start (`tff_canary.federated.runtime.quiet_start`).

The command lines set TensorFlow's C++ log level before TensorFlow loads,
unless the user set it, so a CPU machine's "Unable to register cuDNN
factory" errors do not open every run. Each case runs a fresh interpreter
(TensorFlow reads the variable once, when it loads); the suite's own
TF_CPP_MIN_LOG_LEVEL (tests/conftest.py) is removed from its environment.
"""

import os
import pathlib
import re
import subprocess
import sys

import pytest
import repo_paths

ROOT = repo_paths.REPO
VARIABLE = "TF_CPP_MIN_LOG_LEVEL"
QUIET = ("from tff_canary.federated.runtime import quiet_start; "
         "print(quiet_start.quiet_tensorflow()); ")


def _start(code, **env):
  environment = {k: v for k, v in os.environ.items() if k != VARIABLE}
  environment["PYTHONPATH"] = os.pathsep.join(
      [str(ROOT)] + [p for p in [os.environ.get("PYTHONPATH")] if p])
  environment.update(env)
  return subprocess.Popen([sys.executable, "-c", code], env=environment,
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                          text=True)


def _output(process):
  stdout, stderr = process.communicate(timeout=120)
  assert process.returncode == 0, stderr
  return stdout, stderr


def _python(code, **env):
  return _output(_start(code, **env))


@pytest.mark.tff  # imports TensorFlow when it runs
def test_tensorflow_loads_without_the_registration_errors():
  # Both at once: each is mostly TensorFlow's import.
  loud, quiet = _start("import tensorflow"), _start(QUIET + "import tensorflow")
  (_, loud_err), (quiet_out, quiet_err) = _output(loud), _output(quiet)
  if "Unable to register" not in loud_err:
    pytest.skip("this TensorFlow prints no registration errors as it loads")
  assert quiet_out.split() == ["3"]
  assert "Unable to register" not in quiet_err, quiet_err


def test_a_level_the_user_set_is_kept():
  assert _python(QUIET, **{VARIABLE: "1"})[0].split() == ["1"]
  assert _python(QUIET + "import os; print(os.environ['" + VARIABLE + "'])",
                 **{VARIABLE: "0"})[0].split() == ["0", "0"]


# A command line that can load TensorFlow: it imports TensorFlow, the TFF
# layer, the harness's running folder (the others import no TensorFlow,
# tests/project/test_layers.py) or the experiments' CLI.
LOADS_TF = re.compile(r"^\s*(import|from)\s+(tensorflow|tff_canary\.federated"
                      r"|tff_canary\.harness\.running|experiment_cli)\b", re.M)


def test_every_command_line_that_loads_tensorflow_starts_quietly():
  scripts = sorted((ROOT / "experiments").glob("*.py")) + sorted(
      (ROOT / "bench").glob("*.py")) + [ROOT / "tff_canary" / "__main__.py"]
  loud = []
  for path in scripts:
    text = path.read_text(encoding="utf-8")
    # The one place that sets the level: quiet_start.
    assert not re.search(r"environ.{0,20}" + VARIABLE, text), (
        f"{path} sets {VARIABLE} itself")
    if path.name in ("experiment_flags.py", "smoke_mode.py"):
      continue  # modules of the scripts, not command lines
    if (LOADS_TF.search(text) and "quiet_start.quiet_tensorflow()" not in text
        and not re.search(r"^import experiment_cli\b", text, re.M)):
      loud.append(path.name)
  assert not loud, f"no quiet_start in {loud}"
  assert len(scripts) > 10
