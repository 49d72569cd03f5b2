"""How the experiment scripts run: fast help and errors, quiet logs, Ctrl-C.

`run(task, doc)` is the `__main__` of experiments/emnist.py and
experiments/stackoverflow.py:

  * `--help` (also `-h`, `-?`, `--helpshort`) prints the script's docstring
    and its flags grouped (`experiment_flags.help_text`), exit 0;
    `--helpfull` is absl's list of every flag, TensorFlow's and absl's too.
  * The flags are parsed and validated (`ExperimentConfig`) before
    TensorFlow is imported: a bad value is one line on stderr,
    `error: noise_multiplier must be nonnegative, got -1.0.`, exit 2.
  * TensorFlow's C++ log lines are off, the cuDNN/cuFFT/cuBLAS
    registration errors of a CPU machine too (`quiet_start`:
    TF_CPP_MIN_LOG_LEVEL=3 unless it is set), and absl's and TensorFlow's Python loggers print
    WARNING and above unless `--verbosity` is given, so the progress bar
    stays on one line; each Python warning is shown once, the project's
    as one line, `warning: <message>` (no Python file, line or source).
  * Ctrl-C (SIGINT) ends with `interrupted: resume with <the same command>
    --resume` on stderr and exit code 130.
"""

from __future__ import annotations

import os
import shlex
import signal
import sys
import warnings

from absl import app
from absl import flags
from absl import logging

from tff_canary.federated.runtime import quiet_start
from tff_canary.harness.config import experiment_config
from tff_canary.harness.recording import run_dir
from tff_canary.stats import call_site

import experiment_flags

# TensorFlow reads it when first imported, in `_run` (nothing above imports
# TensorFlow).
quiet_start.quiet_tensorflow()

FLAGS = flags.FLAGS
HELP_ARGS = ("-h", "-?", "--help", "-help", "--helpshort", "-helpshort")
INTERRUPTED = 130  # 128 + SIGINT, what a shell reports for a Ctrl-C


def wants_help(args: list[str]) -> bool:
  """Whether the command line (without the script) asks for --help."""
  for arg in args:
    if arg == "--":
      return False
    if arg in HELP_ARGS:
      return True
  return False


def resume_command(argv: list[str], executable: str = sys.executable) -> str:
  """The command of `argv` (script first) with `--resume`, for a shell."""
  python = executable
  relative = os.path.relpath(executable)
  if not relative.startswith(os.pardir):
    python = relative
  kept = [arg for arg in argv[1:]
          if arg.lstrip("-").split("=")[0] not in ("resume", "noresume")]
  return shlex.join([python, argv[0], *kept, "--resume"])


def show_each_warning_once() -> None:
  """Each Python warning (its text and category) is printed once.

  Python forgets which warnings it has shown whenever any code changes the
  warning filters (TensorFlow does, e.g. with `warnings.catch_warnings`), so
  a warning raised every round was printed every round, and the filters'
  "once" action forgets the same way. So `warnings.showwarning`, the hook
  Python documents for replacing how warnings are shown, is wrapped to skip
  a warning already shown; the filters (`-W`, PYTHONWARNINGS) still decide
  what is shown at all. The project's warnings (the package's, the
  scripts') are shown as `warning: <message>` (`call_site.line_showwarning`:
  on the command line their file and source line are this module's).
  """
  shown = set()
  show = call_site.line_showwarning(warnings.showwarning,
                                    os.path.dirname(os.path.abspath(__file__)))

  def show_once(message, category, filename, lineno, file=None, line=None):
    key = (str(message), category)
    if key not in shown:
      shown.add(key)
      show(message, category, filename, lineno, file, line)

  warnings.showwarning = show_once


def quiet_logs() -> None:
  """absl's (and so TensorFlow's) Python logging at WARNING, unless
  --verbosity was given; each warning once."""
  if not FLAGS["verbosity"].present:
    logging.set_verbosity(logging.WARNING)
  show_each_warning_once()


class _Interrupted:
  """A SIGINT handler that remembers the interrupt, then raises as Python's.

  An interrupted run ends with the hint whatever exception the interrupt
  surfaces as inside TensorFlow or TFF (a terminal's Ctrl-C reaches TFF's
  worker process too, which shares the script's process group).
  """

  def __init__(self):
    self.received = False

  def __call__(self, signum, frame):
    self.received = True
    signal.default_int_handler(signum, frame)


def _run(config) -> int:
  # TensorFlow and TFF load here, after the flags were checked.
  from tff_canary.harness.runner import experiment  # pylint: disable=g-import-not-at-top
  try:
    report = experiment.run_experiment(config)
  except (FileNotFoundError, FileExistsError, ValueError, TypeError,
          run_dir.RunDirError) as e:
    print(f"error: {e}", file=sys.stderr)
    return 2
  print()
  print(report.terminal_text())
  print(f"\nreport: {os.path.join(report.run_dir, run_dir.REPORT_MD)}")
  return 0


def main_for(task: str):
  """The `main(argv)` of the `task` script (module docstring)."""

  def main(argv):
    if len(argv) > 1:
      print(f"error: unexpected arguments {argv[1:]}; flags are --name=value "
            "(--help lists them).", file=sys.stderr)
      return 2
    interrupted = _Interrupted()
    signal.signal(signal.SIGINT, interrupted)
    try:
      try:
        config = experiment_flags.config_from_flags()
        if config.task != task:
          raise ValueError(f"--task={config.task} in the {task} script.")
        # Before TensorFlow loads, writing nothing: --resume without a run
        # (or a run without --resume), more canaries than dimensions or
        # beyond 10% of the participants, a DDP bound beyond int32.
        experiment_config.check_before_tensorflow(config)
      except (ValueError, TypeError, OSError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
      quiet_logs()
      return _run(config)
    except BaseException:  # pylint: disable=broad-except
      if not interrupted.received:
        raise
      print(f"interrupted: resume with {resume_command(sys.argv)}",
            file=sys.stderr)
      return INTERRUPTED

  return main


def run(task: str, doc: str) -> None:
  """An experiment script's `__main__` (module docstring).

  Not `app.run`: TensorFlow 2.14 imported after `app.run` has initialized
  absl runs a callback of its own (`app.call_after_init` in
  tensorflow/python/distribute/combinations.py) that starts TensorFlow's
  eager context in the middle of its import, and Keras's `Sequential` then
  fails to build (IndexError in `Sequential.add`). So the flags are parsed
  with absl's own parser and help flags, and `main` is called here.
  """
  if wants_help(sys.argv[1:]):
    sys.stdout.write(experiment_flags.help_text(doc))
    sys.exit(0)
  app.define_help_flags()  # --helpfull, --helpxml
  argv = app.parse_flags_with_usage(sys.argv)
  logging.use_absl_handler()
  sys.exit(main_for(task)(argv))
