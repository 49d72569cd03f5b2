"""SIGKILL an experiment in training and in the cosine work; --resume finishes it.

The resumed run's report must equal an uninterrupted run's with the same seed:
every random choice of a run derives from its seeds (data, initial weights,
dropout masks, client sampling, canaries, and the simulated DP noise), and
every file is written atomically, so a kill can only lose work since the last
checkpoint, never corrupt it. (Orthogonal canaries, scored inside the rounds:
tests/harness/runner/test_reproducible.py kills and resumes a run of its command.)
"""

import os

import numpy as np
import pytest

from run_files import metrics_without_timing
import script_runs
from tff_canary.stats.canaries.cosine_table import CosineTable

pytestmark = [pytest.mark.tff, pytest.mark.slow]

# 4 rounds, checkpoints every 2, every round's aggregate recorded (gaussian
# canaries), so a kill in round 4 leaves aggregates.npy written past the
# checkpoint of round 2, and the resumed run redoes rounds 3 and 4. 100
# canaries in blocks of 5 (the 0.045 GB budget keeps the 4 aggregates in
# memory beside 5 canaries of 1.2M floats) make the cosine pass after
# training 20 blocks of a fraction of a second each, so the progress bar
# shows the work started and far from done. 32 examples per client (the
# default) make two local batches, whose order TFF's preprocessing left to
# chance, and the 64 evaluation examples are the first of a test set whose
# client order TFF left unseeded (tff_canary.harness.data.tasks fixes both;
# tests/harness/runner/test_reproducible.py pins each).
NUM_ROUNDS = 4
NUM_CANARIES = 100
FLAGS = [f"--num_rounds={NUM_ROUNDS}", "--checkpoint_every=2",
         "--clients_per_round=6", "--examples_per_client=32",
         "--num_inserted=20", f"--num_held_out={NUM_CANARIES - 20}",
         "--assignment=fixed", "--noise_multiplier=0.3", "--eval_every=2",
         "--eval_examples=64", "--memory_budget_gb=0.045",
         "--allow_large_canary_fraction", "--directions=gaussian"]


def _assert_same_results(out, reference):
  assert script_runs.estimates(out) == script_runs.estimates(reference)
  assert metrics_without_timing(out) == metrics_without_timing(reference)
  assert (CosineTable.load(os.path.join(out, "cosines.npz"))
          == CosineTable.load(os.path.join(reference, "cosines.npz")))
  np.testing.assert_array_equal(np.load(os.path.join(out, "final_weights.npy")),
                                np.load(os.path.join(reference,
                                                     "final_weights.npy")))
  assert CosineTable.load(os.path.join(out, "cosines.npz")
                          ).rounds_recorded == NUM_ROUNDS  # every round
  leftovers = [os.path.join(d, n) for d, _, names in os.walk(out)
               for n in names if n.startswith(".tmp-") or "_temp" in d]
  assert not leftovers


def test_kill_during_training_then_in_the_cosine_work_then_resume(tmp_path):
  # One run killed twice, each kill resumed: in training, then (its resumed
  # process having trained the last rounds) in the cosine work. Each resume
  # starts from what a kill left, as when the two kills were two runs; one
  # run of the command trains once instead of twice (test-suite cost).
  out = str(tmp_path / "run")
  proc = script_runs.start(out, FLAGS)
  # Kill in round 4, once "3/4" shows: after the checkpoint of round 2, so
  # the resumed run must redo round 3 (its aggregate already written) past
  # the checkpoint. metrics.csv, written with each checkpoint, has the 2
  # rows of the last one: the kill came before the next.
  script_runs.kill_when(proc, lambda line: f"3/{NUM_ROUNDS}" in line)
  assert len(metrics_without_timing(out)) == 2
  assert not os.path.exists(os.path.join(out, "report.json"))
  # Resumed, then killed once the cosine pass after training has started.
  proc = script_runs.start(out, FLAGS, "--resume")
  script_runs.kill_when(proc, lambda line: "canary cosines:" in line
                        and f"/{NUM_CANARIES}" in line
                        and f" 0/{NUM_CANARIES}" not in line)
  assert len(metrics_without_timing(out)) == NUM_ROUNDS  # training done
  assert not os.path.exists(os.path.join(out, "cosines.npz"))
  assert not os.path.exists(os.path.join(out, "report.json"))
  script_runs.finish(out, FLAGS, "--resume")
  # The same command, never interrupted.
  reference = str(tmp_path / "straight" / "run")
  script_runs.finish(reference, FLAGS)
  _assert_same_results(out, reference)
