"""The experiment runner: config, client sampling, a real run into a run dir."""

import json
import os
import subprocess
import sys

import numpy as np
import pytest

import repo_paths
import small_model
from tff_canary.harness.runner import experiment
from tff_canary.harness.config import experiment_config
from tff_canary.harness.recording import run_dir
from tff_canary.harness.reporting import report as report_lib
from tff_canary.harness.runner import training

# The in-process runs train tests/small_model.py's CNN (tests/conftest.py).
pytestmark = [pytest.mark.tff, pytest.mark.slow,
              pytest.mark.usefixtures("small_emnist_model")]

REPO = str(repo_paths.REPO)


def tiny(output_dir, **overrides):
  """About 30 s on 2 cores (most of it TFF building the computations)."""
  args = dict(output_dir=str(output_dir), num_rounds=4, clients_per_round=6,
              examples_per_client=8, num_inserted=10, num_held_out=10,
              noise_multiplier=0.2, eval_every=2, checkpoint_every=2,
              eval_examples=64, allow_large_canary_fraction=True)
  args.update(overrides)
  return experiment_config.ExperimentConfig(**args)


@pytest.mark.parametrize("kwargs, error, match", [
    (dict(task="mnist"), ValueError, "task"),
    (dict(data="web"), ValueError, "data"),
    (dict(sampling="poisson"), ValueError, "sampling"),
    (dict(noise_multiplier=-0.1), ValueError, "noise_multiplier"),
    (dict(clip=0.0), ValueError, "clip"),
    (dict(clients_per_round=0), ValueError, "clients_per_round"),
    (dict(num_rounds=None), ValueError, "exactly one of num_rounds and epochs"),
    (dict(epochs=2), ValueError, "exactly one of num_rounds and epochs"),
    (dict(num_inserted=-1), ValueError, "num_inserted"),
    (dict(num_inserted=1, num_held_out=1), ValueError, "at least 4"),
    (dict(seed=1.5), TypeError, "seed"),
    (dict(delta=1.0), ValueError, "delta"),
    (dict(server_momentum=1.0), ValueError, "server_momentum"),
    (dict(zeroing="yes"), TypeError, "zeroing"),
    (dict(data="tff", num_clients=10), ValueError, "num_clients"),
    (dict(output_dir=""), ValueError, "output_dir"),
    (dict(num_clients=5, clients_per_round=6, sampling="per_round"),
     ValueError, r"clients_per_round = 6 exceeds num_clients = 5"),
    (dict(presentations=0), ValueError, "presentations"),
    (dict(allow_participation_mismatch=1), TypeError,
     "allow_participation_mismatch"),
])
def test_bad_configuration(kwargs, error, match, tmp_path):
  args = dict(output_dir=str(tmp_path))
  args.update(kwargs)
  with pytest.raises(error, match=match):
    experiment_config.ExperimentConfig(**args)


def test_client_sampling_is_seeded_and_covers_epochs(tmp_path):
  def clients(round_num, num_clients=100, **overrides):
    config = tiny(tmp_path, **dict(dict(clients_per_round=10, seed=3),
                                   **overrides))
    return experiment_config.client_sampler(config, num_clients).clients(
        round_num)

  epoch = np.concatenate([clients(r) for r in range(10)])
  assert sorted(epoch) == list(range(100))  # every client once per epoch
  assert np.array_equal(clients(4), clients(4))
  assert not np.array_equal(clients(12)[:10],
                            epoch[20:30])  # a fresh permutation next epoch
  counts = [clients(r, num_clients=1000, clients_per_round=20,
                    sampling="per_round", seed=1).size for r in range(400)]
  # Poisson sampling: Binomial(1000, 0.02) counts, mean 20, std ~4.4; the
  # mean of 400 rounds has std 0.22.
  assert abs(np.mean(counts) - 20) < 1.0 and np.std(counts) > 3


def test_participation_is_checked_before_training(tmp_path):
  # resolve() runs before any training: every refusal here costs no round.
  # Poisson rate above 1 with TFF's data (num_clients known only from it):
  resolve = experiment_config.resolve
  with pytest.raises(ValueError, match=r"clients_per_round = 6 exceeds "
                     r"num_clients = 5.*rate"):
    resolve(tiny(tmp_path, sampling="per_round"), 5, 10)
  # The paper's EMNIST setting: 3400 clients, 101 per round, 15 epochs.
  paper = dict(num_rounds=None, epochs=15, clients_per_round=101)
  resolved = resolve(tiny(tmp_path, **paper), 3400, 10)
  assert resolved.values["num_rounds"] == 15 * 33
  assert resolved.values["presentations"] == 15
  schedule = resolved.canary_schedule
  assert schedule.rounds_per_epoch == 33 and schedule.num_epochs == 15
  assert resolved.sampler.rounds_per_epoch == 33
  # Before, --presentations (default 1) made canaries take part once while
  # clients took part 15 times; now a contradicting value is refused ...
  with pytest.raises(ValueError, match=r"presentations = 1 contradicts.*15 "
                     "whole epochs.*--allow_participation_mismatch"):
    resolve(tiny(tmp_path, presentations=1, **paper), 3400, 10)
  # ... unless asked for.
  allowed = resolve(tiny(tmp_path, presentations=1,
                         allow_participation_mismatch=True, **paper), 3400, 10)
  assert allowed.values["presentations"] == 1
  assert allowed.canary_schedule.num_epochs == 1
  # Per-round sampling: the canaries' rate is the clients'.
  poisson = resolve(tiny(tmp_path, sampling="per_round", num_rounds=40), 400,
                    10).canary_schedule
  assert poisson.probability == 6 / 400


