"""The client-insertion mode in the experiments: config, flags, a real run,
recording, ledger and report (tff_canary.harness.runner.client_insertion)."""

import dataclasses
import json
import os

import numpy as np
import pytest

import repo_paths
import run_files
from tff_canary.harness.config import experiment_config
from tff_canary.harness.recording import run_dir
from tff_canary.stats.canaries import canary_config

# The in-process runs train tests/small_model.py's CNN (tests/conftest.py).
pytestmark = pytest.mark.usefixtures("small_emnist_model")


REPO = str(repo_paths.REPO)
# The paper's canaries, whose all-iterates aggregates come from the weights
# (orthogonal canaries: tests/federated/insertion/test_orthogonal_transform.py).
CLIENTS = dict(insertion="clients", seeded_noise=False, server_momentum=0.0,
               directions="gaussian")


def _config(tmp_path, **overrides):
  args = dict(output_dir=str(tmp_path / "run"), **CLIENTS)
  args.update(overrides)
  return experiment_config.ExperimentConfig(**args)


# Config ------------------------------------------------------------------


def test_the_config_defaults_to_server_and_derives_the_canary_norm(tmp_path):
  server = experiment_config.ExperimentConfig(output_dir=str(tmp_path))
  assert server.insertion == "server" and server.canary_norm is None
  clients = _config(tmp_path)
  assert clients.canary_norm == canary_config.DEFAULT_CANARY_NORM == 10.0
  assert _config(tmp_path, canary_norm=2.5).canary_norm == 2.5
  assert experiment_config.INSERTIONS == ("server", "clients")


@pytest.mark.parametrize("kwargs, error, match", [
    (dict(insertion="client"), ValueError,
     r"insertion must be one of \('server', 'clients'\), got 'client'"),
    (dict(insertion=None), ValueError, "insertion must be one of"),
    (dict(canary_norm=0.0), ValueError, "canary_norm must be positive"),
    (dict(canary_norm="big"), TypeError, "canary_norm must be a real number"),
    (dict(insertion="server", canary_norm=3.0), ValueError,
     r"canary_norm = 3.0 is for insertion='clients'"),
    # TFF's own factory cannot take a noise seed.
    (dict(seeded_noise=True), ValueError,
     r"needs 1 more setting; add --noseeded_noise .*cannot seed their noise"),
    (dict(noise_seed=3), ValueError, r"--noseeded_noise and no --noise_seed"),
    # The aggregate comes from the weights: only server SGD, no momentum.
    (dict(server_momentum=0.9), ValueError,
     r"--server_optimizer=sgd --server_momentum=0 .*without momentum"),
    (dict(server_optimizer="adam"), ValueError,
     r"server_optimizer='sgd', server_momentum=0"),
    # Every missing setting in one message.
    (dict(seeded_noise=True, server_momentum=0.9), ValueError,
     r"needs 2 more settings; add --noseeded_noise --server_optimizer=sgd "
     r"--server_momentum=0"),
])
def test_bad_client_mode_configs_are_refused(tmp_path, kwargs, error, match):
  with pytest.raises(error, match=match):
    _config(tmp_path, **kwargs)


def test_momentum_is_fine_without_recorded_aggregates(tmp_path):
  config = _config(tmp_path, server_momentum=0.9, record_aggregates=False)
  assert config.server_momentum == 0.9


def test_config_json_round_trip_and_old_files(tmp_path):
  config = _config(tmp_path, canary_norm=4.0)
  values = experiment_config.resolve(config, 300, 10).values
  assert values["insertion"] == "clients" and values["canary_norm"] == 4.0
  assert values["noise_seed"] is None  # TFF's unseeded noise
  again = experiment_config.ExperimentConfig(**{
      k: v for k, v in json.loads(json.dumps(values)).items()
      if k in config.as_dict()})
  assert (again.insertion, again.canary_norm) == ("clients", 4.0)
  assert experiment_config.insertion_of(values) == "clients"
  # A config.json from before the client mode: a server-side run, and it
  # resumes under today's defaults (which write both keys).
  old = experiment_config.resolve(
      experiment_config.ExperimentConfig(output_dir=str(tmp_path)), 300,
      10).values
  saved = {k: v for k, v in old.items()
           if k not in ("insertion", "canary_norm")}
  assert experiment_config.insertion_of(saved) == "server"
  experiment_config.check_resumable(saved, old, "run/config.json")
  with pytest.raises(ValueError, match=r"insertion: 'server' -> 'clients'"):
    experiment_config.check_resumable(saved, dict(old, insertion="clients"),
                                      "run/config.json")
  with pytest.raises(ValueError, match="config.json's insertion must be one"):
    experiment_config.insertion_of({"insertion": "both"})


