"""The DDP aggregator in the experiments (`--aggregator=ddp`): config and
flags, the report's DDP bound, and a tiny EMNIST run through TFF's
distributed-DP chain (tff_canary.mechanisms.ddp.claim, dp_fedavg,
federated.ddp_chain).

TFF seeds the DDP noise and rotation from the clock, so the run here is at
noise 0 (its assertions hold whatever the rotation) and nothing checks a
draw of the noise.
"""

import json
import math
import os
import subprocess
import sys

import numpy as np
import pytest

import repo_paths
import run_files
from tff_canary.harness.config import experiment_config
from tff_canary.harness.recording import run_dir
from tff_canary.mechanisms import registry
from tff_canary.mechanisms.ddp import spec as ddp_mechanism
from tff_canary.stats import atomic_files
from tff_canary.stats.accounting import ddp_accounting
from tff_canary.stats.accounting import ddp_parameters

# The in-process runs train tests/small_model.py's CNN (tests/conftest.py).
pytestmark = pytest.mark.usefixtures("small_emnist_model")


REPO = str(repo_paths.REPO)
CLIENTS = dict(insertion="clients", seeded_noise=False, server_momentum=0.0,
               directions="gaussian")  # orthogonal: test_orthogonal_canaries
DDP = dict(aggregator="ddp", clip=1.0, **CLIENTS)


def _config(tmp_path, **overrides):
  args = dict(output_dir=str(tmp_path / "run"), **DDP)
  args.update(overrides)
  return experiment_config.ExperimentConfig(**args)


# Config and flags -----------------------------------------------------------


def test_ddp_defaults_are_tffs_and_gaussian_has_none(tmp_path):
  config = _config(tmp_path)
  # TFF's DistributedDpSumFactory defaults; 20 bits as tff.learning's
  # ddp_secure_aggregator.
  assert (config.ddp_mechanism, config.ddp_bits, config.ddp_beta,
          config.ddp_rotation) == ("distributed_skellam", 20, 0.0, "dft")
  gaussian = experiment_config.ExperimentConfig(output_dir=str(tmp_path))
  assert gaussian.aggregator == "gaussian"
  assert all(getattr(gaussian, k) is None
             for k in ddp_mechanism.DEFAULTS)
  assert experiment_config.AGGREGATORS == ("gaussian", "ddp", "tree",
                                           "banded", "blt")


@pytest.mark.parametrize("kwargs, match", [
    (dict(insertion="server", seeded_noise=True, server_momentum=0.9),
     r"aggregator='ddp' \(--aggregator=ddp\) needs 3 more settings; add "
     r"--insertion=clients --noseeded_noise --server_optimizer=sgd "
     r"--server_momentum=0 "),
    (dict(clip=None), r"needs 1 more setting; add --clip=C.*fixed clip"),
    (dict(zeroing=True), r"add --nozeroing"),
    (dict(ddp_bits=3), r"ddp_bits=3, clients_per_round=50: bits must be >= "
     r"log2\(clients_per_round\)"),
    (dict(ddp_bits=23),
     r"ddp_bits must be at most 22 \(TFF's limit\), got 23"),
    (dict(ddp_bits=0), r"ddp_bits must be at least 1, got 0"),
    (dict(ddp_mechanism="dgauss"), r"ddp_mechanism must be one of"),
    (dict(ddp_rotation="fft"), r"ddp_rotation must be one of"),
    (dict(ddp_beta=1.0), r"ddp_beta"),
    (dict(aggregator="dp"), r"aggregator must be one of \('gaussian', "
     r"'ddp', 'tree', 'banded', 'blt'\), got 'dp'"),
    (dict(aggregator="gaussian", ddp_bits=16),
     r"ddp_bits=16 is for aggregator='ddp'; got aggregator='gaussian'"),
])
def test_bad_ddp_configs_are_refused(tmp_path, kwargs, match):
  with pytest.raises(ValueError, match=match):
    _config(tmp_path, **kwargs)


