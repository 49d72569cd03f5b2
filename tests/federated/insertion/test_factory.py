"""Tests of tff_canary.federated.insertion.factory and canary_process: real TFF
computations on a small model (CPU).

The model is a 30-128-5 MLP (d = 4613 parameters) on synthetic Gaussian-class
federated data. TFF's DP noise is unseeded, so exact comparisons use
noise_multiplier = 0 (clipping still active) or a `noise_seed`; tests with
noise are statistical, with margins stated where they are made. The seeded
noise is checked on an MLP's four tensors (784-128-5, the shapes of
test_seeded_query.MLP_SHAPES).
"""

from __future__ import annotations

import asyncio

import dp_accounting
import numpy as np
import pytest
import tensorflow as tf

from tff_canary.federated.scores import aggregate_recorder
from tff_canary.federated.insertion import canary_directions
from tff_canary.federated.insertion import canary_process
from tff_canary.federated.scores import cosine_pass
from tff_canary.federated.insertion import factory
from tff_canary.federated.structures import flat_layout
from tff_canary.stats.canaries import canary_config
from tff_canary.stats.canaries import schedules
import tensorflow_federated as tff  # pylint: disable=g-bad-import-order
import tensorflow_privacy as tfp  # pylint: disable=g-bad-import-order
from federated.insertion.test_seeded_query import MLP_SHAPES  # pylint: disable=g-bad-import-order
from federated.insertion.test_seeded_query import OneKeyQuery
from federated.insertion.test_seeded_query import independence_problems
from federated.insertion.test_seeded_query import variance_problems

pytestmark = pytest.mark.tff

FEATURES, CLASSES, HIDDEN = 30, 5, 128
DIM = FEATURES * HIDDEN + HIDDEN + HIDDEN * CLASSES + CLASSES  # 4613
CLIP = 0.5


def _keras_model():
  return tf.keras.Sequential([
      tf.keras.layers.InputLayer(input_shape=(FEATURES,)),
      tf.keras.layers.Dense(
          HIDDEN, activation="relu",
          kernel_initializer=tf.keras.initializers.GlorotUniform(seed=1)),
      tf.keras.layers.Dense(
          CLASSES,
          kernel_initializer=tf.keras.initializers.GlorotUniform(seed=2)),
  ])


def _model_fn():
  return tff.learning.models.from_keras_model(
      _keras_model(),
      loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True),
      input_spec=(tf.TensorSpec([None, FEATURES], tf.float32),
                  tf.TensorSpec([None], tf.int32)),
      metrics=[tf.keras.metrics.SparseCategoricalAccuracy()])


_MEANS = np.random.default_rng(0).normal(size=(CLASSES, FEATURES))


def _examples(rng, n):
  y = rng.integers(0, CLASSES, n).astype(np.int32)
  x = (_MEANS[y] + 1.5 * rng.normal(size=(n, FEATURES))).astype(np.float32)
  return x, y


def _clients(num_clients, seed=0, examples=20):
  rng = np.random.default_rng(seed)
  return [tf.data.Dataset.from_tensor_slices(_examples(rng, examples)).batch(10)
          for _ in range(num_clients)]


def _accuracy(weights, x, y):
  w1, b1, w2, b2 = weights.trainable
  logits = np.maximum(x @ w1 + b1, 0.0) @ w2 + b2
  return float(np.mean(logits.argmax(axis=1) == y))


def _process(aggregator, client_lr=0.1, weighted=False):
  build = (tff.learning.algorithms.build_weighted_fed_avg if weighted else
           tff.learning.algorithms.build_unweighted_fed_avg)
  return build(_model_fn,
               client_optimizer_fn=tff.learning.optimizers.build_sgdm(
                   client_lr),
               server_optimizer_fn=tff.learning.optimizers.build_sgdm(1.0),
               model_aggregator=aggregator)


def _config(num_inserted=5, num_held_out=5, rounds=6, presentations=2,
            seed=11, **kwargs):
  return canary_config.CanaryConfig(
      seed=seed, num_inserted=num_inserted, num_held_out=num_held_out,
      schedule=schedules.FixedPresentations(rounds, presentations),
      **(dict(assignment="fixed", directions="gaussian") | kwargs))


def _flat(weights):
  return flat_layout.flatten_numpy(weights.trainable)


def _with_weights_of(process, state0):
  """process.initialize() with the model (and client state) of state0."""
  state = process.initialize()
  return tff.learning.templates.LearningAlgorithmState(
      global_model_weights=state0.global_model_weights,
      distributor=state.distributor, client_work=state0.client_work,
      aggregator=state.aggregator, finalizer=state0.finalizer)


def _run(process, state, clients, rounds, recorder=None):
  """`rounds` rounds; returns the final state and each round's metrics."""
  metrics = []
  for _ in range(rounds):
    output = process.next(state, clients)
    state = output.state
    if recorder is not None:
      recorder.record(output.metrics)
    metrics.append(output.metrics)
  return state, metrics


