"""Tests of tff_canary.harness.writing.run_writer and release_manager: from any TFF
loop (a hand-written one, `tff.simulation.run_training_process`,
`tff.learning.programs.train_model`) to a run directory whose report
`python -m tff_canary report` recomputes.

One tiny process is built per module (a 20 -> 10 dense layer, d = 210; 4
clients per round, 3 rounds, 3 inserted + 3 held-out canaries; adaptive
clipping under TFF's zeroing, `factory.canary_dp_aggregator`'s default;
seeded noise) and each loop trains it. The argument checks reuse the
hand-written loop's outputs, so they run no TFF computation.
"""

from __future__ import annotations

import asyncio
import copy
import json
import os
import shutil
import types

import numpy as np
import pytest
import tensorflow as tf
import tensorflow_federated as tff

from tff_canary import __main__ as cli
from tff_canary.stats.canaries import canary_config
from tff_canary.federated.insertion import factory
from tff_canary.federated.scores import aggregate_recorder
from tff_canary.federated.insertion import canary_process
from tff_canary.federated.scores import cosine_pass
from tff_canary.harness.writing import release_manager
from tff_canary.harness.reporting import report as report_lib
from tff_canary.harness.recording import run_dir as run_dir_lib
from tff_canary.harness.writing import run_writer
from tff_canary.stats.accounting import ledger as ledger_lib
from tff_canary.stats.canaries import schedules

pytestmark = [
    pytest.mark.tff,
    # 6 canaries are more than d / 100 = 2.1; their cross-talk is irrelevant
    # to what is tested here.
    pytest.mark.filterwarnings("ignore::tff_canary.stats.canaries.canary_config."
                               "TooManyCanariesWarning"),
]

FEATURES, CLASSES = 20, 10
DIM = FEATURES * CLASSES + CLASSES  # 210
NUM_ROUNDS, CLIENTS = 3, 4
DELTA = 1e-5
_SPEC = (tf.TensorSpec([None, FEATURES], tf.float32),
         tf.TensorSpec([None], tf.int32))


def _model_fn():
  keras_model = tf.keras.Sequential([tf.keras.layers.Dense(
      CLASSES, input_shape=(FEATURES,))])
  return tff.learning.models.from_keras_model(
      keras_model, input_spec=_SPEC,
      loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True),
      metrics=[tf.keras.metrics.SparseCategoricalAccuracy()])


def _dataset(rng, examples):
  return tf.data.Dataset.from_tensor_slices(
      (rng.normal(size=(examples, FEATURES)).astype(np.float32),
       rng.integers(0, CLASSES, examples).astype(np.int32))).batch(4)


def client_data(round_num):
  """The same 4 clients' data for a round, whoever asks."""
  rng = np.random.default_rng(round_num)
  return [_dataset(rng, 8) for _ in range(CLIENTS)]


def _config(seed=1, num_inserted=3, **kwargs):
  return canary_config.CanaryConfig(
      seed=seed, num_inserted=num_inserted, num_held_out=3,
      schedule=schedules.ShuffledEpochs(num_rounds=NUM_ROUNDS,
                                        rounds_per_epoch=NUM_ROUNDS),
      **(dict(assignment="fixed", directions="gaussian") | kwargs))


def _aggregator(config):
  return factory.canary_dp_aggregator(0.1, CLIENTS, canaries=config,
                                      zeroing=True, noise_seed=5)


def _optimizers():
  return (tff.learning.optimizers.build_sgdm(0.1),
          tff.learning.optimizers.build_sgdm(1.0))


@pytest.fixture(scope="module")
def process():
  return tff.learning.algorithms.build_unweighted_fed_avg(
      _model_fn, *_optimizers(), model_aggregator=_aggregator(_config()))


