"""The experiment scripts' command line (experiments/experiment_cli.py).

--help groups the project's flags and exits 0; a bad flag is one line, before
TensorFlow is imported; a run's output is its progress bar and results, not
TensorFlow's or absl's logs; Ctrl-C ends with a hint to --resume, exit 130.
"""

import dataclasses
import importlib.util
import os
import re
import shlex
import signal
import subprocess
import sys
import time
import warnings

import pytest

import repo_paths
from tff_canary.harness.config import experiment_config

REPO = str(repo_paths.REPO)
EXPERIMENTS = os.path.join(REPO, "experiments")
HEADINGS = ["Data:", "Training:", "DP:", "Canaries:", "Output:"]
TF_MODULES = ("tensorflow", "tensorflow_federated", "tensorflow_privacy",
              "keras", "jax")


def _load(name):
  """A module of experiments/ (which is not a package)."""
  sys.path.insert(0, EXPERIMENTS)
  try:
    spec = importlib.util.spec_from_file_location(
        name, os.path.join(EXPERIMENTS, f"{name}.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
  finally:
    sys.path.remove(EXPERIMENTS)


def _script(name, *args, python_options=()):
  start = time.monotonic()
  proc = subprocess.run(
      [sys.executable, *python_options, os.path.join(EXPERIMENTS, name),
       *args], capture_output=True, text=True, timeout=300)
  return proc, time.monotonic() - start


def _imported(importtime_stderr):
  """Top-level packages in `python -X importtime`'s report, and the rest."""
  modules, rest = set(), []
  for line in importtime_stderr.splitlines():
    if line.startswith("import time:"):
      modules.add(line.rsplit("|", 1)[1].strip().split(".")[0])
    else:
      rest.append(line)
  return modules, rest


@pytest.mark.parametrize("script", ["emnist.py", "stackoverflow.py"])
def test_help_groups_the_projects_flags(script):
  proc, _ = _script(script, "--help", python_options=("-X", "importtime"))
  assert proc.returncode == 0, proc.stderr[-2000:]
  modules, _ = _imported(proc.stderr)
  assert not modules & set(TF_MODULES), modules & set(TF_MODULES)
  lines = proc.stdout.splitlines()
  assert [l for l in lines if l in HEADINGS] == HEADINGS  # in this order
  for field in dataclasses.fields(experiment_config.ExperimentConfig):
    assert re.search(rf"^  --(\[no\])?{field.name}: ", proc.stdout, re.M), (
        field.name)
  assert "  --noise_multiplier: DP noise multiplier z." in proc.stdout
  # absl's and TensorFlow's own flags are left to --helpfull.
  for foreign in ("--verbosity", "--logtostderr", "--only_check_args"):
    assert foreign not in proc.stdout
  full, _ = _script(script, "--helpfull")
  assert "--verbosity" in full.stdout and "--noise_multiplier" in full.stdout


@pytest.mark.parametrize("flag, message", [
    ("--noise_multiplier=-1",
     "error: noise_multiplier must be nonnegative, got -1.0."),
    ("--clients_per_round=0",
     "error: clients_per_round must be at least 1, got 0."),
    ("--insertion=client",
     "error: insertion must be one of ('server', 'clients'), got 'client'."),
    ("--canary_norm=-1",
     "error: canary_norm must be positive, got -1.0."),
])
def test_a_bad_flag_is_answered_before_tensorflow_loads(tmp_path, flag,
                                                        message):
  out = tmp_path / "run"
  proc, seconds = _script("emnist.py", flag, f"--output_dir={out}",
                          python_options=("-X", "importtime"))
  modules, rest = _imported(proc.stderr)
  assert proc.returncode == 2
  assert [l for l in rest if l.strip()] == [message]  # one line, no traceback
  # importtime names every module imported: none of TensorFlow's. (Before,
  # experiment_flags imported tff_canary.harness.runner.experiment and so TF.)
  assert not modules & set(TF_MODULES), modules & set(TF_MODULES)
  # Importing TensorFlow alone takes 10-20 s here; the answer took 2-5 s on
  # 2 busy cores (most of it dp-accounting's SciPy, via tff_canary).
  assert seconds < 10
  assert not out.exists()


def test_resume_command_is_the_same_command_with_resume(tmp_path,
                                                        monkeypatch):
  cli = _load("experiment_cli")
  argv = ["experiments/emnist.py", "--output_dir=runs/a b", "--noresume",
          "--num_rounds=4"]
  assert cli.resume_command(argv, "/opt/py/bin/python") == (
      "/opt/py/bin/python experiments/emnist.py '--output_dir=runs/a b' "
      "--num_rounds=4 --resume")
  assert cli.resume_command(["e.py", "--resume"], "/opt/py/bin/python") == (
      "/opt/py/bin/python e.py --resume")
  # A Python inside the current directory is shown relative to it.
  monkeypatch.chdir(tmp_path)
  assert cli.resume_command(["e.py"], str(tmp_path / ".venv" / "bin" / "py")
                            ) == ".venv/bin/py e.py --resume"


def test_each_warning_is_shown_once():
  cli = _load("experiment_cli")
  text = "a warning of every round"
  shown = []

  def record(message, *args, **kwargs):
    del args, kwargs
    shown.append(str(message))

  def three_rounds():
    for _ in range(3):
      warnings.warn(text, UserWarning)
      with warnings.catch_warnings():  # as TensorFlow does within a round
        pass

  with warnings.catch_warnings():
    warnings.resetwarnings()  # Python's default action, without pytest's
    warnings.showwarning = record
    three_rounds()
    assert shown == [text] * 3  # the default shows it again every round
    del shown[:]
    cli.show_each_warning_once()
    three_rounds()
    three_rounds()
    warnings.warn("another one", UserWarning)
  assert shown == [text, "another one"]


def test_the_projects_warnings_are_one_line_without_python_source(capsys):
  # On the command line the package's warnings are attributed to the
  # script's call (`call_site.user_stacklevel`): the canary-fraction warning
  # to experiment_cli.py's `report = experiment.run_experiment(config)`,
  # which Python printed under the message. A library's keeps its location.
  cli = _load("experiment_cli")
  shown = []

  def record(message, category, filename, lineno, file=None, line=None):
    del category, lineno, file, line
    shown.append((str(message), filename))

  library = os.path.join(os.sep, "lib", "site-packages", "keras", "layer.py")
  with warnings.catch_warnings():
    warnings.resetwarnings()
    warnings.showwarning = record
    cli.show_each_warning_once()
    for _ in range(2):  # and each once
      warnings.warn_explicit("canaries are 33.3% of the run's participants",
                             UserWarning, cli.__file__, 120)
      warnings.warn_explicit("deep inside", UserWarning,
                             experiment_config.__file__, 7)
      warnings.warn_explicit("a library's", UserWarning, library, 3)
  assert capsys.readouterr().err.splitlines() == [
      "warning: canaries are 33.3% of the run's participants",
      "warning: deep inside"]
  assert shown == [("a library's", library)]


def test_quiet_logs_keep_an_explicit_verbosity(monkeypatch):
  from absl import logging  # pylint: disable=g-import-not-at-top
  cli = _load("experiment_cli")
  monkeypatch.setattr(warnings, "showwarning", warnings.showwarning)
  flag = cli.FLAGS["verbosity"]
  before = logging.get_verbosity()
  try:
    for given, expected in ((0, logging.WARNING), (1, logging.INFO)):
      monkeypatch.setattr(flag, "present", given)  # --verbosity=0 or not
      logging.set_verbosity(logging.INFO)
      cli.quiet_logs()
      assert logging.get_verbosity() == expected
  finally:
    logging.set_verbosity(before)


@pytest.mark.tff
@pytest.mark.slow
def test_a_run_is_quiet_and_ctrl_c_says_how_to_resume(tmp_path):
  # 40 rounds, a checkpoint every round (each used to log 4 lines: TF's
  # "Assets written" twice, the fingerprint, absl's "Program state saved");
  # SIGINT once the bar shows round 2 done, so two checkpoints were written.
  # 15 expected inserted canaries beside 240 client participations: 5.9%,
  # above the CanaryFractionWarning's 5% (shown once, checked below) and
  # below the 10% that needs --allow_large_canary_fraction.
  flags = [f"--output_dir={tmp_path / 'run'}", "--num_rounds=40",
           "--clients_per_round=6", "--examples_per_client=8",
           "--num_inserted=20", "--num_held_out=10", "--eval_every=0",
           "--checkpoint_every=1"]
  script = os.path.join(EXPERIMENTS, "emnist.py")
  proc = subprocess.Popen([sys.executable, script, *flags],
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
  output = b""
  deadline = time.monotonic() + 600
  try:
    while not re.search(rb"emnist: +\d+%.*\| 2/40", output):
      chunk = proc.stdout.read1(4096)
      assert chunk and time.monotonic() < deadline, output.decode()[-3000:]
      output += chunk
    proc.send_signal(signal.SIGINT)
    sent = time.monotonic()
    output += proc.stdout.read()
    code = proc.wait(timeout=120)
  finally:
    if proc.poll() is None:
      proc.kill()
      proc.wait()
  text = output.decode()
  assert code == 130, text[-3000:]
  assert time.monotonic() - sent < 60
  assert "Traceback" not in text
  lines = [l for l in text.split("\n") if l.strip()]
  hint = lines[-1]
  assert hint.startswith("interrupted: resume with ")
  command = shlex.split(hint[len("interrupted: resume with "):])
  assert os.path.samefile(command[0], sys.executable)
  assert command[1:] == [script, *flags, "--resume"]
  # No TF C++ INFO lines, no absl or TF Python INFO lines.
  for pattern in (r"^\S* ?I\d{4} \d\d:\d\d", r"\] Program state saved",
                  r"INFO:tensorflow", r" I tensorflow/", r"Assets written"):
    assert not re.search(pattern, text, re.M), pattern
  # TensorFlow's start-up ERROR lines come at most once, from this process.
  assert text.count("Unable to register cuDNN factory") <= 1, text[-3000:]
  # The bar's updates (carriage returns) all sit on one line.
  assert len([l for l in lines if re.search(r"emnist: +\d+%", l)]) == 1
  # The CanaryFractionWarning once, its message alone (no Python file, line
  # or source line: `report = experiment.run_experiment(config)`).
  assert len(re.findall(r"^warning: canaries are 5\.9% of the run's "
                        r"participants \(", text, re.M)) == 1, text[-3000:]
  assert "CanaryFractionWarning" not in text
  assert "run_experiment(config)" not in text