# The report, TF-free, on a synthetic run directory ------------------------


def _outcome(round_num, canary_id, zeroed):
  stage = dict(kind="zeroing", threshold=21.0, count=1 if zeroed else 0,
               canary_norm=450.0 if zeroed else 0.05, acted=zeroed)
  return dict(round_num=round_num, canary_id=canary_id, norm=10.0,
              stages=[stage], zeroed=zeroed, clipped=False, dp_clip=0.1,
              dp_clipped=True)


def test_an_old_run_directory_reports_server_side_canaries(tmp_path):
  import fake_runs  # pylint: disable=g-import-not-at-top
  from tff_canary.harness.reporting import report as report_lib  # pylint: disable=g-import-not-at-top
  report = report_lib.build_report(fake_runs.make_run(tmp_path / "old"))
  line = ("insertion: server-side canaries, added to the DP sum at the "
          "round's clip (they see the noise step only)")
  assert line in report.table_text().splitlines()
  assert line[1:] in report.to_markdown()
  assert report.as_dict()["insertion"]["mode"] == "server"
  assert report.as_dict()["insertion"]["findings"] == []


def test_the_report_lists_every_zeroed_canary(tmp_path):
  import fake_runs  # pylint: disable=g-import-not-at-top
  from tff_canary.harness.reporting import report as report_lib  # pylint: disable=g-import-not-at-top
  from tff_canary.stats import atomic_files  # pylint: disable=g-import-not-at-top
  path = fake_runs.make_run(tmp_path / "run")
  rd = run_dir.RunDir(path)
  config = rd.load_config()
  atomic_files.write_json(rd.file(run_dir.CONFIG), dict(
      config, insertion="clients", canary_norm=10.0, zeroing=True))
  with pytest.raises(run_dir.RunDirError, match="canary_outcomes.json is "
                     "missing"):
    report_lib.build_report(path)
  zeroed = [(r, 100 + r) for r in range(12)]
  outcomes = [_outcome(r, j, True) for r, j in zeroed] + [
      _outcome(20, 3, False)]
  atomic_files.write_json(rd.file(run_dir.CANARY_OUTCOMES),
                          dict(canary_norm=10.0, outcomes=outcomes))
  report = report_lib.build_report(path)
  text, markdown = report.table_text(), report.to_markdown()
  findings = report.as_dict()["insertion"]["findings"]
  assert len(findings) == 12
  for r, j in zeroed:  # every one in report.md and report.json
    needle = f"canary {j} ZEROED in round {r}"
    assert needle in markdown and sum(needle in f for f in findings) == 1
  # The terminal shows the first 10 and says where the rest are.
  shown = [l for l in text.splitlines() if "ZEROED in round" in l]
  assert len(shown) == 10
  assert "finding: ... and 2 more zeroed canaries (report.md lists every " \
      "one)" in text
  assert "13 canary-client participations: 13 clipped by the DP query" in (
      report.insertion.mode_line())
  assert "12 ZEROED" in report.insertion.mode_line()
  # Gaussian canary clients: the others are not removed; a table of an older
  # version that removed them says at which norm.
  assert "not removed (gaussian canaries, the paper's construction)" in (
      report.known_canaries_line())
  older = dataclasses.replace(report.section, table=dataclasses.replace(
      report.table, known_canaries_removed="all_iterates"))
  assert "at min(canary_norm, the round's clip)" in older.known_canaries_line()


# The state readers and the aggregate from the weights (small model) -------

FEATURES, CLASSES = 20, 3


def _model_fn():
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  import tensorflow_federated as tff  # pylint: disable=g-import-not-at-top
  keras_model = tf.keras.Sequential([
      tf.keras.layers.InputLayer(input_shape=(FEATURES,)),
      tf.keras.layers.Dense(
          CLASSES,
          kernel_initializer=tf.keras.initializers.GlorotUniform(seed=1))])
  return tff.learning.models.from_keras_model(
      keras_model,
      loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True),
      input_spec=(tf.TensorSpec([None, FEATURES], tf.float32),
                  tf.TensorSpec([None], tf.int32)))


def _datasets():
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  rng = np.random.default_rng(0)
  out = []
  for _ in range(3):
    y = rng.integers(0, CLASSES, 20).astype(np.int32)
    x = (rng.normal(size=(20, FEATURES)) + y[:, None]).astype(np.float32)
    out.append(tf.data.Dataset.from_tensor_slices((x, y)).batch(10))
  return out