def test_resolve_records_the_versions_it_is_given(tmp_path):
  versions = {"tensorflow": "9.9", "tff_canary": "0.0"}
  values = experiment_config.resolve(tiny(tmp_path), 30, 10,
                                     versions=versions).values
  assert values["versions"] == versions and values["dim"] == 10
  assert values["num_clients"] == 30 and values["canary_seed"] == 1


def test_resume_refuses_other_settings_but_not_resumable_ones():
  saved = dict(noise_multiplier=0.2, eval_every=2, versions={"a": "1"})
  experiment_config.check_resumable(
      saved, dict(noise_multiplier=0.2, eval_every=5, versions={"a": "2"}),
      "run/config.json")
  with pytest.raises(ValueError, match=r"run/config.json was started with "
                     r"other settings \(noise_multiplier: 0.2 -> 0.3\)"):
    experiment_config.check_resumable(
        saved, dict(noise_multiplier=0.3, eval_every=2), "run/config.json")


# The one finished run of the tests below (a TFF run costs most of their
# time): 12 clients, 6 per round: epochs of 2 rounds; 2 epochs = 4 rounds.
EPOCHS = dict(num_rounds=None, epochs=2, num_clients=12)


@pytest.fixture(scope="module")
def finished_run(tmp_path_factory):
  """(its directory, its report) of a finished tiny run of `EPOCHS`, for the
  tests that read it, resume it and refuse to resume it with other
  settings."""
  out = tmp_path_factory.mktemp("finished")
  report = experiment.run_experiment(tiny(out / "run", **EPOCHS),
                                     progress=False, log=lambda *a: None)
  return out, report


def test_a_run_with_epochs_gives_canaries_the_clients_participation(
    finished_run):
  # Every client and every inserted canary takes part twice (the old
  # default gave the canaries one presentation).
  tmp_path, report = finished_run
  saved = json.load(open(tmp_path / "run" / run_dir.CONFIG))
  assert saved["num_rounds"] == 4 and saved["presentations"] == 2
  part = saved["participation"]
  assert part["clients"] == dict(count=12, min=2, max=2, mean=2.0)
  assert part["canaries"]["min"] == part["canaries"]["max"] == 2
  assert part["mismatch"] is None
  line = ("clients took part 2 times each (2 epochs of 2 rounds), canaries 2 "
          "times each (once per epoch)")
  assert report.participation_line() == line
  assert line in open(tmp_path / "run" / run_dir.REPORT_MD).read()
  assert json.load(open(tmp_path / "run" / run_dir.REPORT_JSON))[
      "participation_line"] == line
  with np.load(tmp_path / "run" / run_dir.PARTICIPATION) as data:
    np.testing.assert_array_equal(data["client_counts"], np.full(12, 2))
  rows = run_dir.RunDir(tmp_path / "run").load_metrics()
  assert sum(r["canaries_inserted"] for r in rows) == (
      2 * report.estimates.num_inserted)
  assert report.table.has_max_cosines  # every round recorded


def test_a_run_writes_its_directory_and_refuses_to_overwrite(finished_run):
  tmp_path, report = finished_run
  config = tiny(tmp_path / "run", **EPOCHS)
  for name in (run_dir.CONFIG, run_dir.METRICS, run_dir.LEDGER,
               run_dir.PARTICIPATION, run_dir.COSINES_CSV, run_dir.COSINES_NPZ,
               run_dir.REPORT_JSON, run_dir.REPORT_MD, run_dir.INITIAL_WEIGHTS,
               run_dir.FINAL_WEIGHTS,
               "plots/cosines.png", "plots/epsilons.png"):
    assert os.path.exists(tmp_path / "run" / name), name
  # Orthogonal canaries (the default) are scored in the rounds: no file of
  # every round.
  assert not os.path.exists(tmp_path / "run" / run_dir.AGGREGATES)
  saved = json.load(open(tmp_path / "run" / run_dir.CONFIG))
  assert saved["dim"] == small_model.DIM and saved["num_rounds"] == 4
  assert saved["canary_seed"] == 1 and saved["noise_seed"] is not None
  assert saved["delta"] == pytest.approx(saved["num_clients"] ** -1.1)
  rows = run_dir.RunDir(tmp_path / "run").load_metrics()
  assert [r["round"] for r in rows] == [0, 1, 2, 3]
  assert rows[1]["eval_accuracy"] is not None and rows[0]["eval_accuracy"] is None
  assert sum(r["canaries_inserted"] for r in rows) == (
      saved["presentations"] * report.estimates.num_inserted)
  assert len(run_dir.RunDir(tmp_path / "run").load_ledger()) == 4
  assert report.estimates.one_run_final is not None  # coin assignment
  # The cosines were taken without the other inserted canaries, in the
  # rounds and in the final model (orthogonal canaries).
  table = run_dir.RunDir(tmp_path / "run").load_table()
  assert table.known_canaries_removed == "final_and_all_iterates"
  assert table.orthogonal and table.has_scheduled_sums
  assert report.estimates.scheduled is not None
  assert report.estimates.tight_final is not None
  # The noise self-test ran before training on the run's aggregator (the
  # verdict depends on the noise implementation, so only its presence here;
  # tests/federated/audit/test_noise_check.py tests the verdicts).
  checked = json.load(open(tmp_path / "run" / run_dir.NOISE_CHECK))
  assert checked["dim"] == small_model.DIM and isinstance(checked["passed"], bool)
  assert report.noise_check == checked
  assert checked["summary"] in report.table_text().splitlines()
  with pytest.raises(FileExistsError, match="--resume"):
    experiment.run_experiment(config, progress=False, log=lambda *a: None)
  # Resuming a finished run recomputes nothing but the cosines and report.
  again = experiment.run_experiment(tiny(tmp_path / "run", resume=True,
                                         **EPOCHS),
                                    progress=False, log=lambda *a: None)
  assert again.estimates == report.estimates


