"""experiments/emnist.py in a subprocess, for the crash-resume and
reproducibility test: run to completion, or SIGKILLed at an output line."""

import codecs
import json
import os
import re
import signal
import subprocess
import sys
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SCRIPT = os.path.join(REPO, "experiments", "emnist.py")
# This checkout's tff_canary, whatever the caller's PYTHONPATH.
ENV = dict(os.environ, PYTHONPATH=REPO + os.pathsep
           + os.environ.get("PYTHONPATH", ""))


def command(out, flags, *extra):
  """The script's command line."""
  return [sys.executable, SCRIPT, f"--output_dir={out}", *flags, *extra]


def start(out, flags, *extra):
  """The script running in the background, its stderr (the progress bar)
  merged into its stdout, a pipe of bytes for `kill_when`."""
  return subprocess.Popen(command(out, flags, *extra),
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                          bufsize=0, env=ENV)


def finish(out, flags, *extra):
  """Runs the script to completion; it must succeed."""
  proc = subprocess.run(command(out, flags, *extra),
                        capture_output=True, text=True, timeout=600, env=ENV)
  assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]


def kill_when(proc, predicate, timeout=600):
  """SIGKILLs `proc` (from `start`) as soon as predicate(line) holds for a
  line of its output, the line still being written included.

  A progress bar rewrites its line after a carriage return and never ends
  it: a reader of whole lines got the bar's "3/4" only when its next update
  started (after round 4 and its checkpoint), so the output is read as it
  comes.
  """
  deadline = time.monotonic() + timeout
  decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
  pending = ""
  while chunk := os.read(proc.stdout.fileno(), 65536):
    *done, pending = re.split(r"[\r\n]", pending + decoder.decode(chunk))
    if any(predicate(line) for line in [*done, pending]):
      proc.send_signal(signal.SIGKILL)
      proc.wait(timeout=60)
      proc.stdout.close()
      return
    assert time.monotonic() < deadline, "the run never reached the kill point"
  raise AssertionError(f"the run ended (code {proc.wait()}) before the kill "
                       "point")


def estimates(out):
  """report.json's estimates, verdict and analytical epsilons."""
  with open(os.path.join(out, "report.json")) as f:
    data = json.load(f)
  return data["estimates"], data["verdict"], data["analytical"]