def test_config_json_round_trip_and_old_files(tmp_path):
  config = _config(tmp_path, ddp_bits=16, ddp_mechanism="distributed_dgauss",
                   ddp_rotation="hd", ddp_beta=0.1)
  values = experiment_config.resolve(config, 300, 10).values
  again = experiment_config.ExperimentConfig.from_json(
      json.loads(json.dumps(values)))
  assert again.aggregator == "ddp" and all(
      getattr(again, k) == getattr(config, k)
      for k in ddp_mechanism.DEFAULTS)
  assert (again.ddp_bits, again.ddp_mechanism, again.ddp_rotation,
          again.ddp_beta) == (16, "distributed_dgauss", "hd", 0.1)
  assert registry.of_config(values).name == "ddp"
  # A config.json from before the DDP aggregator: a Gaussian run, and it
  # resumes under today's defaults (which write the new keys).
  old = experiment_config.resolve(
      experiment_config.ExperimentConfig(output_dir=str(tmp_path)), 300,
      10).values
  saved = {k: v for k, v in old.items()
           if k != "aggregator" and not k.startswith("ddp_")}
  assert registry.of_config(saved).name == "gaussian"
  experiment_config.check_resumable(saved, old, "run/config.json")
  with pytest.raises(ValueError, match=r"aggregator: 'gaussian' -> 'ddp'"):
    experiment_config.check_resumable(saved, dict(old, aggregator="ddp"),
                                      "run/config.json")
  with pytest.raises(ValueError, match="config.json's aggregator must be"):
    registry.of_config({"aggregator": "both"})


@pytest.mark.parametrize("flags, message", [
    # One message names every missing flag (it used to take four tries).
    (["--aggregator=ddp"],
     "error: aggregator='ddp' (--aggregator=ddp) needs 3 more settings; add "
     "--insertion=clients --noseeded_noise --clip=C"),
    # The paper's canaries read each round's aggregate from the weights.
    (["--aggregator=ddp", "--directions=gaussian"],
     "error: aggregator='ddp' (--aggregator=ddp) needs 4 more settings; add "
     "--insertion=clients --noseeded_noise --server_optimizer=sgd "
     "--server_momentum=0 --clip=C"),
    (["--aggregator=ddp", "--insertion=clients", "--noseeded_noise",
      "--server_momentum=0"],
     "error: aggregator='ddp' (--aggregator=ddp) needs 1 more setting; add "
     "--clip=C"),
])
def test_a_bad_ddp_flag_is_answered_before_tensorflow_loads(tmp_path, flags,
                                                            message):
  out = tmp_path / "run"
  proc = subprocess.run(
      [sys.executable, "-X", "importtime",
       os.path.join(REPO, "experiments", "emnist.py"), *flags,
       f"--output_dir={out}"], capture_output=True, text=True, timeout=120)
  assert proc.returncode == 2
  lines = [l for l in proc.stderr.splitlines()
           if l.strip() and not l.startswith("import time:")]
  assert len(lines) == 1 and lines[0].startswith(message), lines
  imported = {l.rsplit("|", 1)[1].strip().split(".")[0]
              for l in proc.stderr.splitlines()
              if l.startswith("import time:")}
  assert not imported & {"tensorflow", "tensorflow_federated", "keras"}
  assert not out.exists()


# The report of a DDP run, TF-free --------------------------------------------