@pytest.fixture(scope="module")
def loop_run(process, tmp_path_factory):
  """A hand-written loop into a RunWriter; keeps each round's output."""
  path = tmp_path_factory.mktemp("loop") / "run"
  state = initial = process.initialize()
  writer = run_writer.RunWriter(path, _config(),
                                process.get_model_weights(initial),
                                delta=DELTA)
  metrics, states = [], []
  for round_num in range(NUM_ROUNDS):
    output = process.next(state, client_data(round_num))
    state = output.state
    metrics.append(copy.deepcopy(output.metrics))
    states.append(state)
    writer.round(output)
  report = writer.finish(state)
  return types.SimpleNamespace(path=str(path), initial=initial, state=state,
                               metrics=metrics, states=states, report=report,
                               process=process)


def _flat(process, state):
  return np.concatenate([np.ravel(w) for w in
                         process.get_model_weights(state).trainable])


def _estimates_json(report):
  return json.dumps(report.as_dict()["estimates"], sort_keys=True)


# ------------------------------------------------------- a hand-written loop


def test_loop_writes_a_run_that_the_report_command_recomputes(loop_run):
  rd = run_dir_lib.RunDir(loop_run.path)
  for name in (run_dir_lib.CONFIG, run_dir_lib.METRICS, run_dir_lib.LEDGER,
               run_dir_lib.PARTICIPATION, run_dir_lib.COSINES_CSV,
               run_dir_lib.COSINES_NPZ, run_dir_lib.REPORT_JSON,
               run_dir_lib.REPORT_MD, run_dir_lib.AGGREGATES,
               run_dir_lib.INITIAL_WEIGHTS, run_dir_lib.FINAL_WEIGHTS):
    assert rd.exists(name), name
  assert sorted(os.listdir(rd.file(run_dir_lib.PLOTS))) == [
      "cosines.png", "epsilons.png", "max_cosine_by_round.png"]
  assert cli.main(["report", loop_run.path, "--delta", "1e-3",
                   "--no_plots"]) == 0
  with open(rd.file(run_dir_lib.REPORT_JSON), encoding="utf-8") as f:
    assert json.load(f)["delta"] == 1e-3
  # Recomputed at the run's delta, every estimate is the writer's.
  assert cli.main(["report", loop_run.path, "--no_plots"]) == 0
  assert (_estimates_json(report_lib.build_report(loop_run.path))
          == _estimates_json(loop_run.report))
  assert "analytical: one participation" in loop_run.report.table_text()
  assert "audit" in loop_run.report.table_text()
  with open(rd.file(run_dir_lib.REPORT_MD), encoding="utf-8") as f:
    title = f.read().split("|")[0]
  assert "None" not in title and "4 clients per round" in title


def test_loop_records_what_the_process_output(loop_run):
  rd = run_dir_lib.RunDir(loop_run.path)
  # Under zeroing the measurements sit in metrics['aggregator']['zeroing']
  # and the canary state in state.aggregator['inner_agg'] (README).
  measured = [m["aggregator"]["zeroing"] for m in loop_run.metrics]
  assert all(isinstance(s.aggregator["inner_agg"],
                        canary_process.CanaryDPAggregatorState)
             for s in loop_run.states)
  aggregates, recorded = aggregate_recorder.load_aggregates(rd.file(run_dir_lib.AGGREGATES))
  assert recorded.all()
  np.testing.assert_array_equal(
      aggregates, np.stack([m["noised_aggregate"] for m in measured]))
  rows = rd.load_metrics()
  assert [r["round"] for r in rows] == list(range(NUM_ROUNDS))
  assert [r["clip"] for r in rows] == [float(m["clip"]) for m in measured]
  scheduled = np.bincount(_config().participation.events[:, 0],
                          minlength=NUM_ROUNDS)
  assert [r["canaries_inserted"] for r in rows] == scheduled.tolist()
  assert [r["loss"] for r in rows] == [
      float(m["client_work"]["train"]["loss"]) for m in loop_run.metrics]
  np.testing.assert_array_equal(
      np.load(rd.file(run_dir_lib.INITIAL_WEIGHTS)),
      _flat(loop_run.process, loop_run.initial))
  np.testing.assert_array_equal(np.load(rd.file(run_dir_lib.FINAL_WEIGHTS)),
                                _flat(loop_run.process, loop_run.state))


