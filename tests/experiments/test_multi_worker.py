"""Canary DP-FedAvg on TFF's multi-worker runtime equals the local runtime.

experiments/multi_worker.py runs the same rounds on two `worker_binary`
servers and locally; the workers it starts are stopped by PID whatever way
their block ends (tff_canary.federated.runtime.multi_worker).
"""

import os
import re
import signal
import stat
import subprocess
import sys
import time

import pytest

import repo_paths
import experiment_scripts

pytestmark = pytest.mark.tff

# Float32 summation order is the only difference between the runs: each
# worker sums its own clients' clipped updates and the two partial sums are
# then added, where the local runtime adds all 8 in one order. Reordering a
# float32 sum of n terms moves it by at most about (n - 1) * 2^-24 * sum|x_i|
# (8 records of coordinates below the clip, 0.1 initially: ~3e-7 on the sum,
# ~4e-8 after dividing by clients_per_round = 8), and rounds of training at
# learning rates <= 1 carry that forward without growing it much (measured
# over 3 rounds: 1.9e-9 on weights and aggregates; 9.3e-10 after one). 1e-6 leaves ~25x headroom on the bound
# while staying far below what a real difference would cause: the seeded
# noise's std, z C / n = 0.3 * 0.1 / 8 ~ 4e-3, is ~4000x larger, so unseeded
# or differently seeded noise, or a missing canary, fails it.
TOLERANCE = 1e-6
REPO = str(repo_paths.REPO)


def _runs_worker(pid):
  """True if `pid` is a live (not zombie) process running worker_binary."""
  try:
    with open(f"/proc/{pid}/stat", encoding="ascii") as f:
      state = f.read().rsplit(")", 1)[1].split()[0]
    with open(f"/proc/{pid}/cmdline", "rb") as f:
      cmdline = f.read()
  except (FileNotFoundError, ProcessLookupError):
    return False
  return state != "Z" and b"worker_binary" in cmdline


def _exists(pid):
  """True if `pid` is still a process (running or unreaped)."""
  return os.path.exists(f"/proc/{pid}")


@pytest.mark.slow
def test_two_workers_equal_the_local_run_and_are_stopped(tmp_path):
  # The script's own command line, --smoke (one round of 8 clients; the run
  # tests/project/test_smoke.py counts on this test for): it prints what is checked.
  proc = subprocess.run(
      [sys.executable, str(experiment_scripts.path("multi_worker")),
       "--smoke"], cwd=tmp_path, capture_output=True, text=True, timeout=600,
      env=dict(os.environ, PYTHONPATH=REPO + os.pathsep
               + os.environ.get("PYTHONPATH", "")))
  assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
  lines = proc.stdout.splitlines()
  number = r"([-+.\deinf]+)"
  workers = re.fullmatch(r"workers \(stopped\): pids \[(\d+), (\d+)\], CPU "
                         rf"seconds during the rounds {number}, {number}",
                         lines[-3])
  weights = re.fullmatch(rf"final weights: max \|workers - local\| = {number} "
                         rf"\(max \|weight\| {number}\)", lines[-2])
  aggregates = re.fullmatch(
      rf"noised aggregates: max \|workers - local\| = {number} "
      rf"\(max \|aggregate\| {number}\)", lines[-1])
  assert workers and weights and aggregates, lines[-3:]
  assert float(aggregates[1]) <= TOLERANCE, aggregates[0]
  assert float(weights[1]) <= TOLERANCE, weights[0]
  # The comparison has teeth: the aggregates (noise, canaries, clients) are
  # on a scale far above the tolerance, so two runs that drew different noise
  # could not pass.
  assert float(aggregates[2]) > 1000 * TOLERANCE
  # Both workers computed: had the mergeable context not been installed (both
  # runs local) or a worker been left out, an idle worker_binary uses ~0 CPU
  # (measured 0.20 and 0.22 s each here for the one round, 0.7 s for 3;
  # 0.05 s is far above an idle server's and far below the work).
  assert all(float(s) > 0.05 for s in workers.group(3, 4)), workers[0]

  pids = [int(p) for p in workers.group(1, 2)]
  assert len(set(pids)) == 2
  assert not any(_runs_worker(p) for p in pids), pids