@pytest.mark.parametrize("mechanism, paper", [
    ("distributed_skellam", "arXiv 2110.04995) Theorem 3.5"),
    ("distributed_dgauss", "arXiv 2102.06387) Proposition 14"),
])
def test_the_report_of_a_ddp_run_shows_and_audits_the_ddp_bound(
    tmp_path, mechanism, paper):
  import fake_runs  # pylint: disable=g-import-not-at-top
  from tff_canary.harness.reporting import report as report_lib  # pylint: disable=g-import-not-at-top
  path = fake_runs.make_run(tmp_path / "run", noise_multiplier=0.8)
  rd = run_dir.RunDir(path)
  os.remove(rd.file(run_dir.LEDGER))  # a DDP run has none
  config = dict(rd.load_config(), insertion="clients", canary_norm=10.0,
                clip=1.0, aggregator="ddp", ddp_mechanism=mechanism,
                ddp_bits=16, ddp_beta=0.0, ddp_rotation="dft")
  atomic_files.write_json(rd.file(run_dir.CONFIG), config)
  events = rd.load_participation()
  outcomes = [dict(round_num=int(r), canary_id=int(j), norm=10.0, stages=[],
                   zeroed=False, clipped=False, dp_clip=1.0, dp_clipped=True)
              for r, j in events]
  atomic_files.write_json(rd.file(run_dir.CANARY_OUTCOMES),
                          dict(canary_norm=10.0, outcomes=outcomes))
  report = report_lib.build_report(path)
  # The bound of the factory's parameters as config.json gives them (each
  # inserted canary of the fake run takes part once).
  expected = ddp_accounting.ddp_epsilon(ddp_parameters.ddp_parameters(
      0.8, 20, 16, 1.0, fake_runs.DIM, mechanism=mechanism), delta=1e-5)
  assert report.analytical == {"one participation": expected.epsilon}
  assert math.isfinite(expected.epsilon) and expected.epsilon > 0
  assert report.claimed_epsilon == expected.epsilon
  assert report.claim == "analytical DDP bound (one participation)"
  assert report.verdict.claimed_epsilon == expected.epsilon
  rows = [r for r in report.rows() if r[1] == "analytical"]
  assert [r[0] for r in rows] == ["analytical DDP bound: one participation"]
  assert paper in rows[0][3] and "no DpEvent" in rows[0][3]
  text, markdown = report.table_text(), report.to_markdown()
  assert "analytical DDP bound: one participation" in text
  assert "| analytical DDP bound: one participation |" in markdown
  # The mode line: the chain, extra cohort members, plain sums.
  line = report.insertion.mode_line()
  assert f"TFF's distributed-DP chain ({mechanism}, 16 bits, dft rotation" \
      in line
  assert "extra members of the cohort" in line
  assert "clients_per_round = 20 real clients" in line
  assert "plain sums in this simulation" in line
  assert line in text.splitlines()
  saved = report.as_dict()
  assert saved["ddp_bound"]["one participation"]["epsilon"] == (
      expected.epsilon)
  assert saved["insertion"]["chain"].startswith(mechanism)


def test_a_ddp_config_json_without_its_parameters_is_an_error(tmp_path):
  import fake_runs  # pylint: disable=g-import-not-at-top
  from tff_canary.harness.reporting import report as report_lib  # pylint: disable=g-import-not-at-top
  path = fake_runs.make_run(tmp_path / "run")
  rd = run_dir.RunDir(path)
  atomic_files.write_json(rd.file(run_dir.CONFIG), dict(
      rd.load_config(), insertion="clients", canary_norm=10.0,
      aggregator="ddp", clip=1.0, ddp_mechanism="distributed_skellam"))
  atomic_files.write_json(rd.file(run_dir.CANARY_OUTCOMES),
                          dict(canary_norm=10.0, outcomes=[]))
  with pytest.raises(run_dir.RunDirError, match=r"aggregator='ddp' lacks "
                     r"\['ddp_bits', 'ddp_beta', 'ddp_rotation'\]"):
    report_lib.build_report(path)


def test_a_gaussian_report_has_no_ddp_bound(tmp_path):
  import fake_runs  # pylint: disable=g-import-not-at-top
  from tff_canary.harness.reporting import report as report_lib  # pylint: disable=g-import-not-at-top
  report = report_lib.build_report(fake_runs.make_run(tmp_path / "run"))
  assert report.analytical_claim.detail is None
  assert report.as_dict()["ddp_bound"] is None
  assert [r[0] for r in report.rows() if r[1] == "analytical"][0] == (
      "analytical: one participation")