def test_ledger_and_config_come_from_the_state(loop_run):
  rd = run_dir_lib.RunDir(loop_run.path)
  extract = tff.aggregators.differential_privacy.extract_dp_event_from_state
  assert rd.load_ledger() == ledger_lib.Ledger(
      [extract(s.aggregator["inner_agg"]) for s in loop_run.states])
  config = rd.load_config()
  assert config["dim"] == DIM
  assert config["canary_seed"] == _config().seed
  assert config["clients_per_round"] == CLIENTS
  assert isinstance(config["clients_per_round"], int)
  # The factory's effective z = 0.1 splits into z_value = 0.1033 and the
  # clipped count's 0.4; config.json holds the effective one.
  assert config["noise_multiplier"] == 0.1
  assert config["delta"] == DELTA and config["num_rounds"] == NUM_ROUNDS


def test_cosines_are_those_of_the_recorded_run(loop_run):
  rd = run_dir_lib.RunDir(loop_run.path)
  table = rd.load_table()
  aggregates = np.stack([m["aggregator"]["zeroing"]["noised_aggregate"]
                         for m in loop_run.metrics])
  # The one pass over the recorded aggregates, with the other inserted
  # canaries not removed (gaussian canaries, the paper's statistics).
  expected = cosine_pass.compute_cosine_table(
      _config(), _flat(loop_run.process, loop_run.initial),
      _flat(loop_run.process, loop_run.state), aggregates, progress=False)
  assert table.known_canaries_removed == "none"
  np.testing.assert_array_equal(table.final_cosine, expected.final_cosine)
  np.testing.assert_array_equal(table.max_cosine, expected.max_cosine)
  np.testing.assert_array_equal(table.max_round, expected.max_round)


def test_final_model_only_without_recorded_aggregates(loop_run, tmp_path):
  config = _config(record_aggregates=False)
  writer = run_writer.RunWriter(tmp_path / "run", config,
                                _flat(loop_run.process, loop_run.initial),
                                delta=DELTA)
  for metrics, state in zip(loop_run.metrics, loop_run.states):
    writer.round(copy.deepcopy(metrics), state)
  report = writer.finish(loop_run.state, plots=False)
  assert not os.path.exists(tmp_path / "run" / run_dir_lib.AGGREGATES)
  assert np.isnan(report.table.max_cosine).all()
  np.testing.assert_array_equal(
      report.table.final_cosine,
      loop_run.report.table.final_cosine)


# ------------------------------------------------------------ program loops


