"""Tests of tff_canary.federated.insertion.canary_clients and canary_client_outcomes:
canary clients inserted as clients, through TFF's own aggregators (CPU).

The model is a 20-3 softmax regression (d = 63) on synthetic Gaussian-class
data, 3 real clients, one round per process. Noise is 0 (TFF's DP noise is
unseeded), so a round's canary contributions are exact: the model after a
round with canary clients minus the model after the same round without them
(TFF's plain `build_unweighted_fed_avg`, same aggregator, same data) is
sum_j a_j c_j / clients_per_round, and least squares on the canary directions
recovers each a_j, the norm at which canary j entered the sum.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import tensorflow as tf

from tff_canary.federated.insertion import canary_client_outcomes as outcomes_lib
from tff_canary.federated.insertion import canary_clients
from tff_canary.federated.insertion import canary_directions
from tff_canary.federated.insertion import factory
from tff_canary.federated.structures import flat_layout
from tff_canary.stats.canaries import canary_config
from tff_canary.stats.canaries import schedules
import tensorflow_federated as tff  # pylint: disable=g-bad-import-order
import tensorflow_privacy as tfp  # pylint: disable=g-bad-import-order

pytestmark = pytest.mark.tff

FEATURES, CLASSES = 20, 3
DIM = FEATURES * CLASSES + CLASSES  # 63
CLIP = 0.5
CLIENTS_PER_ROUND = 5.0  # the DP aggregators' fixed denominator
SEED = 11
# float32 weights of size ~0.3 differenced between two processes: sums of
# the same updates in another order differ by ~1e-7; amounts are ~0.1.
ATOL = 2e-5


def _model_fn():
  keras_model = tf.keras.Sequential([
      tf.keras.layers.InputLayer(input_shape=(FEATURES,)),
      tf.keras.layers.Dense(
          CLASSES,
          kernel_initializer=tf.keras.initializers.GlorotUniform(seed=1)),
  ])
  return tff.learning.models.from_keras_model(
      keras_model,
      loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True),
      input_spec=(tf.TensorSpec([None, FEATURES], tf.float32),
                  tf.TensorSpec([None], tf.int32)))


def _client_optimizer():
  return tff.learning.optimizers.build_sgdm(0.1)


@pytest.fixture(scope="module", name="clients")
def fixture_clients():
  rng = np.random.default_rng(0)
  means = rng.normal(size=(CLASSES, FEATURES))
  datasets = []
  for _ in range(3):
    y = rng.integers(0, CLASSES, 20).astype(np.int32)
    x = (means[y] + rng.normal(size=(20, FEATURES))).astype(np.float32)
    datasets.append(tf.data.Dataset.from_tensor_slices((x, y)).batch(10))
  return datasets


def _plain(aggregator):
  return tff.learning.algorithms.build_unweighted_fed_avg(
      _model_fn, _client_optimizer(), model_aggregator=aggregator)


def _with_canaries(aggregator, canary_norm=canary_clients.DEFAULT_CANARY_NORM):
  return canary_clients.build_canary_client_fedavg(
      _model_fn, _client_optimizer(), model_aggregator=aggregator,
      canary_seed=SEED, canary_norm=canary_norm)


def _one_round(process, data):
  """Flat weights after one round from initialize(), and the metrics."""
  state = process.initialize()
  output = process.next(state, data)
  return (flat_layout.flatten_numpy(
      process.get_model_weights(output.state).trainable), output.metrics)


def _amounts(delta, ids, seed=SEED):
  """Least-squares a_j / clients_per_round of delta = sum_j (a_j/n) c_j."""
  block = canary_directions.canary_block(seed, ids, DIM).astype(np.float64)
  coefficients, *_ = np.linalg.lstsq(block.T, delta.astype(np.float64),
                                     rcond=None)
  return coefficients * CLIENTS_PER_ROUND


@pytest.fixture(scope="module", name="fixed_plain_round")
def fixture_fixed_plain_round(clients):
  """TFF's plain process with gaussian_fixed: one round's weights, metrics."""
  return _one_round(_plain(_fixed()), clients)


def _fixed(sum_query=None):
  if sum_query is None:
    return tff.aggregators.DifferentiallyPrivateFactory.gaussian_fixed(
        noise_multiplier=0.0, clients_per_round=CLIENTS_PER_ROUND, clip=CLIP)
  return tff.aggregators.DifferentiallyPrivateFactory(
      tfp.NormalizedQuery(sum_query, denominator=CLIENTS_PER_ROUND))


def test_real_data_is_untouched_and_canaries_carry_their_id(clients):
  data = canary_clients.with_canary_clients(clients, [4, 7])
  assert len(data) == 5
  assert all(d["data"].element_spec == clients[0].element_spec for d in data)
  assert all(d["data"] is c for d, c in zip(data, clients))
  assert [[int(i) for i in d["canary_id"]] for d in data] == [
      [-1], [-1], [-1], [4], [7]]
  assert [len(list(d["data"])) for d in data[3:]] == [0, 0]


def test_scheduled_ids_are_the_server_side_schedule(clients):
  config = canary_config.CanaryConfig(
      seed=SEED, num_inserted=6, num_held_out=4,
      schedule=schedules.FixedPresentations(5, 2), assignment="fixed",
      directions="gaussian")
  rounds = [canary_clients.scheduled_canary_ids(config, r) for r in range(5)]
  events = sorted((r, int(j)) for r, ids in enumerate(rounds) for j in ids)
  assert events == sorted(map(tuple, config.participation.events.tolist()))
  # Each inserted canary twice, no held-out one ever.
  counts = np.bincount(np.concatenate(rounds), minlength=10)
  np.testing.assert_array_equal(counts, [2] * 6 + [0] * 4)
  data = canary_clients.with_canary_clients(clients, rounds[0], config)
  assert len(data) == len(clients) + len(rounds[0])


@pytest.mark.parametrize("canary_norm", [canary_clients.DEFAULT_CANARY_NORM,
                                         0.2])
def test_fixed_dp_clips_canaries_and_leaves_real_clients_alone(
    clients, fixed_plain_round, canary_norm):
  plain_weights, plain_metrics = fixed_plain_round
  process = _with_canaries(_fixed(), canary_norm)
  none_weights, _ = _one_round(
      process, canary_clients.with_canary_clients(clients, []))
  np.testing.assert_allclose(none_weights, plain_weights, atol=1e-7)
  weights, metrics = _one_round(
      process, canary_clients.with_canary_clients(clients, [4, 7]))
  # The aggregator clipped them: each entered at min(norm, clip).
  np.testing.assert_allclose(_amounts(plain_weights - weights, [4, 7]),
                             [min(canary_norm, CLIP)] * 2, atol=ATOL)
  work = metrics["client_work"]
  assert work[canary_clients.MEASUREMENT_KEY] == 2
  plain_train = plain_metrics["client_work"]["train"]
  assert work["train"]["num_examples"] == plain_train["num_examples"]
  assert work["train"]["loss"] == pytest.approx(plain_train["loss"], rel=1e-6)


class TenfoldClipQuery(tfp.GaussianSumQuery):
  """A planted clip bug: records clipped at 10 C, params and DpEvent say C."""

  def preprocess_record(self, params, record):
    return super().preprocess_record(10.0 * params, record)


# One server-side canary on a d = 63 model is over the dim / 100 advice; the
# test reads one canary's amount, not cosines, so the cross-talk is moot.
@pytest.mark.filterwarnings("ignore::tff_canary.stats.canaries.canary_config."
                            "TooManyCanariesWarning")
def test_a_tenfold_client_clip_is_visible_to_canary_clients_only(clients):
  query = TenfoldClipQuery(l2_norm_clip=CLIP, stddev=0.0)
  claimed = query.derive_sample_params(query.initial_global_state())
  assert float(claimed) == CLIP  # what the DpEvent and the server believe
  plain_weights, _ = _one_round(_plain(_fixed(query)), clients)
  # Canary clients (norm 10 > 10 C = 5) enter at the real clip, 10 C.
  weights, _ = _one_round(_with_canaries(_fixed(query)),
                          canary_clients.with_canary_clients(clients, [0]))
  np.testing.assert_allclose(_amounts(plain_weights - weights, [0]),
                             [10 * CLIP], atol=ATOL)
  # Server-side canaries (the existing factory, same query, same seed) enter
  # at the clip the query claims, C: the bug is invisible to them.
  config = canary_config.CanaryConfig(
      seed=SEED, num_inserted=1, num_held_out=0,
      schedule=schedules.FixedPresentations(1, 1), assignment="fixed",
      directions="gaussian")
  server_side = factory.CanaryDPFactory(query, config,
                                        clients_per_round=CLIENTS_PER_ROUND)
  server_weights, _ = _one_round(_plain(server_side), clients)
  np.testing.assert_allclose(_amounts(plain_weights - server_weights, [0]),
                             [CLIP], atol=ATOL)


def test_adaptive_clipping_clips_canaries_and_counts_their_votes(clients):
  # gaussian_adaptive, no noise (clipped-count noise 0 too): round 0 clips at
  # the initial clip; the next clip is clip * exp(-lr (b - target)) (Andrew
  # et al. 2021, arXiv 1905.03871, geometric update), b the unclipped
  # fraction, which tensorflow_privacy estimates from centered votes,
  # b = sum_i ([|x_i| <= clip] - 1/2) / n + 1/2 with the fixed n =
  # clients_per_round. Each canary above the clip adds -1/2 to the sum, so
  # with k canaries the next clip is exp(lr k / (2 n)) times the clip without
  # them (lr = 0.2, TFF's default); a canary that did not vote leaves it equal.
  def aggregator():
    return tff.aggregators.DifferentiallyPrivateFactory.gaussian_adaptive(
        noise_multiplier=0.0, clients_per_round=CLIENTS_PER_ROUND,
        initial_l2_norm_clip=0.1)

  plain_weights, plain_metrics = _one_round(_plain(aggregator()), clients)
  weights, metrics = _one_round(
      _with_canaries(aggregator()),
      canary_clients.with_canary_clients(clients, [2, 3]))
  np.testing.assert_allclose(_amounts(plain_weights - weights, [2, 3]),
                             [0.1, 0.1], atol=ATOL)
  next_clip = metrics["aggregator"]["dp_query_metrics"]["clip"]
  plain_next_clip = plain_metrics["aggregator"]["dp_query_metrics"]["clip"]
  assert next_clip / plain_next_clip == pytest.approx(
      math.exp(0.2 * 2 / (2 * CLIENTS_PER_ROUND)), rel=1e-5)


def test_default_zeroing_drops_a_canary_and_the_outcomes_say_so(clients):
  # TFF's dp_aggregator: adaptive zeroing (L-inf, first threshold 2*10+1),
  # then adaptive clipping starting at 0.1. Pick the two candidate canaries
  # with the largest and smallest L-inf norm and a canary norm between the
  # two that puts only the first above the threshold.
  ids = np.arange(20)
  inf_norms = np.abs(canary_directions.canary_block(SEED, ids, DIM)).max(1)
  high, low = int(ids[inf_norms.argmax()]), int(ids[inf_norms.argmin()])
  first_threshold = 21.0
  norm = first_threshold / math.sqrt(inf_norms.max() * inf_norms.min())

  def aggregator():
    return tff.learning.dp_aggregator(noise_multiplier=0.0,
                                      clients_per_round=CLIENTS_PER_ROUND)

  plain_weights, _ = _one_round(_plain(aggregator()), clients)
  weights, metrics = _one_round(
      _with_canaries(aggregator(), norm),
      canary_clients.with_canary_clients(clients, [high, low]))
  assert metrics["aggregator"]["zeroing_norm"] == pytest.approx(
      first_threshold)
  assert metrics["aggregator"]["zeroed_count"] == 1
  # The dropped canary is not in the sum; the other entered at the clip.
  np.testing.assert_allclose(_amounts(plain_weights - weights, [high, low]),
                             [0.0, 0.1], atol=ATOL)
  found = outcomes_lib.canary_client_outcomes(metrics, 0, [high, low], SEED,
                                              norm, DIM)
  assert [o.zeroed for o in found] == [True, False]
  assert "ZEROED" in found[0].summary() and "ZEROED" not in found[1].summary()
  assert found[0].stages[0].count == 1
  # Under L2 both canaries (norm > 21) would be zeroed, one more than the
  # measured count: a wrong norm order is an error, not a wrong record.
  with pytest.raises(ValueError, match="zeroing_norm_order"):
    outcomes_lib.canary_client_outcomes(metrics, 0, [high, low], SEED, norm,
                                        DIM, zeroing_norm_order=2)


def test_a_clipping_stage_is_recorded_as_clipping():
  metrics = {"aggregator": {
      "clipping": {"zeroing": {"dp": ()}, "zeroing_norm": 3.0,
                   "zeroed_count": 0},
      "clipping_norm": 2.0, "clipped_count": 1}}
  (found,) = outcomes_lib.canary_client_outcomes(metrics, 3, [5], SEED, 10.0,
                                                 DIM)
  assert [s.kind for s in found.stages] == ["clipping", "zeroing"]
  assert found.clipped and not found.zeroed
  # After the clip to 2, the zeroing stage sees 2 * |c|_inf, not 10 |c|_inf.
  c = canary_directions.canary_block(SEED, [5], DIM)[0]
  assert found.stages[1].canary_norm == pytest.approx(
      2.0 * np.abs(c).max(), rel=1e-6)
  assert found.as_dict()["round_num"] == 3


@pytest.mark.parametrize("call, error, match", [
    (lambda c: canary_clients.build_canary_client_fedavg(
        _model_fn, _client_optimizer(), canary_seed=1, canary_norm=0.0),
     ValueError, r"canary_norm must be positive, got 0\.0"),
    (lambda c: canary_clients.build_canary_client_fedavg(
        _model_fn, _client_optimizer(), canary_seed=1, canary_norm=math.nan),
     ValueError, "canary_norm must be finite"),
    (lambda c: canary_clients.build_canary_client_fedavg(
        _model_fn, _client_optimizer(), canary_seed=-1),
     ValueError, "canary_seed must be at least 0, got -1"),
    (lambda c: canary_clients.build_canary_client_fedavg(
        _model_fn, _client_optimizer(), canary_seed=1,
        model_aggregator=tff.aggregators.MeanFactory()),
     TypeError, "model_aggregator must be"),
    (lambda c: canary_clients.build_canary_client_work("x", 1),
     TypeError, "client_work must be"),
    (lambda c: canary_clients.with_canary_clients(c, [2, -2]),
     ValueError, r"canary_ids\[1\] must be at least 0, got -2"),
    (lambda c: canary_clients.with_canary_clients(c, [3, 3]),
     ValueError, r"canary_ids must be distinct, got \[3\]"),
    (lambda c: canary_clients.with_canary_clients(c, [1.5]),
     TypeError, r"canary_ids\[0\] must be an integer, got 1.5"),
    (lambda c: canary_clients.with_canary_clients(c[0], [1]),
     TypeError, "client_datasets must be a non-empty list"),
    (lambda c: canary_clients.with_canary_clients(
        [c[0], c[1].unbatch()], [1]),
     ValueError, r"client_datasets\[1\] has element spec"),
    (lambda c: canary_clients.canary_client(2**31, c[0]),
     ValueError, "canary_id must fit in int32"),
    (lambda c: canary_clients.with_canary_clients(
        c, [0, 1], canary_config.CanaryConfig(
            SEED, 1, 1, schedules.FixedPresentations(2, 1),
            assignment="fixed", directions="gaussian")),
     ValueError, r"canary_ids\[1\] = 1 is held out in canaries"),
    (lambda c: canary_clients.with_canary_clients(
        c, [5], canary_config.CanaryConfig(
            SEED, 1, 1, schedules.FixedPresentations(2, 1),
            assignment="fixed", directions="gaussian")),
     ValueError, r"canary_ids\[0\] = 5 is not one of its 2 canaries"),
    (lambda c: canary_clients.scheduled_canary_ids(
        canary_config.CanaryConfig(SEED, 1, 0, schedules.FixedPresentations(
            2, 1), assignment="fixed", directions="gaussian"), 2),
     ValueError, "round_num must be below the schedule's num_rounds = 2"),
    (lambda c: outcomes_lib.canary_client_outcomes(
        {}, 0, [1], SEED, 1.0, DIM, zeroing_norm_order=3),
     ValueError, "zeroing_norm_order must be 1, 2 or inf, got 3"),
])
def test_bad_input_names_the_argument(clients, call, error, match):
  with pytest.raises(error, match=match):
    call(clients)


def test_orthogonal_canary_clients_are_scored_in_the_round(clients):
  # Canary clients with orthogonal canaries: each emits its row of R at
  # canary_norm, TFF's DP aggregator clips it to CLIP like any client, and the
  # CanaryScoringFactory around it scores every canary in the round's result.
  # With zero noise and no real clients the round's mean is the clipped
  # canaries / n, so an inserted canary alone in its residual has cosine 1
  # and a held-out one 0 (float32 transforms: 1e-5).
  from tff_canary.federated.insertion import orthogonal_transform  # pylint: disable=g-import-not-at-top
  config = canary_config.CanaryConfig(
      seed=SEED, num_inserted=4, num_held_out=4,
      schedule=schedules.FixedPresentations(2, 1), assignment="fixed",
      directions="orthogonal")
  process = canary_clients.build_canary_client_fedavg(
      _model_fn, _client_optimizer(), model_aggregator=_fixed(),
      canary_seed=SEED, canaries=config)
  state = process.initialize()
  empty = [c.take(0) for c in clients[:1]]
  rows = orthogonal_transform.canary_block(SEED, np.arange(8), DIM)
  for r in range(2):
    before = flat_layout.flatten_numpy(
        process.get_model_weights(state).trainable)
    ids = canary_clients.scheduled_canary_ids(config, r)
    output = process.next(state, canary_clients.with_canary_clients(
        empty, ids, config))
    state = output.state
    after = flat_layout.flatten_numpy(
        process.get_model_weights(state).trainable)
    # Server SGD at 1.0: theta_{r} - theta_{r+1} = clipped canaries / n.
    want = CLIP * rows[ids].astype(np.float64).sum(axis=0) / CLIENTS_PER_ROUND
    np.testing.assert_allclose(before - after, want, atol=ATOL)
  scores = state.aggregator.scores
  np.testing.assert_allclose(scores.max_cosine[:4], 1.0, atol=1e-5)
  assert np.abs(scores.max_cosine[4:]).max() < 1e-3
  assert int(state.aggregator.round_num) == 2
  with pytest.raises(ValueError, match="canary_seed"):
    canary_clients.build_canary_client_fedavg(
        _model_fn, _client_optimizer(), model_aggregator=_fixed(),
        canary_seed=SEED + 1, canaries=config)
