"""SIGKILL an experiment in training and in the cosine work; --resume finishes it.

The resumed run's report must equal an uninterrupted run's with the same seed:
every random choice of a run derives from its seeds (data, initial weights,
dropout masks, client sampling, canaries, and the simulated DP noise), and
every file is written atomically, so a kill can only lose work since the last
checkpoint, never corrupt it.
"""

import json
import os
import signal
import subprocess
import sys
import time

import numpy as np
import pytest

from run_files import metrics_without_timing
from tff_canary.stats.canaries.cosine_table import CosineTable

pytestmark = [pytest.mark.tff, pytest.mark.slow]

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SCRIPT = os.path.join(REPO, "experiments", "emnist.py")
# 8 rounds, checkpoints every 2, every round's aggregate recorded (gaussian
# canaries), so a kill in round 3 or 4 leaves aggregates.npy written past the
# checkpoint of round 2; 300 held-out canaries make the cosine pass after
# training last several seconds (each regenerates 1.2M floats) in blocks of
# ~20 (a 0.1 GB budget), so the progress bar shows the work half done. 32 examples
# per client (the default) make two local batches, whose order TFF's
# preprocessing left to chance, and the 64 evaluation examples are the first
# of a test set whose client order TFF left unseeded (tff_canary.harness.tasks fixes
# both; tests/test_reproducible.py pins each).
FLAGS = ["--num_rounds=8", "--checkpoint_every=2", "--clients_per_round=6",
         "--examples_per_client=32", "--num_inserted=20", "--num_held_out=300",
         "--assignment=fixed", "--noise_multiplier=0.3", "--eval_every=4",
         "--eval_examples=64", "--memory_budget_gb=0.1",
         "--allow_large_canary_fraction", "--directions=gaussian"]


def _start(out, *extra):
  return subprocess.Popen(
      [sys.executable, SCRIPT, f"--output_dir={out}", *FLAGS, *extra],
      stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, bufsize=1)


def _finish(out, *extra):
  proc = subprocess.run(
      [sys.executable, SCRIPT, f"--output_dir={out}", *FLAGS, *extra],
      capture_output=True, text=True, timeout=600)
  assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]


def _kill_when(proc, predicate, timeout=600):
  """SIGKILLs `proc` as soon as predicate(line) holds for an output line."""
  deadline = time.monotonic() + timeout
  for line in proc.stdout:
    if predicate(line):
      proc.send_signal(signal.SIGKILL)
      proc.wait(timeout=60)
      return
    assert time.monotonic() < deadline, "the run never reached the kill point"
  raise AssertionError(f"the run ended (code {proc.wait()}) before the kill "
                       "point")


def _estimates(out):
  with open(os.path.join(out, "report.json")) as f:
    data = json.load(f)
  return data["estimates"], data["verdict"], data["analytical"]


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory):
  out = str(tmp_path_factory.mktemp("straight") / "run")
  _finish(out)
  return out


def _assert_same_results(out, reference):
  assert _estimates(out) == _estimates(reference)
  assert metrics_without_timing(out) == metrics_without_timing(reference)
  assert (CosineTable.load(os.path.join(out, "cosines.npz"))
          == CosineTable.load(os.path.join(reference, "cosines.npz")))
  np.testing.assert_array_equal(np.load(os.path.join(out, "final_weights.npy")),
                                np.load(os.path.join(reference,
                                                     "final_weights.npy")))
  assert CosineTable.load(os.path.join(out, "cosines.npz")
                          ).rounds_recorded == 8  # every round recorded
  leftovers = [os.path.join(d, n) for d, _, names in os.walk(out)
               for n in names if n.startswith(".tmp-") or "_temp" in d]
  assert not leftovers


def test_kill_during_training_then_resume(uninterrupted, tmp_path):
  out = str(tmp_path / "run")
  proc = _start(out)
  # Kill in round 3 or 4: after the checkpoint of round 2 ("2/8" shows), so
  # the resumed run must redo rounds past the checkpoint.
  _kill_when(proc, lambda line: "3/8" in line or "4/8" in line)
  assert not os.path.exists(os.path.join(out, "report.json"))
  _finish(out, "--resume")
  _assert_same_results(out, uninterrupted)


def test_kill_during_the_cosine_work_then_resume(uninterrupted, tmp_path):
  out = str(tmp_path / "run")
  proc = _start(out)
  _kill_when(proc, lambda line: "canary cosines:" in line
             and "/320" in line and " 0/320" not in line)
  assert not os.path.exists(os.path.join(out, "cosines.npz"))
  _finish(out, "--resume")
  _assert_same_results(out, uninterrupted)


# Orthogonal canaries are scored inside each round: their running statistics
# are in the aggregator state, so they are checkpointed with it. (The resumed
# and the uninterrupted run being the same bits also stands for two runs of
# one command: no second pair of runs is spent on it.) No aggregates, no
# cosine pass; a kill in training loses the rounds since the last checkpoint
# and the resumed run must redo them to the same bits.
ORTHOGONAL = ("--directions=orthogonal",)  # the last flag given wins


@pytest.fixture(scope="module")
def uninterrupted_orthogonal(tmp_path_factory):
  out = str(tmp_path_factory.mktemp("straight_orthogonal") / "run")
  _finish(out, *ORTHOGONAL)
  return out


def test_kill_orthogonal_run_during_training_then_resume(
    uninterrupted_orthogonal, tmp_path):
  out = str(tmp_path / "run")
  proc = _start(out, *ORTHOGONAL)
  _kill_when(proc, lambda line: "3/8" in line or "4/8" in line)
  assert not os.path.exists(os.path.join(out, "report.json"))
  _finish(out, "--resume", *ORTHOGONAL)
  reference = uninterrupted_orthogonal
  assert _estimates(out) == _estimates(reference)
  assert metrics_without_timing(out) == metrics_without_timing(reference)
  table = CosineTable.load(os.path.join(out, "cosines.npz"))
  assert table == CosineTable.load(os.path.join(reference, "cosines.npz"))
  assert table.has_max_cosines and table.has_scheduled_sums
  assert table.rounds_recorded == 8
  assert not os.path.exists(os.path.join(out, "aggregates.npy"))