def test_run_training_process_through_the_release_manager(loop_run, process,
                                                         tmp_path):
  path = tmp_path / "run"
  state_manager = tff.program.FileProgramStateManager(tmp_path / "states")
  forwarded = tff.program.MemoryReleaseManager()
  writer = run_writer.RunWriter(path, _config(), delta=DELTA)
  manager = release_manager.CanaryReleaseManager(writer,
                                                 forward_to=[forwarded])
  # run_training_process runs on the current event loop, which an earlier
  # asyncio.run (other tests) leaves unset.
  loop = asyncio.new_event_loop()
  asyncio.set_event_loop(loop)
  try:
    state = tff.simulation.run_training_process(
        process, client_data, NUM_ROUNDS,
        evaluation_fn=lambda state, data: {"examples": 8.0},
        evaluation_selection_fn=lambda round_num: None,
        program_state_manager=state_manager, metrics_managers=[manager])
  finally:
    asyncio.set_event_loop(None)
    loop.close()
  initial = asyncio.run(state_manager.load(0, process.initialize()))
  report = manager.finish(state,
                          initial_weights=process.get_model_weights(initial),
                          plots=False)
  assert writer.rounds_recorded == list(range(NUM_ROUNDS))
  released = forwarded.values()
  assert sorted(released) == list(range(NUM_ROUNDS + 1))
  # Release 0 is the initial evaluation: no aggregator, so a recorder fed
  # every release fails on it, and the manager lets it through.
  assert "aggregator" not in released[0]
  with pytest.raises(ValueError, match="no 'noised_aggregate'"):
    aggregate_recorder.AggregateRecorder(tmp_path / "a.npy", DIM, NUM_ROUNDS).record(
        released[0])
  assert all(aggregate_recorder.AGGREGATE_KEY not in json.dumps(
      released[k], default=str) for k in released)
  # Without states in the releases the events come from the final state:
  # the same ledger as the loop that saw every round's state.
  rd = run_dir_lib.RunDir(path)
  assert rd.load_ledger() == run_dir_lib.RunDir(loop_run.path).load_ledger()
  np.testing.assert_array_equal(np.load(rd.file(run_dir_lib.INITIAL_WEIGHTS)),
                                _flat(process, initial))
  assert report.config["dim"] == DIM
  assert rd.exists(run_dir_lib.REPORT_JSON)


class _Iterator(tff.program.FederatedDataSourceIterator):
  """Round r's clients are `client_data(r)`; serializable for train_model."""

  def __init__(self, round_num=0):
    self.round_num = round_num

  @property
  def federated_type(self):
    return tff.FederatedType(tff.SequenceType(_SPEC), tff.CLIENTS)

  def select(self, k=None):
    del k
    data = client_data(self.round_num)
    self.round_num += 1
    return data

  def to_bytes(self):
    return str(self.round_num).encode()

  @classmethod
  def from_bytes(cls, buffer):
    return cls(int(buffer.decode()))

  def __eq__(self, other):
    return isinstance(other, _Iterator) and other.round_num == self.round_num


class _DataSource(tff.program.FederatedDataSource):

  @property
  def federated_type(self):
    return _Iterator().federated_type

  def iterator(self):
    return _Iterator()


def test_train_model_through_the_release_manager(loop_run, process, tmp_path):
  initial = loop_run.initial  # the loop's start, for the same aggregates
  writer = run_writer.RunWriter(tmp_path / "run", _config(),
                                process.get_model_weights(initial),
                                delta=DELTA)
  manager = release_manager.CanaryReleaseManager(writer)
  context = tff.program.NativeFederatedContext(
      tff.backends.native.create_async_local_cpp_execution_context())
  with tff.framework.get_context_stack().install(context):
    asyncio.run(tff.learning.programs.train_model(
        train_process=process, initial_train_state=initial,
        train_data_source=_DataSource(), train_per_round_clients=CLIENTS,
        train_total_rounds=NUM_ROUNDS,
        program_state_manager=tff.program.FileProgramStateManager(
            tmp_path / "states", keep_total=0),
        model_output_manager=manager, train_metrics_manager=manager,
        evaluation_manager=None, evaluation_periodicity=NUM_ROUNDS))
  # The model output release after the last round is the trained state.
  assert int(manager.state.aggregator["inner_agg"].round_num) == NUM_ROUNDS
  report = manager.finish(plots=False)
  assert writer.rounds_recorded == list(range(NUM_ROUNDS))
  rd = run_dir_lib.RunDir(tmp_path / "run")
  np.testing.assert_array_equal(np.load(rd.file(run_dir_lib.FINAL_WEIGHTS)),
                                _flat(process, manager.state))
  # Same data, seeded noise, same start: the loop's aggregates and table.
  np.testing.assert_allclose(
      aggregate_recorder.load_aggregates(rd.file(run_dir_lib.AGGREGATES))[0],
      aggregate_recorder.load_aggregates(os.path.join(
          loop_run.path, run_dir_lib.AGGREGATES))[0], atol=1e-7)
  assert report.table.num_rounds == NUM_ROUNDS


