"""experiments/flower_app under `flwr run`, as a Flower user runs it.

`flwr run experiments/flower_app --stream` with its own FLWR_HOME (a local
SuperLink, `:local:`, of 4 simulated nodes on Ray), the app's dependencies
not installed (FLWR_DISABLE_RUNTIME_DEPENDENCY_INSTALLATION=1: the Flower
venv has them; experiments/flower_app/README.md) and a tiny run config.
`flwr run` exits 0 even when the run fails (Flower 1.42), so a run counts
as done only when its output has no Flower exit code and the headline,
and its run directory has report.json (`_failure`); a run that fails (a
`clipping` the app refuses) must be seen as failed by the same check. `flwr run` leaves its background `flower-superlink` running,
orphaned: the test stops the processes it started, found by its FLWR_HOME
in their environment (no other process has it), and checks none is left.
"""

from __future__ import annotations

import os
import pathlib
import signal
import socket
import subprocess
import sys
import time

# flwr is imported only so that tests/stack_selection.py sees this file as
# the Flower environment's: the TFF environment has no `flwr` command.
import flwr  # pylint: disable=unused-import
import pytest

import live_processes
import repo_paths

pytestmark = pytest.mark.slow

APP = repo_paths.REPO / "experiments" / "flower_app"
FLWR = pathlib.Path(sys.executable).parent / "flwr"
SUPERLINK_PORT = 39091  # Flower 1.42's local SuperLink (README.md)
CONFIG = ('[superlink]\ndefault = "local"\n\n[superlink.local]\n'
          'address = ":local:"\noptions.num-supernodes = 4\n')
RUN = ('num-server-rounds=1 clients-per-round=4 model-size="small" '
       'num-test-clients=2 eval-every=0 plots=false')
HEADLINE_START = ("analytical ε", "ε-final", "ε-all", "audit:",
                  "noise self-test:")


def _port_taken() -> bool:
  with socket.socket() as s:
    return s.connect_ex(("127.0.0.1", SUPERLINK_PORT)) == 0


def _with_home(before, home) -> list[int]:
  """The live processes not in `before` whose environment has our
  FLWR_HOME (module docstring)."""
  mine = []
  for pid in set(live_processes.processes()) - set(before):
    try:
      with open(f"/proc/{pid}/environ", "rb") as f:
        env = f.read().split(b"\0")
    except OSError:
      continue
    if f"FLWR_HOME={home}".encode() in env:
      mine.append(pid)
  return mine


def _flwr_run(env, run_config: str) -> str:
  done = subprocess.run([str(FLWR), "run", str(APP), "--stream",
                         "--run-config", run_config], cwd=repo_paths.REPO,
                        env=env, capture_output=True, text=True, timeout=300)
  assert done.returncode == 0, done.stderr[-2000:]  # Flower's: 0 either way
  return done.stdout + done.stderr


def _failure(output: str, run_dir: pathlib.Path) -> str:
  """Why a `flwr run` failed ("" if it did not; module docstring)."""
  if "Exit Code:" in output:
    return output[output.index("Exit Code:"):][:80]
  lines = output.splitlines()
  missing = [s for s in HEADLINE_START
             if not any(line.startswith(s) for line in lines)]
  if missing:
    return f"no headline line {missing[0]!r}"
  if not (run_dir / "report.json").is_file():
    return f"no {run_dir / 'report.json'}"
  return ""


def _stop(before, home) -> None:
  for sig, wait in ((signal.SIGTERM, 15.0), (signal.SIGKILL, 15.0)):
    for pid in _with_home(before, home):
      try:
        os.kill(pid, sig)
      except ProcessLookupError:
        pass
    deadline = time.monotonic() + wait
    while _with_home(before, home) and time.monotonic() < deadline:
      time.sleep(0.5)


def test_flwr_run_prints_the_headline_and_a_failed_run_is_seen(tmp_path):
  if _port_taken():
    pytest.skip(f"127.0.0.1:{SUPERLINK_PORT} is taken: `flwr run` would use "
                "that SuperLink and its environment, not this test's")
  home = tmp_path / "flwr"
  home.mkdir()
  (home / "config.toml").write_text(CONFIG)
  env = dict(os.environ, FLWR_HOME=str(home), OPENBLAS_NUM_THREADS="1",
             FLWR_DISABLE_RUNTIME_DEPENDENCY_INSTALLATION="1",
             PYTHONPATH=os.pathsep.join(filter(None, [
                 str(repo_paths.REPO), os.environ.get("PYTHONPATH")])),
             PATH=os.pathsep.join([str(FLWR.parent), os.environ["PATH"]]))
  before = set(live_processes.processes())
  started = time.monotonic()
  try:
    good = tmp_path / "good"
    output = _flwr_run(env, f'{RUN} num-inserted=4 num-held-out=4 '
                            f'output-dir="{good}"')
    middle = time.monotonic()
    assert _failure(output, good) == "", output[-3000:]
    assert f"report: {good / 'report.md'}" in output
    # A clipping the app refuses: the ServerApp raises, Flower prints its
    # exit code and `flwr run` still exits 0.
    bad = tmp_path / "bad"
    output = _flwr_run(env, f'{RUN} clipping="none" output-dir="{bad}"')
    assert "clipping must be one of" in output, output[-3000:]
    assert "Exit Code" in _failure(output, bad), output[-3000:]
    print(f"flwr run: {middle - started:.1f} s, the failing run "
          f"{time.monotonic() - middle:.1f} s")
  finally:
    _stop(before, home)
  assert _with_home(before, home) == []
  left = live_processes.started_since(before, os.getsid(0))
  assert not left, left