# TFF ------------------------------------------------------------------------


@pytest.mark.tff
@pytest.mark.parametrize("mechanism, rotation", [
    ("distributed_dgauss", "hd"), ("distributed_skellam", "dft")])
def test_the_chain_holds_the_real_factorys_state(mechanism, rotation):
  # DistributedDpSumFactory's own state after initialize() against
  # ddp_chain's (plain sums); only the rotation seed differs (TFF's clock).
  # With beta > 0 TFF computes the rounded norm bound in float32 and
  # ddp_parameters in float64: equal to 1e-6 relative (float32's 6e-8 ulp).
  import warnings  # pylint: disable=g-import-not-at-top
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  import tensorflow_federated as tff  # pylint: disable=g-import-not-at-top
  from tensorflow_federated.python.aggregators import distributed_dp  # pylint: disable=g-import-not-at-top
  from tff_canary.mechanisms.ddp import chain as ddp_chain  # pylint: disable=g-import-not-at-top
  value_type = tff.TensorType(np.float32, [1000])
  params = ddp_parameters.ddp_parameters(0.7, 30, 18, 0.5, 1000,
                                         mechanism=mechanism,
                                         rotation=rotation, beta=0.2)
  ours = ddp_chain.ddp_sum_factory(params).create(value_type).initialize()
  with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    real = distributed_dp.DistributedDpSumFactory(
        noise_multiplier=0.7, expected_clients_per_round=30, bits=18,
        l2_clip=0.5, beta=0.2, mechanism=mechanism,
        rotation_type=rotation).create(value_type).initialize()
  tf.nest.assert_same_structure(ours[0], real[0])
  for a, b in zip(tf.nest.flatten(ours[0]), tf.nest.flatten(real[0])):
    a, b = np.asarray(a), np.asarray(b)
    if a.dtype.kind == "f":
      np.testing.assert_allclose(a, b, rtol=1e-6)
    else:
      np.testing.assert_array_equal(a, b)


def _tiny(path, **overrides):
  """tests/harness/runner/test_client_insertion.py's tiny EMNIST run, with DDP."""
  args = dict(output_dir=str(path), num_rounds=2, clients_per_round=6,
              examples_per_client=8, num_inserted=10, num_held_out=10,
              noise_multiplier=0.0, eval_every=0, checkpoint_every=2,
              eval_examples=64, allow_large_canary_fraction=True, **DDP)
  args.update(overrides)
  return experiment_config.ExperimentConfig(**args)


@pytest.fixture(scope="module")
def ddp_run(tmp_path_factory):
  """One tiny DDP run at noise 0: (report, run dir, trained state)."""
  from tff_canary.harness.runner import experiment  # pylint: disable=g-import-not-at-top
  from tff_canary.harness.runner import training  # pylint: disable=g-import-not-at-top
  path = tmp_path_factory.mktemp("ddp") / "run"
  trained = {}
  train = training.train

  def keep_state(run, state, *args):
    trained["state"] = train(run, state, *args)
    return trained["state"]

  with pytest.MonkeyPatch.context() as patch:
    patch.setattr(training, "train", keep_state)
    report = experiment.run_experiment(_tiny(path), progress=False,
                                       log=lambda *a: None)
  return report, run_dir.RunDir(path), trained["state"]