# Built once for two tests each (a TFF build and its first call cost 1-2
# CPU-s): a process is immutable; each test starts from its initialize().
@pytest.fixture(scope="module", name="zero_canary_process")
def fixture_zero_canary_process():
  """No canaries, z = 0, n = 5: test_paper_ratio's and a TFF twin's."""
  return _process(factory.CanaryDPFactory.gaussian_fixed(
      0.0, 5, CLIP, canaries=_config(num_inserted=0, num_held_out=0,
                                     rounds=20, presentations=1)))


@pytest.fixture(scope="module", name="noisy_fixed")
def fixture_noisy_fixed():
  """z = 0.7 (!= CLIP: a DpEvent with the clip as z shows) on _config():
  (aggregator, process) of the fixed configuration and of resume with noise."""
  aggregator = factory.CanaryDPFactory.gaussian_fixed(0.7, 4, CLIP,
                                                      canaries=_config())
  return aggregator, _process(aggregator)


# ------------------------------------------------------- zero noise, exact


def test_one_canary_no_clients_aggregate_is_clip_times_canary():
  config = _config(num_inserted=1, num_held_out=0, rounds=1, presentations=1)
  value_type = tff.types.to_type(
      [tff.TensorType(np.float32, [40, 5]), tff.TensorType(np.float32, [5])])
  process = factory.CanaryDPFactory.gaussian_fixed(
      0.0, 4, 2.5, canaries=config).create(value_type)
  output = process.next(process.initialize(), [])
  c = canary_directions.canary_block(config.seed, [0], 205)[0]
  flat = flat_layout.flatten_numpy(output.result)
  # a = C c / clients_per_round, computed as (2.5 * c) / 4 in float32: two
  # roundings, so each entry is within 2 float32 ulps (2 * 2^-23 relative).
  np.testing.assert_allclose(flat, 2.5 * c / 4, rtol=2.5e-7, atol=0)
  np.testing.assert_array_equal(output.measurements["noised_aggregate"], flat)
  assert output.measurements["canaries_inserted"] == 1
  assert output.measurements["clip"] == 2.5
  assert output.measurements["round_num"] == 0


def test_zero_noise_one_round_cosine_is_one_with_sign(tmp_path):
  """Full learning process, zero client updates: theta_0 - theta_1 = C c_0/n.

  Client learning rate 0 makes every client update exactly zero; the only
  change of the model is the inserted canary 0, and the server's SGD step
  (learning rate 1) subtracts the aggregate. The cosine of canary 0 with
  theta_0 - theta_1 and with the recorded aggregate must be +1 (sign
  included); the held-out canary's is a null draw.
  """
  config = _config(num_inserted=1, num_held_out=1, rounds=1, presentations=1)
  process = _process(factory.CanaryDPFactory.gaussian_fixed(
      0.0, 3, CLIP, canaries=config), client_lr=0.0)
  state = process.initialize()
  theta0 = process.get_model_weights(state)
  recorder = aggregate_recorder.AggregateRecorder(tmp_path / "a.npy", DIM, 1)
  state, _ = _run(process, state, _clients(3), 1, recorder)
  theta1 = process.get_model_weights(state)
  c = canary_directions.canary_block(config.seed, [0], DIM)[0]
  c = c.astype(np.float64)
  # float32 weights: theta_1 = theta_0 - a rounds each entry (|theta| < 0.3,
  # |a| ~ C/(n sqrt(d)) ~ 3e-3), so the difference is exact to ~3e-8.
  np.testing.assert_allclose(_flat(theta0) - _flat(theta1), CLIP * c / 3,
                             atol=5e-8)
  table = cosine_pass.compute_cosine_table(config, theta0, theta1, recorder,
                                           progress=False)
  # Cosine of float32 vectors equal up to rounding: within 1e-6 of +1.
  assert table.final_cosine[0] > 1 - 1e-6
  assert table.max_cosine[0] > 1 - 1e-6 and table.max_round[0] == 0
  # Held out: one N(0, 1/d) draw, sd 0.021; 5 sd.
  assert abs(table.final_cosine[1]) < 5 / np.sqrt(DIM)


def test_canaries_survive_zeroing():
  # A fixed zeroing norm of 1e-3 zeroes every client (norm 1), but the
  # canary is added inside the DP factory at the server and is not zeroed.
  config = _config(num_inserted=1, num_held_out=0, rounds=1, presentations=1)
  aggregator = tff.aggregators.zeroing_factory(
      1e-3, factory.CanaryDPFactory.gaussian_fixed(0.0, 2, 1.0,
                                                   canaries=config))
  value_type = tff.types.to_type(tff.TensorType(np.float32, [300]))
  process = aggregator.create(value_type)
  clients = [np.full(300, 1 / np.sqrt(300), np.float32)] * 2
  output = process.next(process.initialize(), clients)
  assert output.measurements["zeroed_count"] == 2
  c = canary_directions.canary_block(config.seed, [0], 300)[0]
  np.testing.assert_allclose(output.result, c / 2, rtol=2.5e-7, atol=0)
  assert output.measurements["zeroing"]["canaries_inserted"] == 1