@pytest.mark.tff
@pytest.mark.parametrize("momentum", [None, 0.9])
def test_the_aggregate_from_the_weights_is_the_noised_aggregate(momentum):
  # Independent check: this package's server-side aggregator reports the
  # noised aggregate it hands the server (seeded noise, so nonzero); the
  # weights' change divided by the server learning rate must equal it with
  # SGD, and must not with momentum (why the config refuses momentum).
  import tensorflow_federated as tff  # pylint: disable=g-import-not-at-top
  from tff_canary.federated.insertion import client_round_state  # pylint: disable=g-import-not-at-top
  from tff_canary.federated.insertion import factory  # pylint: disable=g-import-not-at-top
  from tff_canary.stats.canaries import schedules  # pylint: disable=g-import-not-at-top
  canaries = canary_config.CanaryConfig(
      seed=3, num_inserted=2, num_held_out=2,
      schedule=schedules.FixedPresentations(3, 1), record_aggregates=True,
      assignment="fixed", directions="gaussian")
  aggregator = factory.CanaryDPFactory.gaussian_fixed(
      0.5, 5.0, 0.5, canaries=canaries, noise_seed=7)
  eta = 0.7
  process = tff.learning.algorithms.build_unweighted_fed_avg(
      _model_fn, tff.learning.optimizers.build_sgdm(0.1),
      server_optimizer_fn=tff.learning.optimizers.build_sgdm(eta, momentum),
      model_aggregator=aggregator)
  state, data = process.initialize(), _datasets()
  errors = []
  for _ in range(3):
    before = process.get_model_weights(state).trainable
    output = process.next(state, data)
    state = output.state
    recorded = np.asarray(output.metrics["aggregator"]["noised_aggregate"])
    got = client_round_state.round_aggregate(
        before, process.get_model_weights(state).trainable, eta)
    errors.append(np.max(np.abs(got - recorded)) / np.max(np.abs(recorded)))
  if momentum is None:
    # float32 weights of size ~1 differenced: ~1e-7 relative to the step.
    assert max(errors) < 1e-4, errors
  else:
    assert errors[0] < 1e-4 and min(errors[1:]) > 0.1, errors


@pytest.mark.tff
def test_clip_and_dp_event_come_from_tffs_own_factory_state():
  import tensorflow_federated as tff  # pylint: disable=g-import-not-at-top
  from tff_canary.federated.insertion import canary_clients  # pylint: disable=g-import-not-at-top
  from tff_canary.federated.insertion import client_round_state  # pylint: disable=g-import-not-at-top
  from tff_canary.federated.insertion import factory  # pylint: disable=g-import-not-at-top
  dp = tff.aggregators.DifferentiallyPrivateFactory
  for aggregator, fixed in (
      (dp.gaussian_fixed(0.0, 5.0, 0.5), True),
      (factory.with_zeroing(dp.gaussian_adaptive(0.0, 5.0)), False)):
    process = canary_clients.build_canary_client_fedavg(
        _model_fn, tff.learning.optimizers.build_sgdm(0.1),
        model_aggregator=aggregator, canary_seed=1)
    state = process.initialize()
    clips = [client_round_state.query_clip(state)]
    reported = []
    for _ in range(2):
      output = process.next(state, canary_clients.with_canary_clients(
          _datasets(), [0]))
      state = output.state
      clips.append(client_round_state.query_clip(state))
      event = client_round_state.dp_event(state)
      assert type(event).__name__ == "GaussianDpEvent" or fixed is False
      if not fixed:  # TFF reports the next round's clip
        metrics = output.metrics["aggregator"]["zeroing"]
        reported.append(float(metrics["dp_query_metrics"]["clip"]))
    if fixed:
      assert clips == [0.5, 0.5, 0.5]
    else:
      assert clips[0] == pytest.approx(0.1)  # TFF's initial adaptive clip
      assert clips[1:] == pytest.approx(reported)
      assert clips[1] > clips[0]  # the canary voted "above the clip"
  with pytest.raises(ValueError, match="no DifferentiallyPrivateFactory"):
    client_round_state.query_clip({"aggregator": ()})


# Runs --------------------------------------------------------------------