@pytest.mark.tff
@pytest.mark.slow
def test_a_ddp_run_trains_through_tffs_distributed_dp_chain(ddp_run):
  from tff_canary.federated.insertion import client_round_state  # pylint: disable=g-import-not-at-top
  report, rd, state = ddp_run
  saved = rd.load_config()
  assert saved["aggregator"] == "ddp" and saved["ddp_bits"] == 20
  params = ddp_parameters.ddp_parameters(0.0, 6, 20, 1.0, saved["dim"])
  # The trained state is the DDP chain's: TFF's distributed Skellam query
  # with the norm bounds and local std of the config's parameters (with
  # --aggregator ignored it would be a Gaussian query with l2_norm_clip).
  query = client_round_state.dp_aggregator_state(state).query_state
  assert {"l1_norm_bound", "l2_norm_bound", "local_stddev"} <= set(
      query._fields)
  np.testing.assert_allclose(float(query.l2_norm_bound),
                             params.l2_sensitivity, rtol=1e-6)
  assert int(query.l1_norm_bound) == params.l1_sensitivity
  assert float(query.local_stddev) == 0.0  # noise 0
  # No DpEvent, so no ledger; the report's analytical ε is the DDP bound.
  assert not rd.exists(run_dir.LEDGER)
  assert report.analytical == {"one participation": math.inf}  # noise 0
  assert report.claim == "analytical DDP bound (one participation)"
  assert any(r[0] == "analytical DDP bound: one participation"
             for r in report.rows())
  # The noise self-test ran on the chain with its own claim (0 at noise 0).
  with open(rd.file(run_dir.NOISE_CHECK)) as f:
    check = json.load(f)
  assert check["passed"] and check["claim"] == (
      "claimed_std given by the caller")
  assert check["claimed_std"] == [0.0] * len(check["claimed_std"])


@pytest.mark.tff
@pytest.mark.slow
def test_ddp_canary_clients_enter_the_sum_at_the_clip(ddp_run):
  # Noise 0, clip 1 below the canary norm 10, rounding on a grid of
  # 1/scale = 1e-6 (TFF's cap on the scale): each canary client enters the
  # sum at the clip. The chain's mean divides by every participant; the
  # recorded aggregate is rescaled to sum / clients_per_round, so each
  # canary's coefficient is 1/6 (without the rescale 1/(6 + k), k >= 1
  # canaries a round: <= 1/7, 14% off). Least squares on the round's
  # canaries; the clients' own updates project on c_j at the null's scale
  # 1/sqrt(d).
  from tff_canary.federated.scores import aggregate_recorder  # pylint: disable=g-import-not-at-top
  from tff_canary.federated.insertion import canary_directions  # pylint: disable=g-import-not-at-top
  report, rd, _ = ddp_run
  saved = rd.load_config()
  aggregates, recorded = aggregate_recorder.load_aggregates(
      rd.file(run_dir.AGGREGATES))
  assert recorded.all()
  events = rd.load_participation()
  for r in range(2):
    ids = events[events[:, 0] == r, 1]
    assert ids.size
    block = canary_directions.canary_block(saved["canary_seed"], ids,
                                           saved["dim"]).astype(np.float64)
    coefficients = np.linalg.lstsq(
        block.T, np.asarray(aggregates[r], np.float64), rcond=None)[0]
    np.testing.assert_allclose(coefficients, 1 / 6, rtol=0.02)
  table = rd.load_table()
  # Inserted for real: near 1/sqrt(k) for the k canaries of its round (the
  # others are not removed: gaussian canaries); the held-out at the null's
  # scale 1/sqrt(d) (max of 2 rounds, below 5 sd; 0.053 for
  # tests/small_model.py's d = 9,030).
  assert table.known_canaries_removed == "none"
  assert np.all(table.max_cosines("inserted")
                > 0.95 * run_files.lone_canary_floor(rd))
  assert np.abs(table.max_cosines("held_out")).max() < 5 / np.sqrt(
      saved["dim"])
  rows = rd.load_metrics()
  assert [r["clip"] for r in rows] == [1.0, 1.0]
  with open(rd.file(run_dir.CANARY_OUTCOMES)) as f:
    outcomes = json.load(f)["outcomes"]
  assert sorted((o["round_num"], o["canary_id"]) for o in outcomes) == (
      sorted(map(tuple, events.tolist())))
  assert all(o["dp_clip"] == 1.0 and o["dp_clipped"] for o in outcomes)
  line = report.insertion.mode_line()
  assert "TFF's distributed-DP chain (distributed_skellam, 20 bits" in line
  assert f"{len(outcomes)} clipped at the chain's clip" in line