# ------------------------------------------------------ real training run


def test_short_training_run_separates_inserted_from_held_out(tmp_path):
  """Inserted canaries: clearly positive mean cosine; held out: null.

  20 + 20 canaries, 10 rounds of 10 clients, z = 0.3, clip 0.5, each
  inserted canary in 3 rounds. Over 15 repetitions (the noise is unseeded)
  the inserted mean final cosine was 10.6-17.6 sample standard errors above
  0 (12-14 null standard errors), the held-out mean within 2.5 null standard
  errors 1/sqrt(d k') = 0.0033 of 0 (an exact null, docs/method/null-law.md), and the mean
  max cosine of inserted canaries 11-17 standard errors above the held-out
  one. The bounds below are 4 standard errors: false alarms have probability
  < 1e-4, and a real failure (no signal, wrong sign) is far outside them.
  """
  config = _config(num_inserted=20, num_held_out=20, rounds=10,
                   presentations=3)
  process = _process(factory.CanaryDPFactory.gaussian_fixed(
      0.3, 10, CLIP, canaries=config))
  state = process.initialize()
  theta0 = process.get_model_weights(state)
  recorder = aggregate_recorder.AggregateRecorder(tmp_path / "a.npy", DIM, 10)
  state, metrics = _run(process, state, _clients(10), 10, recorder)
  table = cosine_pass.compute_cosine_table(
      config, theta0, process.get_model_weights(state), recorder,
      progress=False)
  inserted = table.final_cosines("inserted")
  held_out = table.final_cosines("held_out")
  null_se = 1 / np.sqrt(DIM * 20)
  assert inserted.mean() > 4 * inserted.std(ddof=1) / np.sqrt(20)
  assert inserted.mean() > 4 * null_se
  # Exact null: P(|mean| > 4 sd) = 6e-5.
  assert abs(held_out.mean()) < 4 * null_se
  # All iterates: inserted canaries peak higher than held-out ones.
  m_in, m_out = table.max_cosines("inserted"), table.max_cosines("held_out")
  se = np.sqrt(m_in.var(ddof=1) / 20 + m_out.var(ddof=1) / 20)
  assert m_in.mean() - m_out.mean() > 4 * se
  # The realized participation and the per-round counts match the schedule.
  np.testing.assert_array_equal(table.participations("inserted"),
                                np.full(20, 3))
  per_round = [m["aggregator"]["canaries_inserted"] for m in metrics]
  np.testing.assert_array_equal(per_round, config.participation.per_round())


def test_paper_ratio_canaries_do_not_change_accuracy(zero_canary_process):
  """<= 1% canaries change a small model's accuracy by < 2 points.

  20 rounds x 5 clients = 100 client participations; 1 inserted canary once
  = 1%, in round 17, so it shows in the final model: one planted 30 (100)
  times too large moves accuracy 1.35 (13.5) points, as with the 10 clients
  and 2 canaries used before at 1.7 times the CPU (1.25, 14.1). Noise 0
  isolates the canaries' effect (deterministic). The tolerance, 2 points, is
  about twice the sampling sd of an accuracy measured on 2000 test examples
  (sqrt(.25 / 2000) = 1.1 points): a change below it is invisible to that
  evaluation.
  """
  clients = _clients(5, seed=3)
  x_test, y_test = _examples(np.random.default_rng(99), 2000)
  with_canaries = _config(num_inserted=1, num_held_out=0, rounds=20,
                          presentations=1)
  assert with_canaries.participation.events.tolist() == [[17, 0]]
  accuracies, weights = [], []
  state0 = zero_canary_process.initialize()
  for process in (zero_canary_process, _process(
      factory.CanaryDPFactory.gaussian_fixed(0.0, 5, CLIP,
                                             canaries=with_canaries))):
    state = _with_weights_of(process, state0)
    state, _ = _run(process, state, clients, 20)
    weights.append(process.get_model_weights(state))
    accuracies.append(_accuracy(weights[-1], x_test, y_test))
  # Not vacuous: the model learned (chance is 0.2) and the canaries did move
  # it.
  assert accuracies[0] > 0.6
  assert not np.array_equal(_flat(weights[0]), _flat(weights[1]))
  assert abs(accuracies[1] - accuracies[0]) < 0.02


# -------------------------------------------------------- checkpointing


def _save_and_load(state, process, directory):
  manager = tff.program.FileProgramStateManager(directory)
  asyncio.run(manager.save(state, 3))
  loaded, version = asyncio.run(manager.load_latest(process.initialize()))
  assert version == 3
  return loaded