def _tiny(path, **overrides):
  """tests/harness/runner/test_experiment.py's tiny EMNIST run, in client mode."""
  args = dict(output_dir=str(path), num_rounds=4, clients_per_round=6,
              examples_per_client=8, num_inserted=10, num_held_out=10,
              noise_multiplier=0.0, eval_every=0, checkpoint_every=2,
              eval_examples=64, allow_large_canary_fraction=True, **CLIENTS)
  args.update(overrides)
  return experiment_config.ExperimentConfig(**args)


def _run(config):
  from tff_canary.harness.runner import experiment  # pylint: disable=g-import-not-at-top
  return experiment.run_experiment(config, progress=False,
                                   log=lambda *a: None)


# The client-mode run of the tests below (noise 0, fixed clip 1 below the
# canary norm 10: each canary client enters TFF's sum at the clip), killed
# at its second checkpoint (round 4 of 6) and resumed. The resumed run
# redoes rounds 2-3 and trains 4-5: it keeps rounds 0-1's canary outcomes,
# ledger and aggregates, and passes two checkpoints of its own as an
# uninterrupted run does, so a checkpoint that drops the records of the
# rounds before the last one still shows. (Before, one run trained straight
# and another was killed and resumed: one TFF run fewer.)
ROUNDS = 6


@pytest.fixture(scope="module")
def client_mode_run(tmp_path_factory):
  """(report, run dir) of the killed and resumed client-mode run."""
  from tff_canary.harness.runner import training  # pylint: disable=g-import-not-at-top
  path = tmp_path_factory.mktemp("clients") / "run"
  checkpoint = training._checkpoint  # pylint: disable=protected-access
  calls = []

  def crash_at_the_second(*args, **kwargs):
    calls.append(args[2])
    if len(calls) == 2:
      raise RuntimeError("killed")
    return checkpoint(*args, **kwargs)

  with pytest.MonkeyPatch.context() as patch:
    patch.setattr(training, "_checkpoint", crash_at_the_second)
    with pytest.raises(RuntimeError, match="killed"):
      _run(_tiny(path, clip=1.0, num_rounds=ROUNDS))
  assert calls == [2, 4]
  rd = run_dir.RunDir(path)
  assert len(rd.load_ledger()) == 2 and not rd.exists(run_dir.REPORT_JSON)
  report = _run(_tiny(path, clip=1.0, num_rounds=ROUNDS, resume=True))
  return report, rd


@pytest.mark.tff
@pytest.mark.slow
def test_a_client_mode_run_inserts_its_canaries_and_reports_the_mode(
    client_mode_run):
  report, rd = client_mode_run
  saved = rd.load_config()
  assert saved["insertion"] == "clients" and saved["canary_norm"] == 10.0
  assert saved["noise_seed"] is None
  table = rd.load_table()
  # Inserted for real: at noise 0 each inserted canary's all-iterates
  # cosine is near 1/sqrt(k) for the k canaries of its round (each entering
  # at the clip; the clients' own small updates are the rest), the held-out
  # ones at the null's scale 1/sqrt(d) (max of 4 rounds: below 5 sd; 0.053
  # for tests/small_model.py's d = 9,030). Without canary clients both groups
  # are at the null's scale.
  inserted, held_out = (table.max_cosines(g) for g in ("inserted",
                                                       "held_out"))
  floor = run_files.lone_canary_floor(rd)
  assert inserted.size and np.all(inserted > 0.95 * floor), (inserted, floor)
  assert np.abs(held_out).max() < 5 / np.sqrt(saved["dim"]), held_out
  # The aggregate from the weights: each canary enters the round's mean at
  # min(canary_norm, clip) / clients_per_round = 1/6 (least squares on the
  # round's canaries; the clients' updates project on c_j at the null's
  # scale).
  from tff_canary.federated.scores import aggregate_recorder  # pylint: disable=g-import-not-at-top
  from tff_canary.federated.insertion import canary_directions  # pylint: disable=g-import-not-at-top
  aggregates, recorded = aggregate_recorder.load_aggregates(
      rd.file(run_dir.AGGREGATES))
  assert recorded.all()
  events = rd.load_participation()
  for r in range(ROUNDS):
    ids = events[events[:, 0] == r, 1]
    block = canary_directions.canary_block(saved["canary_seed"], ids,
                                           saved["dim"]).astype(np.float64)
    coefficients = np.linalg.lstsq(
        block.T, np.asarray(aggregates[r], np.float64), rcond=None)[0]
    np.testing.assert_allclose(coefficients, 1 / 6, rtol=0.02)
  assert table.final_cosines("inserted").min() > 10 * np.abs(
      table.final_cosines("held_out")).max()
  assert table.known_canaries_removed == "none"  # the paper's statistics
  # The ledger: TFF's own DpEvents, one per round.
  ledger = rd.load_ledger()
  assert len(ledger) == ROUNDS
  assert all(type(e).__name__ == "GaussianDpEvent" for e in ledger.events)
  # metrics.csv: the DP query's clip, the canary clients of each round.
  rows = rd.load_metrics()
  assert [r["clip"] for r in rows] == [1.0] * ROUNDS
  assert [r["canaries_inserted"] for r in rows] == [
      int(np.sum(events[:, 0] == r)) for r in range(ROUNDS)]
  # Per canary and round: clipped by the DP query (norm 10 > clip 1).
  with open(rd.file(run_dir.CANARY_OUTCOMES)) as f:
    outcomes = json.load(f)["outcomes"]
  assert sorted((o["round_num"], o["canary_id"]) for o in outcomes) == (
      sorted(map(tuple, events.tolist())))
  assert all(o["dp_clip"] == 1.0 and o["dp_clipped"] and not o["zeroed"]
             for o in outcomes)
  # The mode in the terminal table, report.md and report.json.
  line = report.insertion.mode_line()
  assert line.startswith("insertion: canary clients of norm 10 through "
                         "TFF's own DP aggregator")
  assert f"{len(outcomes)} clipped by the DP query" in line
  assert "clients_per_round = 6" in line and "extra members" in line
  assert line in report.table_text().splitlines()
  assert line[1:] in open(rd.file(run_dir.REPORT_MD)).read()
  saved_report = json.load(open(rd.file(run_dir.REPORT_JSON)))
  assert saved_report["insertion"]["mode"] == "clients"
  assert "not removed (gaussian canaries, the paper's construction)" in (
      saved_report["known_canaries_line"])
  assert report.analytical["one participation"] == float("inf")  # z = 0


