"""A Flower run's directory and report (harness/writing/flower_run.py).

Runs of 10 rounds of Flower's fixed-clipping DP strategy, in-process
(tests/flower_grid.py), 10 clients, d = 10,000, 200 coin-assigned
orthogonal candidates, written as a TFF run's directory and read back by
the report, as `python -m tff_canary report DIR` reads a TFF run's.
"""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest
from flwr.app import Array, ArrayRecord
from flwr.serverapp.strategy import DifferentialPrivacyServerSideAdaptiveClipping
from flwr.serverapp.strategy import DifferentialPrivacyServerSideFixedClipping
from flwr.serverapp.strategy import FedAvg

import flower_grid
import repo_paths
from tff_canary.harness.recording import run_dir as run_dir_lib
from tff_canary.harness.reporting import flower_notes
from tff_canary.harness.writing import flower_run
from tff_canary.mechanisms.gaussian import flower
from tff_canary.mechanisms.gaussian import flower_planted_bugs as planted
from tff_canary.stats.audit import audit
from tff_canary.stats.canaries import canary_config
from tff_canary.stats.canaries import schedules

NODES, ROUNDS, SHAPE = 10, 10, (100, 100)


def fixed(inner, z):
  return DifferentialPrivacyServerSideFixedClipping(
      inner, noise_multiplier=z, clipping_norm=1.0, num_sampled_clients=NODES)


def run(make_dp=fixed, z=1.0, rounds=ROUNDS):
  """(wrapper, w_0, Flower's Result) of one seeded run (module docstring);
  `make_dp(FedAvg, z)` makes the DP strategy."""
  config = canary_config.CanaryConfig(
      seed=2, num_inserted=100, num_held_out=100,
      schedule=schedules.ShuffledEpochs(num_rounds=rounds,
                                        rounds_per_epoch=min(rounds, 5)))
  initial = ArrayRecord({"w": Array(np.zeros(SHAPE, np.float32))})
  state = np.random.get_state()
  with flower_grid.server_identity():
    wrapper = flower.ServerSideCanaries(make_dp(
        FedAvg(fraction_evaluate=0.0, min_train_nodes=NODES,
               min_available_nodes=NODES), z), config)
    np.random.seed(0)  # Flower's noise, seeded as a user's script would
    result = wrapper.start(flower_grid.LocalGrid(
        NODES, flower_grid.noisy_trainer(0.01)), initial, num_rounds=rounds)
  np.random.set_state(state)
  return wrapper, initial, result


@pytest.fixture(scope="module")
def written(tmp_path_factory):
  """The correct run's directory and report."""
  wrapper, initial, result = run()
  path = tmp_path_factory.mktemp("flower") / "run"
  report = flower_run.write_run(path, wrapper, initial, result.arrays,
                                delta=1e-5, plots=False)
  return path, report, wrapper


def test_the_run_directory_holds_what_the_wrapper_kept(written):
  path, _, wrapper = written
  rd = run_dir_lib.RunDir(path)
  config = rd.load_config()
  assert config["writer"] == "flower" and config["noise_multiplier"] == 1.0
  assert config["clients_per_round"] == NODES and config["dim"] == 10000
  table = rd.load_table(config)
  stats = wrapper.statistics()
  np.testing.assert_allclose(table.max_cosine, stats.max_cosine)
  np.testing.assert_array_equal(table.max_round, stats.max_round)
  np.testing.assert_allclose(table.scheduled_sum, stats.scheduled_sum)
  np.testing.assert_array_equal(rd.load_participation(),
                                wrapper.canaries.participation.events)
  ledger = rd.load_ledger()
  assert len(ledger) == ROUNDS and set(ledger.noise_multipliers) == {1.0}
  assert [r["clients"] for r in rd.load_metrics()] == [NODES] * ROUNDS


def test_the_report_command_reads_a_flower_run(written):
  path, report, _ = written
  proc = subprocess.run(
      [sys.executable, "-m", "tff_canary", "report", str(path), "--no_plots"],
      capture_output=True, text=True, timeout=300, cwd=repo_paths.REPO,
      check=False)
  assert proc.returncode == 0, proc.stderr[-3000:]
  headline = report.headline()
  assert "analytical ε" in proc.stdout and "audit: consistent" in proc.stdout
  # The claim is the ledger's: z = 1, each canary in 2 rounds (two epochs
  # of 5), 6.573 at delta 1e-5 (dp-accounting's exact Gaussian).
  assert headline.analytical_name == "2 participations"
  assert headline.analytical_epsilon == pytest.approx(6.573, abs=1e-3)
  # The noise self-test of Flower's noise ran (write_run's default) and
  # passed, with what NumPy's global RNG means; Flower's accountant was not
  # given, and the report says so, in report.md and report.json too.
  assert headline.noise_check_verdict == "passed"
  assert "np.random.seed(s) gives no DP against anyone" in proc.stdout
  line = ("Flower's accountant does not apply: no accountant: the DP "
          "strategy was built without one (accountant=None); the exact "
          "analytical ε of a client in every round is")
  assert line in (path / "report.md").read_text()
  assert line in report.table_text()  # the terminal's --details
  saved = run_dir_lib.RunDir(path).load_report()["flower_accountant"]
  assert saved["applies"] is False and saved["epsilon_all_rounds"] > 6.573