def _straight_and_resumed(config, new_process, directory):
  """6 rounds, and 3 + checkpoint + 3 in a new build, on _clients(4, seed=1).

  Rounds 0-2 (one process, one state) run once, written to both files.
  Asserts the final models equal; returns each run's metrics, the loaded
  state and both cosine tables.
  """
  clients = _clients(4, seed=1)
  process = new_process()
  state = state0 = process.initialize()
  straight, resumed = (aggregate_recorder.AggregateRecorder(
      directory / f"{run}.npy", DIM, 6) for run in "ab")
  metrics = []
  for _ in range(3):
    output = process.next(state, clients)
    state = output.state
    round_num, aggregate = aggregate_recorder.pop_aggregate(output.metrics)
    straight.write(round_num, aggregate)
    resumed.write(round_num, aggregate)
    metrics.append(output.metrics)
  resumed.close()
  fresh = new_process()
  loaded = _save_and_load(state, fresh, str(directory / "ckpt"))
  state_a, more_a = _run(process, state, clients, 3, straight)
  state_b, more_b = _run(
      fresh, loaded, clients, 3,
      aggregate_recorder.AggregateRecorder.open(directory / "b.npy"))
  np.testing.assert_array_equal(_flat(process.get_model_weights(state_a)),
                                _flat(fresh.get_model_weights(state_b)))
  tables = [cosine_pass.compute_cosine_table(
      config, process.get_model_weights(state0), p.get_model_weights(s),
      directory / f"{run}.npy", progress=False)
            for p, s, run in ((process, state_a, "a"), (fresh, state_b, "b"))]
  return metrics + more_a, metrics + more_b, loaded, tables


def test_resume_gives_identical_cosine_tables(tmp_path):
  """Noise 0, clipping active: interrupted and uninterrupted runs agree.

  The clip 0.05 is well below the clients' update norms (measured 0.57-0.63
  in round 0 with these clients), so clipping acts in every round.
  """
  config = _config(num_inserted=5, num_held_out=5, rounds=6, presentations=2)
  _, metrics_b, loaded, (table_a, table_b) = _straight_and_resumed(
      config, lambda: _process(factory.CanaryDPFactory.gaussian_fixed(
          0.0, 4, 0.05, canaries=config)), tmp_path)
  assert isinstance(loaded.aggregator, canary_process.CanaryDPAggregatorState)
  assert loaded.aggregator.round_num == 3
  assert table_a == table_b
  assert [m["aggregator"]["round_num"] for m in metrics_b[3:]] == [3, 4, 5]


def test_resume_with_noise_keeps_schedule_and_canaries(tmp_path, noisy_fixed):
  """Noise > 0 is unseeded: the schedule and the canaries must still match."""
  config = _config()  # noisy_fixed's: 5 + 5 canaries, 6 rounds, 2 each
  clients = _clients(4, seed=1)
  _, process = noisy_fixed
  state, metrics = _run(process, process.initialize(), clients, 3)
  # Resumed in a process of its own build, as after a restart.
  fresh = _process(factory.CanaryDPFactory.gaussian_fixed(
      0.7, 4, CLIP, canaries=config))
  state = _save_and_load(state, fresh, str(tmp_path / "ckpt"))
  state, more = _run(fresh, state, clients, 3)
  metrics += more
  aggregator = state.aggregator
  assert aggregator.seed == config.seed and aggregator.round_num == 6
  np.testing.assert_array_equal(aggregator.schedule,
                                config.participation.events)
  np.testing.assert_array_equal(
      [m["aggregator"]["canaries_inserted"] for m in metrics],
      config.participation.per_round())
  assert [m["aggregator"]["round_num"] for m in metrics] == list(range(6))


@pytest.mark.parametrize("adaptive", [False, True])
def test_seeded_noise_makes_a_noisy_resume_identical(tmp_path, adaptive):
  """With noise_seed, a resumed noisy run equals the uninterrupted one."""
  config = _config(num_inserted=5, num_held_out=5, rounds=6, presentations=2)

  def new_process():
    if adaptive:
      return _process(factory.CanaryDPFactory.gaussian_adaptive(
          0.5, 4, initial_l2_norm_clip=CLIP, clipped_count_stddev=1.0,
          canaries=config, noise_seed=11))
    return _process(factory.CanaryDPFactory.gaussian_fixed(
        0.5, 4, CLIP, canaries=config, noise_seed=11))

  metrics_a, metrics_b, _, (table_a, table_b) = _straight_and_resumed(
      config, new_process, tmp_path)
  assert ([m["aggregator"]["clip"] for m in metrics_a]
          == [m["aggregator"]["clip"] for m in metrics_b])
  assert table_a == table_b