def test_as_weighted_aggregator_ignores_client_weights(process):
  # Clients of 1, 3, 9 and 27 examples: a mean weighted by examples would be
  # dominated by the last client, far from the unweighted mean (the
  # aggregate's entries are ~1e-2; seeded noise and canaries are the same in
  # both processes, so only the weighting could differ).
  weighted = tff.learning.algorithms.build_weighted_fed_avg(
      _model_fn, *_optimizers(),
      model_aggregator=tff.aggregators.as_weighted_aggregator(
          _aggregator(_config())))
  rng = np.random.default_rng(7)
  data = [_dataset(rng, n) for n in (1, 3, 9, 27)]
  start = process.initialize()
  weights = process.get_model_weights(start)
  outputs = []
  for p in (process, weighted):
    state = p.set_model_weights(p.initialize(), weights)
    outputs.append(p.next(state, data).metrics["aggregator"]["zeroing"])
  assert outputs[1]["canaries_inserted"] == outputs[0]["canaries_inserted"]
  np.testing.assert_allclose(outputs[1]["noised_aggregate"],
                             outputs[0]["noised_aggregate"], atol=1e-7)


# --------------------------------------------------------------- bad input


def _metrics(loop_run, index, **measurements):
  """A copy of the loop's metrics of round `index`, measurements replaced."""
  metrics = copy.deepcopy(loop_run.metrics[index])
  metrics["aggregator"]["zeroing"].update(measurements)
  return metrics


@pytest.mark.parametrize("kwargs, error, match", [
    (dict(canaries="c"), TypeError, "canaries must be a CanaryConfig"),
    (dict(initial_weights="w"), TypeError, "initial_weights must be model"),
    (dict(delta=None), ValueError, "give delta, or num_clients"),
    (dict(delta=2.0), ValueError, "delta"),
    (dict(num_clients=0), ValueError, "num_clients must be at least 1"),
    (dict(sampling="poisson"), ValueError, "sampling must be one of"),
    (dict(sampling="per_round"), ValueError, "needs num_clients"),
    (dict(clients_per_round=-1), ValueError, "clients_per_round"),
    (dict(task=""), TypeError, "task must be a non-empty str"),
    (dict(seed=1.5), TypeError, "seed must be an integer"),
    (dict(overwrite="yes"), TypeError, "overwrite must be a bool"),
    (dict(epochs=3), TypeError, "epochs"),
])
def test_bad_arguments_are_named(tmp_path, kwargs, error, match):
  arguments = dict(canaries=_config(), initial_weights=np.zeros(DIM),
                   delta=DELTA)
  arguments.update(kwargs)
  with pytest.raises(error, match=match):
    run_writer.RunWriter(tmp_path / "run", **arguments)
  assert not os.path.exists(tmp_path / "run")


def test_a_run_directory_is_not_overwritten_unless_asked(loop_run, tmp_path):
  with pytest.raises(FileExistsError, match="overwrite=True"):
    run_writer.RunWriter(loop_run.path, _config(), np.zeros(DIM), delta=DELTA)
  path = tmp_path / "copy"
  shutil.copytree(loop_run.path, path)
  run_writer.RunWriter(path, _config(), np.zeros(DIM), delta=DELTA,
                       overwrite=True)
  for name in (run_dir_lib.CONFIG, run_dir_lib.REPORT_JSON,
               run_dir_lib.AGGREGATES, run_dir_lib.COSINES_NPZ):
    assert not os.path.exists(path / name), name