def test_resume_with_other_settings_is_refused(finished_run):
  tmp_path, _ = finished_run
  config_json = (tmp_path / "run" / run_dir.CONFIG).read_text()
  with pytest.raises(ValueError, match="noise_multiplier: 0.2 -> 0.3"):
    experiment.run_experiment(
        tiny(tmp_path / "run", noise_multiplier=0.3, resume=True, **EPOCHS),
        progress=False, log=lambda *a: None)
  assert (tmp_path / "run" / run_dir.CONFIG).read_text() == config_json


def test_missing_tff_data_via_the_script(tmp_path):
  # With the paper's --epochs=15 (and no --num_rounds): before the fix the
  # script's default --num_rounds made it "give exactly one of num_rounds and
  # epochs", so it never reached the data.
  out = tmp_path / "run"
  proc = subprocess.run(
      [sys.executable, os.path.join(REPO, "experiments", "emnist.py"),
       "--data=tff", f"--cache_dir={tmp_path / 'cache'}", f"--output_dir={out}",
       "--epochs=15", "--clients_per_round=101"],
      capture_output=True, text=True, timeout=300)
  assert proc.returncode == 2
  assert "emnist_all.sqlite" in proc.stderr and "Traceback" not in proc.stderr
  assert not out.exists() and not (tmp_path / "cache").exists()


def test_a_stackoverflow_run(tmp_path):
  # The script's --smoke (one round of 8 clients, 8 candidates; the command
  # line tests/project/test_smoke.py counts on this test to run): this checks the
  # task (its model's d, its data, evaluation and the estimates'
  # dimensions), not training over rounds.
  out = tmp_path / "so"
  proc = subprocess.run(
      [sys.executable, os.path.join(REPO, "experiments", "stackoverflow.py"),
       "--smoke", f"--output_dir={out}"],
      capture_output=True, text=True, timeout=900)
  assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
  assert proc.stdout.splitlines()[-1] == (
      f"report: {os.path.join(out, run_dir.REPORT_MD)}")
  report = report_lib.build_report(str(out))
  saved = json.load(open(out / run_dir.CONFIG))
  assert saved["dim"] == 4_050_748 and saved["task"] == "stackoverflow"
  assert report.accuracy is not None and 0.0 <= report.accuracy <= 1.0
  assert report.estimates.dim == 4_050_748
  # Orthogonal canaries (the default): the final-model estimates are taken
  # in the d - |I| + 1 dimensions left after removing the inserted canaries.
  num_inserted = report.estimates.num_inserted
  assert report.estimates.final_mean_only.dim == 4_050_748 - num_inserted + 1


def test_resume_after_a_crash_before_the_first_checkpoint(tmp_path, monkeypatch):
  def crash(*args, **kwargs):
    raise RuntimeError("killed before the first checkpoint")

  # The paper's canaries: their recorder leaves aggregates.npy behind, which
  # the resumed run (from round 0) starts over.
  config = tiny(tmp_path / "run", num_rounds=2, eval_every=0,
                checkpoint_every=2, directions="gaussian")
  monkeypatch.setattr(training, "_checkpoint", crash)
  with pytest.raises(RuntimeError, match="first checkpoint"):
    experiment.run_experiment(config, progress=False, log=lambda *a: None)
  assert os.path.exists(tmp_path / "run" / run_dir.AGGREGATES)
  monkeypatch.undo()
  moved = tmp_path / "moved"
  os.rename(tmp_path / "run", moved)  # a run directory may move between runs
  report = experiment.run_experiment(
      tiny(moved, num_rounds=2, eval_every=0, checkpoint_every=2, resume=True,
           directions="gaussian"),
      progress=False, log=lambda *a: None)
  assert report.estimates.num_inserted + report.estimates.num_held_out == 20
  assert report.table.rounds_recorded == 2  # the one pass saw every round