# ------------------------------------------- seeded noise on an MLP's tensors
#
# These replace a test that drew the seeded noise of ONE tensor and checked
# its law and reproducibility: it could not fail on the bug where one key
# served every tensor of a round (each tensor's noise a prefix of the largest
# one's, b1 == w1.flat[:128]). These draw the four tensors of an MLP through
# the factory and check them with test_seeded_query's `independence_problems`
# (equal runs at any offset, prefix correlations), which flags the planted
# one-key query below (test_planted_one_key_noise_is_flagged_through_the_
# factory), so they can fail on that bug.

NOISE_Z, NOISE_N, NOISE_CLIP, COUNT_STDDEV = 2.0, 10, 1.5, 5.0


def _mlp_type():
  return tff.types.to_type(
      [tff.TensorType(np.float32, s) for s in MLP_SHAPES])


def _seeded_factory(adaptive, noise_seed, config):
  if adaptive:
    return factory.CanaryDPFactory.gaussian_adaptive(
        NOISE_Z, NOISE_N, initial_l2_norm_clip=NOISE_CLIP,
        clipped_count_stddev=COUNT_STDDEV, canaries=config,
        noise_seed=noise_seed)
  return factory.CanaryDPFactory.gaussian_fixed(
      NOISE_Z, NOISE_N, NOISE_CLIP, canaries=config, noise_seed=noise_seed)


def _no_client_rounds(process, state, rounds, first=0):
  """Rounds without clients: {"r<t>/<i>": tensor i of a_t}, clips, state."""
  draws, clips = {}, []
  for t in range(first, first + rounds):
    output = process.next(state, [])
    state = output.state
    clips.append(float(output.measurements["clip"]))
    for i, v in enumerate(output.result):
      draws[f"r{t}/{i}"] = np.asarray(v)
  return draws, clips, state


def _noise_config():
  return _config(num_inserted=0, num_held_out=2, rounds=3, presentations=1)


def _save_and_load_state(state, process, directory):
  manager = tff.program.FileProgramStateManager(directory)
  asyncio.run(manager.save(state, 1))
  loaded, _ = asyncio.run(manager.load_latest(process.initialize()))
  return loaded


@pytest.mark.parametrize("adaptive", [False, True], ids=["fixed", "adaptive"])
def test_seeded_noise_is_independent_reproducible_and_resumable(tmp_path,
                                                                adaptive):
  """No clients: a_t = noise / clients_per_round, tensor by tensor."""
  config = _noise_config()
  process = _seeded_factory(adaptive, 7, config).create(_mlp_type())
  draws, clips, state = _no_client_rounds(process, process.initialize(), 3)

  assert independence_problems(draws) == []
  if adaptive:
    value_z, _ = tff.aggregators.differential_privacy.adaptive_clip_noise_params(
        NOISE_Z, NOISE_N, COUNT_STDDEV)
    # Not vacuous: the clip moved, so each round has its own stddev.
    assert len(set(clips)) == 3
  else:
    value_z = NOISE_Z
    assert clips == [NOISE_CLIP] * 3
  for t, clip in enumerate(clips):
    round_draws = {k: v for k, v in draws.items() if k.startswith(f"r{t}/")}
    assert variance_problems(round_draws, value_z * clip / NOISE_N) == []

  # The state carries the round's DpEvent, as TFF's factory's does.
  event = tff.aggregators.differential_privacy.extract_dp_event_from_state(
      state)
  if adaptive:
    assert isinstance(event, dp_accounting.ComposedDpEvent)
    assert [e.noise_multiplier for e in event.events] == [
        pytest.approx(value_z, rel=1e-6), pytest.approx(COUNT_STDDEV / 0.5)]
  else:
    assert event == dp_accounting.GaussianDpEvent(NOISE_Z)

  # The same seed on a second create(): bitwise the same noise.
  again = _seeded_factory(adaptive, 7, config).create(_mlp_type())
  repeated, _, _ = _no_client_rounds(again, again.initialize(), 3)
  assert repeated.keys() == draws.keys()
  for key, value in draws.items():
    np.testing.assert_array_equal(repeated[key], value)

  # Resume: round 0's state, checkpointed and loaded into `again` (not the
  # saver; a TFF process keeps no state between calls), continues the streams.
  _, _, state0 = _no_client_rounds(process, process.initialize(), 1)
  loaded = _save_and_load_state(state0, again, str(tmp_path / "ckpt"))
  resumed, _, _ = _no_client_rounds(again, loaded, 2, first=1)
  for key, value in resumed.items():
    np.testing.assert_array_equal(value, draws[key])

  # Another seed: every tensor's noise differs.
  other = _seeded_factory(adaptive, 8, config).create(_mlp_type())
  different, _, _ = _no_client_rounds(other, other.initialize(), 1)
  for key, value in different.items():
    assert not np.array_equal(value, draws[key]), key