def test_bad_rounds_are_refused(loop_run, tmp_path):
  writer = run_writer.RunWriter(tmp_path / "run", _config(),
                                np.zeros(DIM), delta=DELTA)
  with pytest.raises(ValueError, match="no canary measurements"):
    writer.round({"evaluation/loss": 1.0})
  with pytest.raises(ValueError, match="state after 2 rounds, not after "
                     "round 0"):
    writer.round(_metrics(loop_run, 0), loop_run.states[1])
  with pytest.raises(ValueError, match="past the canaries' schedule"):
    writer.round(_metrics(loop_run, 0, round_num=np.int32(NUM_ROUNDS)))
  with pytest.raises(ValueError, match="must have shape"):
    writer.round(_metrics(loop_run, 0, noised_aggregate=np.zeros(DIM + 1)))
  assert writer.round(_metrics(loop_run, 0), loop_run.states[0]) == 0
  with pytest.raises(ValueError, match="round 0 was recorded already"):
    writer.round(_metrics(loop_run, 0))
  assert writer.rounds_recorded == [0]


def test_another_canary_config_is_refused_at_its_first_differing_round(
    loop_run, tmp_path):
  ours = np.bincount(_config().participation.events[:, 0],
                     minlength=NUM_ROUNDS)
  other = _config(num_inserted=1)
  theirs = np.bincount(other.participation.events[:, 0], minlength=NUM_ROUNDS)
  first = int(np.flatnonzero(ours != theirs)[0])
  writer = run_writer.RunWriter(tmp_path / "run", other, np.zeros(DIM),
                                delta=DELTA)
  with pytest.raises(ValueError, match="not the CanaryConfig the aggregator"):
    writer.round(_metrics(loop_run, first))


def test_finish_refuses_an_incomplete_or_foreign_run(loop_run, tmp_path):
  def writer_with(rounds, config=None, name="run", **kwargs):
    writer = run_writer.RunWriter(tmp_path / name, config or _config(),
                                  delta=DELTA, **kwargs)
    for r in rounds:
      writer.round(_metrics(loop_run, r))
    return writer

  initial = _flat(loop_run.process, loop_run.initial)
  # A loop resumed at round 1 with a new writer misses round 0.
  with pytest.raises(ValueError, match=r"rounds \[0\] of the canaries' 3 "
                     "were not recorded"):
    writer_with([1, 2]).finish(loop_run.state, initial_weights=initial)
  writer = writer_with(range(NUM_ROUNDS), name="all")
  with pytest.raises(ValueError, match="state is after 2 rounds"):
    writer.finish(loop_run.states[1], initial_weights=initial)
  with pytest.raises(ValueError, match="neither"):
    writer.finish(loop_run.state)
  with pytest.raises(ValueError, match="the dims differ"):
    writer.finish(loop_run.state, initial_weights=np.zeros(DIM + 2))
  # A config with the same number of canaries per round but another seed
  # passes every round and is caught by the state's seed at finish.
  ours = np.bincount(_config().participation.events[:, 0],
                     minlength=NUM_ROUNDS)
  seed = next(s for s in range(2, 200) if np.array_equal(ours, np.bincount(
      _config(seed=s).participation.events[:, 0], minlength=NUM_ROUNDS)))
  foreign = writer_with(range(NUM_ROUNDS), config=_config(seed=seed),
                        name="foreign", initial_weights=initial)
  with pytest.raises(ValueError, match="seed"):
    foreign.finish(loop_run.state)
  assert not os.path.exists(tmp_path / "foreign" / run_dir_lib.CONFIG)


def test_a_finished_writer_takes_no_more(loop_run, tmp_path):
  writer = run_writer.RunWriter(tmp_path / "run", _config(),
                                _flat(loop_run.process, loop_run.initial),
                                delta=DELTA)
  for r in range(NUM_ROUNDS):
    writer.round(_metrics(loop_run, r))
  writer.finish(loop_run.state, plots=False)
  with pytest.raises(ValueError, match="has finished"):
    writer.round(_metrics(loop_run, 0))
  with pytest.raises(ValueError, match="has finished"):
    writer.finish(loop_run.state)


# ------------------------------------------------ orthogonal canaries