def test_workers_are_stopped_when_the_block_is_interrupted():
  from tff_canary.federated.runtime import multi_worker  # pylint: disable=g-import-not-at-top

  pids = []
  with pytest.raises(KeyboardInterrupt):
    with multi_worker.local_workers(2) as workers:
      pids = [w.pid for w in workers]
      assert all(_runs_worker(p) for p in pids)
      raise KeyboardInterrupt  # what Ctrl-C raises in the main thread
  assert len(pids) == 2
  # Stopped and reaped (no zombie left) by local_workers itself.
  assert not any(_exists(p) for p in pids), pids


def test_workers_that_ignore_sigint_stop_at_once():
  # A Python started in the background by a shell script ignores SIGINT, and
  # its workers inherit that. local_workers sends SIGTERM, so they stop at
  # once instead of after the 5 s grace before SIGKILL (per worker).
  from tff_canary.federated.runtime import multi_worker  # pylint: disable=g-import-not-at-top

  previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
  try:
    with multi_worker.local_workers(2) as workers:
      pids = [w.pid for w in workers]
      start = time.monotonic()
  finally:
    signal.signal(signal.SIGINT, previous)
  seconds = time.monotonic() - start
  assert not any(_exists(p) for p in pids), pids
  assert seconds < 4.0, f"stopping took {seconds:.1f} s"
  assert all(w.process.returncode == -signal.SIGTERM for w in workers)


def test_a_failed_start_stops_the_workers_already_started(monkeypatch):
  from tff_canary.federated.runtime import multi_worker  # pylint: disable=g-import-not-at-top

  started = []
  real_start = multi_worker.start_worker

  def start_then_fail(startup_timeout):
    if started:
      raise RuntimeError("planted start failure")
    started.append(real_start(startup_timeout))
    return started[-1]

  monkeypatch.setattr(multi_worker, "start_worker", start_then_fail)
  with pytest.raises(RuntimeError, match="planted start failure"):
    with multi_worker.local_workers(2):
      pytest.fail("the block must not run")
  assert len(started) == 1
  assert not _exists(started[0].pid)


def test_a_worker_that_exits_at_start_is_an_error(monkeypatch):
  from tff_canary.federated.runtime import multi_worker  # pylint: disable=g-import-not-at-top

  monkeypatch.setattr(multi_worker, "worker_binary_path", lambda: "/bin/false")
  with pytest.raises(RuntimeError, match="exited at start 3 times"):
    multi_worker.start_worker()


def test_a_worker_that_never_serves_times_out_and_is_stopped(
    monkeypatch, tmp_path):
  from tff_canary.federated.runtime import multi_worker  # pylint: disable=g-import-not-at-top

  pid_file = tmp_path / "pid"
  fake = tmp_path / "fake_worker"
  fake.write_text(f"#!/bin/sh\necho $$ > {pid_file}\nexec sleep 60\n")
  fake.chmod(fake.stat().st_mode | stat.S_IXUSR)
  monkeypatch.setattr(multi_worker, "worker_binary_path", lambda: str(fake))
  with pytest.raises(TimeoutError, match="did not serve"):
    multi_worker.start_worker(startup_timeout=1.0)
  pid = int(pid_file.read_text())
  assert not _exists(pid)


@pytest.mark.parametrize("call, error, message", [
    (lambda m: m.local_workers(0).__enter__(), ValueError,
     "num_workers must be at least 1, got 0"),
    (lambda m: m.start_worker(startup_timeout=0), ValueError,
     "startup_timeout must be positive, got 0.0"),
    (lambda m: m.mergeable_context("127.0.0.1:1"), TypeError,
     "addresses must be a sequence of 'host:port' strings, got '127.0.0.1:1'"),
    (lambda m: m.mergeable_context([]), ValueError,
     r"addresses must name at least one worker, got \[\]"),
    (lambda m: m.mergeable_context(["127.0.0.1:1", "nohost"]), ValueError,
     r"addresses\[1\] must be 'host:port', got 'nohost'"),
    (lambda m: m.mergeable_context([1234]), TypeError,
     r"addresses\[0\] must be a 'host:port' string, got 1234"),
])
def test_bad_input_names_the_argument(call, error, message):
  from tff_canary.federated.runtime import multi_worker  # pylint: disable=g-import-not-at-top

  with pytest.raises(error, match=message):
    call(multi_worker)