def test_planted_one_key_noise_is_flagged_through_the_factory():
  """The old bug, planted in a query, fails the checks the tests above pass."""
  aggregator = factory.CanaryDPFactory(
      OneKeyQuery(NOISE_CLIP, NOISE_Z * NOISE_CLIP, noise_seed=7),
      _noise_config(), clients_per_round=NOISE_N)
  process = aggregator.create(_mlp_type())
  draws, _, _ = _no_client_rounds(process, process.initialize(), 2)
  w1, b1 = draws["r0/0"].ravel(), draws["r0/1"]
  np.testing.assert_array_equal(b1, w1[:128])
  assert independence_problems(draws)


@pytest.mark.parametrize("adaptive", [False, True], ids=["fixed", "adaptive"])
def test_seeded_noise_never_coincides_with_a_canary_of_the_same_seed(adaptive):
  """canary seed == noise seed: the noise is null against every canary.

  a_t = (C_t sum_{inserted} c_j + noise) / n with no clients, so noise =
  n a_t - C_t sum c_j (float64; float32 rounding leaves ~1e-7 relative). Its
  cosine with each canary (inserted or held out) is a null draw, sd 1/sqrt(d):
  |cos| sqrt(d) < 5 (P = 6e-7 each, 12 cosines). A noise stream equal to a
  canary's would give cosine ~1 (|cos| sqrt(d) ~ 300): the old scheme's round
  0 key [s, 0] was canary 0's.
  """
  seed = 29
  config = canary_config.CanaryConfig(
      seed=seed, num_inserted=3, num_held_out=3,
      schedule=schedules.FixedPresentations(2, 2), assignment="fixed",
      directions="gaussian")
  process = _seeded_factory(adaptive, seed, config).create(_mlp_type())
  state, dim = process.initialize(), sum(np.prod(s) for s in MLP_SHAPES)
  block = canary_directions.canary_block(seed, range(6), dim).astype(np.float64)
  events = config.participation.events
  for t in range(2):
    output = process.next(state, [])
    state = output.state
    ids = events[events[:, 0] == t, 1]
    assert ids.size == 3
    clip = float(output.measurements["clip"])
    noise = (NOISE_N * np.asarray(output.measurements["noised_aggregate"],
                                  np.float64)
             - clip * block[ids].sum(axis=0))
    cosines = block @ noise / np.linalg.norm(noise)
    assert np.abs(cosines).max() * np.sqrt(dim) < 5, cosines


# -------------------------------------------------------- configurations


def _state_types_match(process):
  init_type = process.initialize.type_signature.result
  next_type = process.next.type_signature.result.state
  return init_type.is_identical_to(next_type)


def test_fixed_configuration_measurements_and_dp_event(noisy_fixed):
  config = _config()
  aggregator, process = noisy_fixed  # z = 0.7
  assert _state_types_match(aggregator.create(
      process.initialize.type_signature.result.member.global_model_weights
      .trainable))
  state = process.initialize()
  with pytest.raises(
      tff.aggregators.differential_privacy
      .ExtractingDpEventFromInitialStateError):
    tff.aggregators.differential_privacy.extract_dp_event_from_state(
        state.aggregator)
  state, metrics = _run(process, state, _clients(4), 2)
  event = tff.aggregators.differential_privacy.extract_dp_event_from_state(
      state.aggregator)
  assert event == tfp.GaussianSumQuery(CLIP, CLIP * 0.7).get_noised_result(
      [tf.zeros(1)], tfp.GaussianSumQuery(CLIP, CLIP * 0.7)
      .initial_global_state())[2]
  for r, m in enumerate(metrics):
    agg = m["aggregator"]
    assert set(agg) == {"dp_query_metrics", "dp", "canaries_inserted", "clip",
                        "round_num", "noised_aggregate"}
    assert agg["clip"] == np.float32(CLIP)
    assert agg["canaries_inserted"] == config.participation.per_round()[r]
    assert agg["noised_aggregate"].shape == (DIM,)
    assert agg["noised_aggregate"].dtype == np.float32


def test_adaptive_configuration_uses_this_rounds_clip():
  config = _config()
  aggregator = factory.CanaryDPFactory.gaussian_adaptive(
      0.0, 4, initial_l2_norm_clip=0.05, canaries=config)
  process = _process(aggregator)
  _, metrics = _run(process, process.initialize(), _clients(4), 3)
  clips = [m["aggregator"]["clip"] for m in metrics]
  next_clips = [m["aggregator"]["dp_query_metrics"]["clip"] for m in metrics]
  assert clips[0] == np.float32(0.05)
  # dp_query_metrics['clip'] is the NEXT round's clip.
  np.testing.assert_array_equal(clips[1:], next_clips[:-1])
  # Client updates are larger than 0.05, so the clip grows.
  assert next_clips[-1] > clips[0]