def test_orthogonal_canaries_need_no_recorded_aggregates(tmp_path):
  # A user loop with orthogonal canaries: the aggregator scores every canary
  # inside the round, so the writer records no aggregate and the report's
  # all-iterates estimate comes from the state's own scores; the release
  # manager path (metrics only) gives the same table.
  config = _config(directions="orthogonal")
  process = tff.learning.algorithms.build_unweighted_fed_avg(
      _model_fn, *_optimizers(), model_aggregator=_aggregator(config))
  state = initial = process.initialize()
  writer = run_writer.RunWriter(tmp_path / "loop", config,
                                process.get_model_weights(initial),
                                delta=DELTA)
  for round_num in range(NUM_ROUNDS):
    output = process.next(state, client_data(round_num))
    assert aggregate_recorder.AGGREGATE_KEY not in json.dumps(
        output.metrics, default=str)
    state = output.state
    writer.round(output)
  report = writer.finish(state, plots=False)
  rd = run_dir_lib.RunDir(tmp_path / "loop")
  assert not rd.exists(run_dir_lib.AGGREGATES)
  assert rd.load_config()["directions"] == "orthogonal"
  table = rd.load_table()
  assert table.has_max_cosines and table.has_scheduled_sums
  assert table.rounds_recorded == NUM_ROUNDS
  assert report.estimates.all_iterates is not None
  # The same run from the state alone (what CanaryReleaseManager.finish does).
  again = cosine_pass.compute_cosine_table(
      config, process.get_model_weights(initial),
      process.get_model_weights(state), state=state)
  assert again == table


# ------------------------------------- a loop that declares Poisson sampling


def test_a_correct_loop_that_declares_poisson_sampling_is_not_refuted(
    tmp_path):
  # TFF's DP tutorial loop declares sampling="per_round"; its canaries here
  # follow the README's ShuffledEpochs(R, R), so each takes part in one round
  # for sure. The loop is correct (fixed clip 1, z = 0.5, seeded noise), and
  # 100 + 100 orthogonal coin-flipped candidates see its one-participation
  # leak; the clients' Poisson-amplified epsilon at rate 4 / 10,000 (0.056)
  # is far below it and must not be what the audit tests. (With the issue's
  # 342,477 clients the report said "REFUTED: ε_lo = 5.008 > analytical ε
  # (Poisson sampling (PLD)) = 0.002321" on this loop; 10,000 clients keep
  # the PLD accountant under a second.)
  config = canary_config.CanaryConfig(
      seed=1, num_inserted=100, num_held_out=100,
      schedule=schedules.ShuffledEpochs(num_rounds=NUM_ROUNDS,
                                        rounds_per_epoch=NUM_ROUNDS),
      assignment="coin", directions="orthogonal")
  aggregator = factory.CanaryDPFactory.gaussian_fixed(
      0.5, CLIENTS, 1.0, canaries=config, noise_seed=5)
  process = tff.learning.algorithms.build_unweighted_fed_avg(
      _model_fn, *_optimizers(), model_aggregator=aggregator)
  state = process.initialize()
  writer = run_writer.RunWriter(tmp_path / "run", config,
                                process.get_model_weights(state),
                                num_clients=10_000, sampling="per_round")
  for round_num in range(NUM_ROUNDS):
    output = process.next(state, client_data(round_num))
    state = output.state
    writer.round(output)
  report = writer.finish(state, plots=False)
  poisson = report.analytical["Poisson sampling (PLD)"]
  assert report.verdict.largest_bound > 10 * poisson  # the premise
  assert not report.verdict.refuted
  assert report.claim == "analytical ε (one participation)"
  lines = report.headline().lines()
  value = report.analytical["one participation"]
  assert f"{value:.4g}" in lines[0] and "one participation" in lines[0]
  assert f"(one participation) = {value:.4g}" in lines[4]
  assert f"Poisson sampling (PLD) = {poisson:.4g} is not tested" in lines[4]
  assert "Not audited: Poisson sampling (PLD)" in report.claim_line()