@pytest.mark.tff
@pytest.mark.slow
def test_zeroed_canary_clients_are_findings_in_the_report(tmp_path):
  # A canary of L2 norm 1e5 has an L-inf norm of about 1e5 sqrt(2 ln d / d):
  # 450 at the CNN's d = 1.2M, 4,500 at tests/small_model.py's d = 9,030,
  # either way above TFF's zeroing threshold (21 in round 0): the zeroing
  # stage drops it. The report must list each one, not show a silent zero.
  report = _run(_tiny(tmp_path / "run", num_rounds=2, zeroing=True,
                      canary_norm=1e5))
  rd = run_dir.RunDir(tmp_path / "run")
  with open(rd.file(run_dir.CANARY_OUTCOMES)) as f:
    outcomes = json.load(f)["outcomes"]
  zeroed = [o for o in outcomes if o["zeroed"]]
  assert zeroed and len(zeroed) == len(outcomes)
  # The finding is true: they never reached the sum (noise 0): their
  # cosines are at the null's scale (below 5 / sqrt(d)).
  assert np.abs(rd.load_table().max_cosines("inserted")).max() < (
      5 / np.sqrt(rd.load_config()["dim"]))
  text, markdown = report.table_text(), open(rd.file(run_dir.REPORT_MD)).read()
  findings = json.load(open(rd.file(run_dir.REPORT_JSON)))["insertion"][
      "findings"]
  assert len(findings) == len(zeroed)
  for o in zeroed:
    needle = f"canary {o['canary_id']} ZEROED in round {o['round_num']}"
    assert needle in markdown and any(needle in f for f in findings)
    if len(zeroed) <= 10:
      assert needle in text
  assert f"{len(zeroed)} ZEROED" in report.insertion.mode_line()
  # Nothing is removed (gaussian canaries), and the report says so.
  assert rd.load_table().known_canaries_removed == "none"
  assert "not removed (gaussian canaries" in report.known_canaries_line()


@pytest.mark.tff
@pytest.mark.slow
def test_a_killed_client_mode_run_resumes_with_its_outcomes(client_mode_run):
  # Killed at the second checkpoint (round 4 of 6): the resumed run redoes
  # rounds 2-3 and keeps rounds 0-1's canary outcomes, each once.
  report, rd = client_mode_run
  with open(rd.file(run_dir.CANARY_OUTCOMES)) as f:
    outcomes = json.load(f)["outcomes"]
  assert sorted((o["round_num"], o["canary_id"]) for o in outcomes) == (
      sorted(map(tuple, rd.load_participation().tolist())))
  assert len(rd.load_ledger()) == ROUNDS
  assert np.all(report.table.max_cosines("inserted")
                > 0.95 * run_files.lone_canary_floor(rd))