def test_adaptive_canaries_do_not_vote_in_the_quantile():
  # With no clients, the quantile estimate has no votes (fraction = target):
  # the clip stays where it is. Three voting canaries (norm = clip) would
  # move it by a factor exp(-+0.2 * 0.375) = 0.93 or 1.08 in one round.
  config = _config(num_inserted=3, num_held_out=0, rounds=2, presentations=2)
  value_type = tff.types.to_type(tff.TensorType(np.float32, [400]))
  process = factory.CanaryDPFactory.gaussian_adaptive(
      0.0, 4, initial_l2_norm_clip=0.1, canaries=config).create(value_type)
  output = process.next(process.initialize(), [])
  assert output.measurements["canaries_inserted"] == 3
  assert output.measurements["dp_query_metrics"]["clip"] == np.float32(0.1)
  c = canary_directions.canary_block(config.seed, [0, 1, 2], 400)
  c = c.astype(np.float64)
  np.testing.assert_allclose(output.result, 0.1 * c.sum(0) / 4, atol=1e-7)


def test_zeroing_and_weighted_configurations_run():
  config = _config()
  # TFF refuses z >= 2 * 0.05 * clients_per_round (= 0.4 here).
  zeroing = factory.canary_dp_aggregator(0.1, 4, config, zeroing=True)
  process = _process(zeroing)
  state, metrics = _run(process, process.initialize(), _clients(4), 2)
  inner = metrics[-1]["aggregator"]["zeroing"]
  assert inner["canaries_inserted"] == config.participation.per_round()[1]
  assert metrics[-1]["aggregator"]["zeroed_count"] == 0
  # TFF's zeroing wrapper keeps the DP factory's state under 'inner_agg'.
  inner_state = state.aggregator["inner_agg"]
  assert isinstance(inner_state, canary_process.CanaryDPAggregatorState)
  event = tff.aggregators.differential_privacy.extract_dp_event_from_state(
      inner_state)
  assert type(event).__name__ == "ComposedDpEvent"

  weighted = tff.aggregators.as_weighted_aggregator(
      factory.CanaryDPFactory.gaussian_fixed(0.5, 4, CLIP, canaries=config))
  process = _process(weighted, weighted=True)
  _, metrics = _run(process, process.initialize(), _clients(4), 2)
  assert metrics[-1]["aggregator"]["canaries_inserted"] == (
      config.participation.per_round()[1])


@pytest.mark.parametrize("ours, theirs", [
    # test_paper_ratio's process without canaries, n = 5. Only 4 clients
    # come, so a mean over the clients present instead of n also shows.
    (lambda request: request.getfixturevalue("zero_canary_process"),
     lambda: tff.aggregators.DifferentiallyPrivateFactory.gaussian_fixed(
         0.0, 5.0, CLIP)),
    (lambda request: _process(factory.canary_dp_aggregator(
        0.0, 4, _config(num_inserted=0, num_held_out=0), zeroing=True)),
     lambda: tff.learning.dp_aggregator(0.0, 4.0, zeroing=True)),
], ids=["fixed", "adaptive_zeroing"])
def test_zero_canaries_behave_exactly_like_tff(request, ours, theirs):
  clients = _clients(4, seed=2)
  process_ours = ours(request)
  process_theirs = _process(theirs())
  state0 = process_theirs.initialize()
  state_t, metrics_t = _run(process_theirs, state0, clients, 3)
  state_o = _with_weights_of(process_ours, state0)
  state_o, metrics_o = _run(process_ours, state_o, clients, 3)
  np.testing.assert_array_equal(_flat(process_ours.get_model_weights(state_o)),
                                _flat(process_theirs.get_model_weights(
                                    state_t)))
  assert all(m["aggregator"].get("canaries_inserted",
                                 m["aggregator"].get("zeroing", {}).get(
                                     "canaries_inserted")) == 0
             for m in metrics_o)
  assert metrics_t[-1]["client_work"] == metrics_o[-1]["client_work"]


def test_zeroing_is_tffs_default_zeroing():
  # `with_zeroing` rebuilds TFF's default zeroing (private in TFF 0.87) from
  # public symbols: the zeroing norm it reports, which clients it zeroes and
  # the result must be those of tff.learning.dp_aggregator(zeroing=True),
  # round by round. The threshold starts at 2 * 10 + 1 and moves every round
  # (clients of max-abs norm 100, 15, 0.5 and 0.2 keep half to three
  # quarters below the estimate), so a different initial estimate, quantile,
  # rate, multiplier or increment changes the reported norm, and the client
  # of norm 100 is zeroed in the first round.
  value_type = tff.types.to_type(tff.TensorType(np.float32, [4]))
  ours = factory.canary_dp_aggregator(
      0.0, 4, _config(num_inserted=0, num_held_out=0)).create(value_type)
  theirs = tff.learning.dp_aggregator(0.0, 4.0, zeroing=True).create(
      value_type)
  clients = [np.array([100.0, 0.0, 0.0, 0.0], np.float32),
             np.full(4, 15.0, np.float32), np.full(4, 0.5, np.float32),
             np.full(4, -0.2, np.float32)]
  state_o, state_t = ours.initialize(), theirs.initialize()
  norms, zeroed = [], []
  for _ in range(4):
    out_o, out_t = ours.next(state_o, clients), theirs.next(state_t, clients)
    for key in ("zeroing_norm", "zeroed_count"):
      assert out_o.measurements[key] == out_t.measurements[key], key
    np.testing.assert_array_equal(out_o.result, out_t.result)
    norms.append(float(out_t.measurements["zeroing_norm"]))
    zeroed.append(int(out_t.measurements["zeroed_count"]))
    state_o, state_t = out_o.state, out_t.state
  assert norms[0] == 21.0 and len(set(norms)) == 4, norms
  assert zeroed[0] == 1, zeroed