@pytest.mark.tff
def test_the_noise_check_runs_the_sum_chain_with_the_factorys_claim(
    tmp_path, monkeypatch):
  # What the self-test is given (a spy: TFF's clock-seeded noise would make
  # a run of it pass or fail by chance): the chain as configured, the real
  # participants and the factory's parameters, whose claim the rotated-domain
  # check tests (sqrt(n) x share std per rotated coordinate, integer units);
  # at noise 0 (nothing to rotate back) the noise as released, against the
  # std the factory claims in model units, zero.
  import tensorflow_federated as tff  # pylint: disable=g-import-not-at-top
  from tff_canary.federated.insertion import client_round_state  # pylint: disable=g-import-not-at-top
  from tff_canary.harness.runner import dp_fedavg  # pylint: disable=g-import-not-at-top
  from tff_canary.mechanisms.ddp import tff as ddp_tff  # pylint: disable=g-import-not-at-top
  from tff_canary.harness.config import run_settings  # pylint: disable=g-import-not-at-top
  from tff_canary.harness.data import datasets  # pylint: disable=g-import-not-at-top
  from tff_canary.harness.data import tasks  # pylint: disable=g-import-not-at-top
  config = _tiny(tmp_path / "run", noise_multiplier=0.7, ddp_bits=18,
                 ddp_mechanism="distributed_dgauss")
  data_settings = run_settings.DataSettings.of(config)
  task = tasks.build(data_settings, datasets.load(data_settings))
  dim = tasks.num_parameters(task)
  seen = {}

  def spy(kind):
    def record(aggregator, *args, **kwargs):
      seen.update(kwargs, kind=kind, aggregator=aggregator, args=args)
      return "checked"
    return record

  monkeypatch.setattr(ddp_tff.ddp_noise_check, "check_ddp_noise",
                      spy("rotated"))
  monkeypatch.setattr(ddp_tff.noise_check_lib, "check_aggregation_noise",
                      spy("released"))
  assert dp_fedavg.run_noise_check(config, task, 1, None) == "checked"
  params = ddp_parameters.ddp_parameters(
      0.7, 6, 18, 1.0, dim, mechanism="distributed_dgauss")
  assert seen["kind"] == "rotated" and seen["args"] == (params,)
  assert seen["num_clients"] == 6
  assert params.total_noise_std() > 100.0  # ddp_noise_check.MIN_INTEGER_STD
  value_type = tff.TensorType(np.float32, [params.padded_dim])
  state = seen["aggregator"].create(value_type).initialize()
  query = client_round_state.dp_aggregator_state(state).query_state
  assert "l1_norm_bound" not in query._fields  # TFF's DDG query
  np.testing.assert_allclose(float(query.local_stddev),
                             params.scaled_local_std, rtol=1e-6)
  assert isinstance(seen["aggregator"], tff.aggregators.
                    UnweightedAggregationFactory)
  # Noise 0: the sums are exactly 0, no lattice to test in.
  seen.clear()
  zero = _tiny(tmp_path / "zero", ddp_bits=18)
  assert dp_fedavg.run_noise_check(zero, task, 1, None) == "checked"
  assert seen["kind"] == "released" and seen["num_clients"] == 6
  assert seen["claimed_std"] == 0.0


@pytest.mark.tff
def test_a_ddp_run_resumes_without_a_ledger(tmp_path):
  # A DDP run writes no ledger.json: its history up to a checkpoint is
  # metrics.csv alone (a Gaussian run's would be incomplete without it).
  from tff_canary.harness.runner import resume  # pylint: disable=g-import-not-at-top
  rd = run_dir.RunDir(tmp_path)
  rd.save_metrics([dict(round=r, clip=1.0) for r in range(3)])
  history = resume.load_history(rd, 2, ledger=False)
  assert [r["round"] for r in history.rows] == [0, 1] and not history.events
  with pytest.raises(run_dir.RunDirError, match="ledger.json has 0 rounds"):
    resume.load_history(rd, 2)
