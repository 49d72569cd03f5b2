"""The TFF worker_binary never outlives Python, and never holds a pipe open."""

import signal
import subprocess
import sys
import textwrap
import time

import pytest

pytestmark = [pytest.mark.tff, pytest.mark.slow]

_SCRIPT = textwrap.dedent("""
    import os, sys, time
    import tensorflow as tf
    import tensorflow_federated as tff
    from tff_canary.federated.runtime import worker_guard
    worker_guard.install()

    @tff.tensorflow.computation
    def one():
      return tf.constant(1)

    assert one() == 1
    print("WORKERS", *worker_guard.live_workers(), flush=True)
    mode = sys.argv[1]
    if mode == "os_exit":
      os._exit(0)
    if mode == "sleep":
      time.sleep(600)
    if mode == "replace_context":
      # A new context drops the old one: TFF's ServiceManager.__del__ sends
      # its worker SIGINT and waits for it with no timeout.
      import gc
      tff.backends.native.set_sync_local_cpp_execution_context()
      gc.collect()
      assert one() == 1
      print("DONE", flush=True)
""")


def _alive(pid):
  """True if `pid` runs and is not a zombie (a zombie holds no pipe)."""
  try:
    with open(f"/proc/{pid}/stat") as f:
      return f.read().rsplit(")", 1)[1].split()[0] != "Z"
  except FileNotFoundError:
    return False


def _wait_dead(pid, seconds=10.0):
  deadline = time.monotonic() + seconds
  while _alive(pid) and time.monotonic() < deadline:
    time.sleep(0.1)
  return not _alive(pid)


def _run_piped(mode, tmp_path):
  script = tmp_path / "worker_script.py"
  script.write_text(_SCRIPT)
  # stdout is a pipe that is read to EOF: if the worker kept it open this would
  # hang, and the timeout turns that hang into a failure.
  proc = subprocess.run(
      [sys.executable, str(script), mode],
      stdout=subprocess.PIPE,
      stderr=subprocess.DEVNULL,
      timeout=240,
      text=True,
  )
  pids = [int(p) for line in proc.stdout.splitlines()
          if line.startswith("WORKERS") for p in line.split()[1:]]
  return proc.returncode, pids


@pytest.mark.parametrize("mode", ["normal", "os_exit"])
def test_worker_stops_when_python_exits(mode, tmp_path):
  returncode, pids = _run_piped(mode, tmp_path)
  assert returncode == 0
  assert len(pids) == 1, "the script should have started exactly one worker"
  assert _wait_dead(pids[0]), f"worker {pids[0]} outlived python ({mode})"


def test_worker_dies_with_killed_python(tmp_path):
  script = tmp_path / "worker_script.py"
  script.write_text(_SCRIPT)
  proc = subprocess.Popen(
      [sys.executable, str(script), "sleep"],
      stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
  try:
    line = proc.stdout.readline()
    assert line.startswith("WORKERS"), line
    worker = int(line.split()[1])
    assert _alive(worker)
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=30)
    assert _wait_dead(worker), f"worker {worker} outlived a SIGKILLed python"
    # With python and its worker gone, the pipe reaches EOF instead of hanging.
    assert proc.stdout.read() == ""
  finally:
    if proc.poll() is None:
      proc.kill()
      proc.wait()


def test_replacing_the_context_does_not_hang_when_sigint_is_ignored(tmp_path):
  # A command that a non-interactive shell starts with `&` (a CI job in the
  # background, say) runs with SIGINT ignored, and so does every worker it
  # starts: the worker then ignores TFF's SIGINT and TFF's unbounded wait hung
  # forever (seen in a test run). The guard's wait kills it after the grace.
  script = tmp_path / "worker_script.py"
  script.write_text(_SCRIPT)
  proc = subprocess.run(
      [sys.executable, str(script), "replace_context"], stdout=subprocess.PIPE,
      stderr=subprocess.PIPE, text=True, timeout=300,
      preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN))
  assert proc.returncode == 0, proc.stderr[-2000:]
  assert "DONE" in proc.stdout