# ------------------------------------------------------------ bad input


@pytest.mark.parametrize("build, error, match", [
    (lambda c: factory.CanaryDPFactory.gaussian_fixed(-0.1, 4, 1.0,
                                                      canaries=c),
     ValueError, "noise_multiplier"),
    (lambda c: factory.CanaryDPFactory.gaussian_fixed(0.1, 4, 0.0,
                                                      canaries=c),
     ValueError, "clip"),
    (lambda c: factory.CanaryDPFactory.gaussian_fixed(0.1, 0, 1.0,
                                                      canaries=c),
     ValueError, "clients_per_round"),
    (lambda c: factory.CanaryDPFactory.gaussian_fixed("1", 4, 1.0,
                                                      canaries=c),
     TypeError, "noise_multiplier"),
    (lambda c: factory.CanaryDPFactory.gaussian_fixed(0.1, 4, 1.0,
                                                      canaries=None),
     TypeError, "canaries"),
    (lambda c: factory.CanaryDPFactory.gaussian_adaptive(
        0.1, 4, initial_l2_norm_clip=-1.0, canaries=c),
     ValueError, "initial_l2_norm_clip"),
    (lambda c: factory.CanaryDPFactory.gaussian_adaptive(
        0.1, 4, target_unclipped_quantile=1.5, canaries=c),
     ValueError, "target_unclipped_quantile"),
    (lambda c: factory.CanaryDPFactory.gaussian_adaptive(
        1.0, 4, canaries=c),
     ValueError, "clipped_count_stddev"),
    (lambda c: factory.CanaryDPFactory(tfp.NoPrivacySumQuery(), c),
     TypeError, "sum_query"),
    # A NormalizedQuery hides its numerator (no public accessor): refused,
    # with the way to pass its parts.
    (lambda c: factory.CanaryDPFactory(
        tfp.NormalizedQuery(tfp.GaussianSumQuery(1.0, 0.0), denominator=4), c),
     TypeError, "clients_per_round"),
    (lambda c: factory.CanaryDPFactory(
        tfp.GaussianSumQuery(1.0, 0.0), c, clients_per_round=0),
     ValueError, "clients_per_round"),
    (lambda c: factory.CanaryDPFactory(
        tfp.GaussianSumQuery(1.0, 0.0), c,
        record_aggregation_factory=tff.aggregators.MeanFactory()),
     TypeError, "record_aggregation_factory"),
    (lambda c: factory.canary_dp_aggregator(0.1, 4, c, zeroing="no"),
     TypeError, "zeroing"),
    (lambda c: factory.CanaryDPFactory.gaussian_fixed(0.1, 4, 1.0, canaries=c,
                                                      noise_seed=-1),
     ValueError, "noise_seed"),
    (lambda c: factory.CanaryDPFactory.gaussian_fixed(0.1, 4, 1.0, canaries=c,
                                                      noise_seed=1.5),
     TypeError, "noise_seed"),
])
def test_bad_configuration_fails_at_construction(build, error, match):
  with pytest.raises(error, match=match):
    build(_config())


def test_too_many_canaries_warns_at_create():
  config = _config(num_inserted=20, num_held_out=10)
  aggregator = factory.CanaryDPFactory.gaussian_fixed(0.0, 4, 1.0,
                                                      canaries=config)
  with pytest.warns(canary_config.TooManyCanariesWarning, match="30 canaries"):
    aggregator.create(tff.types.to_type(tff.TensorType(np.float32, [2000])))


def test_integer_values_are_refused_at_create():
  aggregator = factory.CanaryDPFactory.gaussian_fixed(0.0, 4, 1.0,
                                                      canaries=_config())
  with pytest.raises(TypeError, match="int32"):
    aggregator.create(tff.types.to_type(tff.TensorType(np.int32, [2000])))


def test_measurements_without_the_aggregate():
  config = _config(num_inserted=1, num_held_out=0, rounds=1, presentations=1,
                   record_aggregates=False)
  process = factory.CanaryDPFactory.gaussian_fixed(
      0.0, 1, 1.0, canaries=config).create(
          tff.types.to_type(tff.TensorType(np.float32, [200])))
  output = process.next(process.initialize(), [])
  assert "noised_aggregate" not in output.measurements
  assert output.measurements["canaries_inserted"] == 1