def test_the_audit_refutes_noise_scaled_by_n_squared(written):
  # The correct run is consistent with its claim; the same run with the
  # noise std divided by n once more (effective z = 0.1) is refuted: the
  # strongest bound (95%) exceeds the analytical epsilon. Seeded runs: the
  # verdicts are these runs', measured 1.16 and 26.5 against 6.57.
  _, report, _ = written
  assert report.headline().audit_verdict == "consistent"
  wrapper, initial, result = run(lambda inner, z: planted.NoiseOverNSquared(
      inner, noise_multiplier=z, clipping_norm=1.0,
      num_sampled_clients=NODES))
  buggy = flower_run.write_run(written[0].parent / "bug", wrapper, initial,
                               result.arrays, delta=1e-5, plots=False)
  headline = buggy.headline()
  assert headline.audit_verdict == "refuted"
  assert headline.noise_check_verdict == "failed"  # its variance is 1/n^2
  assert headline.strongest_bound > 2 * headline.analytical_epsilon


def test_one_release_audits_the_final_statistic_once(written, tmp_path):
  # One round of Flower's strategy: each canary's all-iterates statistic is
  # its final-model cosine bit for bit (the final model is w_0 plus the one
  # release), so the audit leaves the "all" bounds out and its two bounds
  # each get 97.5% (docs/method/audit.md, "Why Bonferroni"); the report's
  # table says why those rows are not in the audit.
  wrapper, initial, result = run(rounds=1)
  report = flower_run.write_run(tmp_path, wrapper, initial, result.arrays,
                                delta=1e-5, plots=False, noise_check=False)
  table = run_dir_lib.RunDir(tmp_path).load_table()
  assert audit.repeats_final(table)
  assert sorted(report.verdict.bounds) == ["epsilon_lo final",
                                            "tight one-run bound final"]
  assert report.headline().strongest_bound_confidence == pytest.approx(0.975)
  assert report.table_text().count(audit.REPEATS_FINAL_DETAIL) == 2
  # Ten rounds: the statistics differ, and the audit has its four bounds.
  ten = written[1]
  assert len(ten.verdict.bounds) == 4
  assert ten.headline().strongest_bound_confidence == pytest.approx(0.9875)
  assert audit.REPEATS_FINAL_DETAIL not in ten.table_text()


def test_inserted_canaries_move_the_final_model_along_themselves():
  # Without noise: w_T - w_0 holds each inserted canary twice at C/n = 0.1
  # against client updates of norm 0.01 sqrt(d) = 1 a round, so their
  # final cosines are near 0.2 / |w_T - w_0| > 0 while the held-out ones
  # stay near 0 (sd 1 / sqrt(d) = 0.01; 0.05 is 5 sd).
  wrapper, initial, result = run(z=0.0)
  final = wrapper.final_cosines(initial, result.arrays)
  inserted = wrapper.canaries.inserted
  assert final[inserted].min() > 0.05
  assert np.abs(final[~inserted]).max() < 0.05


def test_an_adaptive_runs_claim_is_the_noise_it_really_added(tmp_path):
  # Flower splits z = 1 into the values' z_v = (1 - (2 * 2)^-2)^-1/2 and
  # the clipped count's 2 x 2 (clipped_count_stddev = 2), but adds the
  # values' noise at C_{t+1} against a clip of C_t, and its 0/1 count has
  # sensitivity 1 (flower_claim's module docstring): each round's ledger
  # event composes z_v C_{t+1} / C_t and 2, computed here from the clips
  # metrics.csv recorded (C_{t+1}: the next round's, the strategy's last).
  wrapper, initial, result = run(
      lambda inner, z: DifferentialPrivacyServerSideAdaptiveClipping(
          inner, noise_multiplier=z, num_sampled_clients=NODES,
          initial_clipping_norm=1.0, clipped_count_stddev=2.0))
  report = flower_run.write_run(tmp_path, wrapper, initial, result.arrays,
                                delta=1e-5, plots=False, noise_check=False)
  rd = run_dir_lib.RunDir(tmp_path)
  clips = np.array([r["clip"] for r in rd.load_metrics()]
                   + [wrapper.strategy.clipping_norm])
  assert clips[0] == 1.0 and len(set(clips)) == ROUNDS + 1  # it moved
  z_v = (1 - 4.0 ** -2) ** -0.5
  expected = ((z_v * clips[1:] / clips[:-1]) ** -2 + 2.0 ** -2) ** -0.5
  np.testing.assert_allclose(rd.load_ledger().noise_multipliers, expected,
                             rtol=1e-12)
  # Not Flower's nominal z = 1 (its ε for these canaries would be 6.573).
  assert np.abs(expected - 1.0).min() > 0.05
  assert report.headline().analytical_epsilon != pytest.approx(6.573,
                                                               abs=0.1)
  line = flower_notes.line(report.flower_accountant)
  assert line.startswith("Flower's accountant does not apply: adaptive "
                         "clipping: Flower's accountant accounts fixed "
                         "clipping only")
  assert report.headline().noise_check_text == flower_notes.NOISE_CHECK_NOT_RUN


def test_a_run_it_cannot_write_is_refused(tmp_path):
  wrapper, initial, result = run()
  with pytest.raises(ValueError, match=r"give delta, or num_clients"):
    flower_run.write_run(tmp_path, wrapper, initial, result.arrays)
  short = flower.ServerSideCanaries(
      DifferentialPrivacyServerSideFixedClipping(
          FedAvg(fraction_evaluate=0.0), 1.0, 1.0, NODES), wrapper.canaries)
  with pytest.raises(ValueError, match=r"strategy released and scored "
                     r"schedule rounds \[\] of the canaries' 10; missing "
                     r"\[0, 1, 2"):
    flower_run.write_run(tmp_path, short, initial, result.arrays, delta=1e-5)
  assert not list(tmp_path.iterdir())  # refused before writing anything
