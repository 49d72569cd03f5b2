"""Tests of tff_canary.mechanisms.tree.aggregation: DP-FTRL's tree
aggregation with canaries, as real TFF aggregation processes (CPU).

The value is two tensors, [32, 8] and [8] (d = 264), the aggregation
processes are used directly (`factory.create(VALUE).next(state, clients)`),
and every noisy process has a `noise_seed`, so each test is deterministic
(`tree_adaptive`'s clipped-count tree too: `seeded_query`). The
reference law of the scores is `tff_canary.stats.correlated.tree_noise`'s
covariance; the reference process is TFF's own
`DifferentiallyPrivateFactory.tree_aggregation` / `tree_adaptive`.
"""

from __future__ import annotations

import dataclasses
import warnings

import dp_accounting
import numpy as np
import pytest
from scipy import linalg
from scipy import stats
import tensorflow as tf

from tff_canary.federated.insertion import adaptive_clip
from tff_canary.federated.insertion import canary_clients
from tff_canary.federated.insertion import canary_directions
from tff_canary.federated.insertion import factory
from tff_canary.federated.insertion import measurement_keys
from tff_canary.federated.insertion import orthogonal_transform
from tff_canary.federated.insertion import query_noise
from tff_canary.federated.structures import flat_layout
from tff_canary.federated.structures import nested_search
from tff_canary.harness.writing import run_writer
from tff_canary.mechanisms.tree import aggregation
from tff_canary.stats.accounting import ledger as ledger_lib
from tff_canary.stats.canaries import canary_config
from tff_canary.stats.canaries import schedules
from tff_canary.stats.correlated import tree_accounting
from tff_canary.stats.correlated import tree_noise
import tensorflow_federated as tff  # pylint: disable=g-bad-import-order
import tensorflow_privacy as tfp  # pylint: disable=g-bad-import-order
from federated.insertion import test_canary_clients as client_mode  # pylint: disable=g-bad-import-order

pytestmark = pytest.mark.tff

VALUE = tff.types.to_type([tff.TensorType(np.float32, [32, 8]),
                           tff.TensorType(np.float32, [8])])
SPECS = tff.types.type_to_tf_tensor_specs(VALUE)
DIM = 32 * 8 + 8  # 264
SEED = 11
SCORES = measurement_keys.TREE_SCORES_KEY


def _config(num_inserted=6, num_held_out=4, rounds=8, presentations=2,
            directions="orthogonal", seed=SEED):
  return canary_config.CanaryConfig(
      seed=seed, num_inserted=num_inserted, num_held_out=num_held_out,
      schedule=schedules.FixedPresentations(rounds, presentations),
      assignment="fixed", directions=directions)


def _client_values(rng, count, scale=0.3):
  """`count` client values; norms ~ scale * sqrt(d) (~4.9), above the clips."""
  return [[rng.normal(scale=scale, size=(32, 8)).astype(np.float32),
           rng.normal(scale=scale, size=8).astype(np.float32)]
          for _ in range(count)]


def _flat(value):
  return flat_layout.flatten_numpy(value).astype(np.float64)


def _clipped_sum(values, clip):
  """sum_i clip_C(x_i) in float64 (tf.clip_by_global_norm's rule)."""
  total = np.zeros(DIM)
  for v in values:
    x = _flat(v)
    total += x * min(1.0, clip / np.linalg.norm(x))
  return total


def _clip_value(state):
  """The tree's `clip_value` in an aggregation state (its query state)."""
  node = nested_search.find_first(
      state.query_state,
      lambda s: hasattr(s, "_fields") and "clip_value" in s._fields)
  return float(np.asarray(node.clip_value))


def _canary_sum(config, ids):
  rows = orthogonal_transform.rows(config.seed, DIM, config.num_canaries)
  return orthogonal_transform.canary_sum(
      tf.constant(config.seed, tf.int64), tf.constant(ids, tf.int32), DIM,
      rows).numpy().astype(np.float64)


def _round_ids(config, round_num):
  events = config.participation.events
  return events[events[:, 0] == round_num, 1]


# ----------------------------------------------------- identical to TFF's


def _restarted_tff_tree(noise_seed, clients_per_round, clip, noise_multiplier):
  """TFF's factory over the restarted tree TFF's tree_aggregation lacks."""
  query = tfp.RestartQuery(
      tfp.TreeResidualSumQuery.build_l2_gaussian_query(
          clip, noise_multiplier, SPECS, noise_seed=noise_seed),
      tfp.restart_query.PeriodicRoundRestartIndicator(period=3, warmup=2))
  return tff.aggregators.DifferentiallyPrivateFactory(
      tfp.NormalizedQuery(query, denominator=clients_per_round))


@pytest.mark.parametrize("ours, theirs, rounds, same_state", [
    (lambda c: aggregation.tree_aggregation(
        0.8, 3, 1.0, canaries=c, noise_seed=7),
     lambda: tff.aggregators.DifferentiallyPrivateFactory.tree_aggregation(
         0.8, 3.0, 1.0, SPECS, noise_seed=7), 6, True),
    (lambda c: aggregation.tree_aggregation(
        0.8, 3, 1.0, canaries=c, noise_seed=7, use_efficient=False),
     lambda: tff.aggregators.DifferentiallyPrivateFactory.tree_aggregation(
         0.8, 3.0, 1.0, SPECS, noise_seed=7, use_efficient=False), 6, True),
    (lambda c: aggregation.tree_aggregation(
        0.8, 3, 1.0, canaries=c, noise_seed=7, restart_period=3,
        restart_warmup=2),
     lambda: _restarted_tff_tree(7, 3.0, 1.0, 0.8), 6, True),
    # TFF's tree_adaptive: its clipped-count tree is unseeded (ours is
    # seeded), so only the rounds before the first restart (clip = the
    # initial one) are equal; its state is not compared.
    ("adaptive_process",
     lambda: tff.aggregators.DifferentiallyPrivateFactory.tree_adaptive(
         0.2, 3.0, SPECS, initial_l2_norm_clip=1.0, restart_warmup=4,
         restart_frequency=8, noise_seed=7), 4, False),
], ids=["efficient", "plain", "restarted", "adaptive"])
def test_no_canaries_scheduled_is_exactly_tffs_process(ours, theirs, rounds,
                                                       same_state, request):
  # Held-out orthogonal canaries only: scored every round, never inserted.
  config = _config(num_inserted=0, num_held_out=4)
  process_o = (request.getfixturevalue(ours) if isinstance(ours, str)
               else ours(config).create(VALUE))
  process_t = theirs().create(VALUE)
  state_o, state_t = process_o.initialize(), process_t.initialize()
  rng = np.random.default_rng(3)
  for _ in range(rounds):
    clients = _client_values(rng, 3)
    out_o = process_o.next(state_o, clients)
    out_t = process_t.next(state_t, clients)
    state_o, state_t = out_o.state, out_t.state
    for a, b in zip(out_o.result, out_t.result):
      np.testing.assert_array_equal(a, b)
    m_o, m_t = out_o.measurements, out_t.measurements
    assert m_o["canaries_inserted"] == 0
    assert np.asarray(m_o[SCORES]).shape == (4,)
    if same_state:
      assert m_o["dp_query_metrics"] == m_t["dp_query_metrics"]
  if same_state:
    leaves_o = tf.nest.flatten(state_o.query_state)
    leaves_t = tf.nest.flatten(state_t.query_state)
    # The tree's buffer, generator seeds and std, clip, previous noise, ...
    assert len(leaves_o) == len(leaves_t) >= 9
    for a, b in zip(leaves_o, leaves_t):
      np.testing.assert_array_equal(a, b)
  assert (dp_accounting.DpEvent.from_named_tuple(state_o.dp_event)
          == dp_accounting.DpEvent.from_named_tuple(state_t.dp_event))


# ------------------------------------------------------ zero noise, exact


@pytest.mark.parametrize("build, adaptive", [
    (lambda c: aggregation.tree_aggregation(
        0.0, 4, 0.5, canaries=c, use_efficient=False, restart_period=3,
        restart_warmup=1), False),
    # Zero noise everywhere (the clipped count too): the clip moves at the
    # restarts, deterministically.
    (lambda c: aggregation.tree_adaptive(
        0.0, 4, initial_l2_norm_clip=0.5, restart_warmup=1, restart_period=3,
        clipped_count_stddev=0.0, canaries=c), True),
], ids=["fixed", "adaptive"])
def test_zero_noise_canaries_enter_exactly_at_the_clip(build, adaptive):
  config = _config(num_inserted=6, num_held_out=4, rounds=8, presentations=3)
  process = build(config).create(VALUE)
  rows = orthogonal_transform.rows(config.seed, DIM, config.num_canaries)
  state = process.initialize()
  rng = np.random.default_rng(5)
  clips = []
  for r in range(8):
    clients = _client_values(rng, 3) if r % 2 == 0 else []
    clip = _clip_value(state)  # the tree's clip_value before the round
    output = process.next(state, clients)
    state = output.state
    m = output.measurements
    ids = _round_ids(config, r)
    assert m["canaries_inserted"] == ids.size
    assert float(m["clip"]) == clip
    clips.append(clip)
    # The released sum minus the clipped clients is C_r times the round's
    # canaries. Entries are ~C / sqrt(d) ~ 0.03 (canaries, clipped clients)
    # and below 1; the process adds and divides in float32 (ulp <= 6e-8
    # below 1), the reference is float64: 2e-6 is > 30 ulps.
    released = _flat(output.result) * 4
    np.testing.assert_allclose(released - _clipped_sum(clients, clip),
                               clip * _canary_sum(config, ids), atol=2e-6)
    # Scores in units of the clip (z = 0): each of the round's canaries adds
    # exactly 1, the clients <c_j, their clipped sum> / C. The transform is
    # float32 on a vector of norm <= 3 + sqrt(3) in these units (relative
    # rounding ~1e-6): 5e-5 leaves a margin of 10.
    expected = np.zeros(config.num_canaries)
    expected[ids] = 1.0
    if clients:
      expected += orthogonal_transform.scores(
          tf.constant(config.seed, tf.int64),
          tf.constant(_clipped_sum(clients, clip) / clip, tf.float32), DIM,
          rows).numpy()
    np.testing.assert_allclose(np.asarray(m[SCORES]), expected, atol=5e-5)
  # Trees of rounds [0], [1, 2, 3], [4, 5, 6], [7] (restart after calls k
  # with k mod 3 == 1): the clip is constant within a tree, and the
  # adaptive one moves at each restart.
  assert clips[1] == clips[2] == clips[3] and clips[4] == clips[5] == clips[6]
  assert len(set(clips)) == (4 if adaptive else 1)


# ------------------------------------------ the scores' law, tree covariance

# Each check below has false-alarm probability ALPHA under the law it tests;
# with fixed seeds the outcome is fixed, and ALPHA says how far from the
# claimed law a sample must be to fail (4 checks x 2 groups x 3 processes:
# a correct process fails by chance with probability < 3e-3).
ALPHA = 1e-4


def whitening_failures(u, covariance):
  """The checks of "rows of u are iid N(0, covariance)" that fail at ALPHA.

  w = L^-1 u_j (L the Cholesky factor) must be iid N(0, 1) over canaries and
  rounds: its mean (exact normal), its total sum of squares (exact chi-square
  with m T degrees of freedom, two-sided), its rounds' sums of squares
  (each exactly chi-square(m); mapped to normal scores, their sum of squares
  is exactly chi-square(T)), and its lag-1 products (sum / sqrt(m (T - 1)),
  mean 0 and variance 1 exactly, normal by the CLT over m (T - 1) terms).
  """
  m, t = u.shape
  w = linalg.solve_triangular(np.linalg.cholesky(covariance), u.T, lower=True).T
  n = w.size
  p = {"mean": 2 * stats.norm.sf(abs(w.sum()) / np.sqrt(n))}
  total = np.sum(w * w)
  p["variance"] = 2 * min(stats.chi2.cdf(total, n), stats.chi2.sf(total, n))
  g = stats.norm.isf(stats.chi2.sf(np.sum(w * w, axis=0), m))
  p["round variances"] = stats.chi2.sf(np.sum(g * g), t)
  lag = np.sum(w[:, 1:] * w[:, :-1]) / np.sqrt(m * (t - 1))
  p["lag-1"] = 2 * stats.norm.sf(abs(lag))
  return {name: value for name, value in p.items() if value < ALPHA}


ROUNDS = 64


@pytest.mark.parametrize("build", [
    lambda c: aggregation.tree_aggregation(
        2.0, 10, 0.5, canaries=c, noise_seed=101, restart_period=16),
    lambda c: aggregation.tree_aggregation(
        2.0, 10, 0.5, canaries=c, noise_seed=102, use_efficient=False,
        restart_period=20, restart_warmup=5),
    # The clip follows the (unseeded) quantile estimate at each restart;
    # scores in units of sigma_t = z C_t do not depend on it.
    lambda c: aggregation.tree_adaptive(
        0.8, 10, initial_l2_norm_clip=0.1, restart_warmup=8,
        restart_period=16, canaries=c, noise_seed=103),
], ids=["efficient-restart16", "plain-restart20-warmup5", "adaptive-restart16"])
def test_scores_whitened_by_the_tree_covariance_are_standard_normal(build):
  # 64 inserted canaries (4 rounds each) and 128 held out, zero clients.
  config = _config(num_inserted=64, num_held_out=128, rounds=ROUNDS,
                   presentations=4, seed=23)
  aggregator = build(config)
  tree = aggregator.described_query
  process = aggregator.create(VALUE)
  state = process.initialize()
  scores, clips = [], []
  for _ in range(ROUNDS):
    output = process.next(state, [])
    state = output.state
    scores.append(np.asarray(output.measurements[SCORES]))
    clips.append(float(output.measurements["clip"]))
  u = np.stack(scores, axis=1)  # [m, T]
  if tree.adaptive is not None:  # the clip moves at every restart
    assert len(set(clips)) == len(tree.rounds_per_tree(ROUNDS))
  else:
    assert set(clips) == {0.5}
  # Inserted canaries: minus a_{j,t} / z, the shift a canary adds.
  a = np.zeros_like(u)
  events = config.participation.events
  a[events[:, 1], events[:, 0]] = 1.0
  inserted, held_out = config.inserted_ids, config.held_out_ids
  noise = tree.noise(ROUNDS)
  k = noise.covariance
  assert whitening_failures(u[held_out], k) == {}
  assert whitening_failures(
      u[inserted] - a[inserted] / tree.noise_multiplier, k) == {}
  # The same checks reject wrong covariances: rounds taken as independent,
  # the other tree, no restarts.
  other = tree_noise.tree_noise(ROUNDS, efficient=not tree.efficient,
                                restart_period=tree.restart_period,
                                restart_warmup=tree.restart_warmup)
  for wrong in (np.eye(ROUNDS), other.covariance,
                tree_noise.tree_noise(ROUNDS,
                                      efficient=tree.efficient).covariance):
    assert whitening_failures(u[held_out], wrong) != {}
  # And the inserted canaries without their shift are not the null law.
  assert "mean" in whitening_failures(u[inserted], k)


# --------------------------------------------------- client-insertion mode


def test_canary_clients_enter_tffs_own_tree_aggregation_at_its_clip():
  # Canary clients are clients of the user's aggregator: TFF's own
  # tree_aggregation clips them (norm 10 > C) like any client, with nothing
  # added here. Zero noise, one round, test_canary_clients' model (d = 63):
  # the model with canaries [4, 7] minus the model without them is
  # sum_j C c_j / clients_per_round (tolerance: test_canary_clients.ATOL).
  rng = np.random.default_rng(0)
  datasets = []
  for _ in range(3):
    y = rng.integers(0, client_mode.CLASSES, 20).astype(np.int32)
    x = rng.normal(size=(20, client_mode.FEATURES)).astype(np.float32)
    datasets.append(tf.data.Dataset.from_tensor_slices((x, y)).batch(10))
  specs = tff.types.type_to_tf_tensor_specs(
      tff.learning.models.weights_type_from_model(
          client_mode._model_fn).trainable)  # pylint: disable=protected-access

  def aggregator():
    return tff.aggregators.DifferentiallyPrivateFactory.tree_aggregation(
        0.0, client_mode.CLIENTS_PER_ROUND, client_mode.CLIP, specs,
        noise_seed=1)

  # pylint: disable=protected-access
  plain, _ = client_mode._one_round(client_mode._plain(aggregator()), datasets)
  weights, metrics = client_mode._one_round(
      client_mode._with_canaries(aggregator()),
      canary_clients.with_canary_clients(datasets, [4, 7]))
  np.testing.assert_allclose(
      client_mode._amounts(plain - weights, [4, 7]), [client_mode.CLIP] * 2,
      atol=client_mode.ATOL)
  # pylint: enable=protected-access
  assert metrics["client_work"][canary_clients.MEASUREMENT_KEY] == 2


# ------------------------------------------------------------ accounting


# 4 gaussian canaries on d = 264 are over the dim / 100 advice; this test
# reads DpEvents, not cosines.
@pytest.mark.filterwarnings("ignore::tff_canary.stats.canaries.canary_config."
                            "TooManyCanariesWarning")
def test_dp_event_is_refused_by_the_ledger_path(tmp_path):
  config = _config(num_inserted=2, num_held_out=2, rounds=2, presentations=1,
                   directions="gaussian")
  aggregator = aggregation.tree_aggregation(
      1.0, 4, 0.5, canaries=config, noise_seed=99, restart_period=2)
  process = aggregator.create(VALUE)
  output = process.next(process.initialize(), [])
  event = dp_accounting.DpEvent.from_named_tuple(output.state.dp_event)
  assert event == dp_accounting.UnsupportedDpEvent()
  with pytest.raises(ValueError, match="tree_accounting.tree_epsilons"):
    ledger_lib.Ledger([output.state.dp_event])
  with pytest.raises(ValueError, match="whole tree"):
    ledger_lib.Ledger([tree_accounting.tree_event(1.0, [2])])
  # A RunWriter refuses the run at its first round, not after the last.
  writer = run_writer.RunWriter(tmp_path / "run", config, delta=1e-5)
  with pytest.raises(ValueError, match="round 0.*tree_accounting"):
    writer.round(output.measurements, state=output.state)
  # The accounting the factory supports: its trees' sizes, for
  # tree_accounting (each client at most once per tree).
  assert aggregator.described_query.rounds_per_tree(2) == [2]
  assert aggregation.tree_aggregation(
      1.0, 4, 0.5, canaries=config, restart_period=20,
      restart_warmup=5).described_query.rounds_per_tree(64) == [5, 20, 20, 19]
  assert aggregator.described_query.rounds_per_tree(5) == [2, 2, 1]


def test_a_run_writer_refuses_tree_scores(tmp_path, adaptive_process):
  output = adaptive_process.next(adaptive_process.initialize(), [])
  writer = run_writer.RunWriter(tmp_path / "run", _seeded_adaptive(7).canaries,
                                delta=1e-5)
  with pytest.raises(ValueError, match="canary_tree_scores"):
    writer.round(output.measurements)  # metrics only, as a release manager


# -------------------------------------------------------- bad arguments


def _collision_config():
  # Canary seed 11, 16 canaries: canary 11's key is [11, 11].
  return _config(num_inserted=8, num_held_out=8, directions="gaussian")


def test_a_seed_whose_node_is_a_gaussian_canary_is_refused():
  # Why: tensorflow_privacy's generator, seeded 5, draws node 6 with key
  # [11, 11], exactly gaussian canary 11's direction.
  generator = tfp.tree_aggregation.GaussianNoiseGenerator(
      1.0, tf.TensorSpec([DIM]), seed=5)
  generator_state = generator.initialize()
  for _ in range(11 - 5):
    _, generator_state = generator.next(generator_state)
  node, _ = generator.next(generator_state)
  node = node.numpy().astype(np.float64)
  canary = canary_directions.canary_block(SEED, [11], DIM)[0]
  assert abs(node @ canary) / np.linalg.norm(node) > 1 - 1e-6
  with pytest.raises(ValueError, match="noise_seed=5.*canary 11"):
    aggregation.tree_aggregation(
        1.0, 4, 0.5, canaries=_collision_config(), noise_seed=5)
  # Seeds above the canary seed, and orthogonal canaries, are fine.
  aggregation.tree_aggregation(
      1.0, 4, 0.5, canaries=_collision_config(), noise_seed=12)
  aggregation.tree_aggregation(
      1.0, 4, 0.5, canaries=_config(num_inserted=8, num_held_out=8),
      noise_seed=5)


_tree = aggregation.tree_aggregation
_adaptive = aggregation.tree_adaptive


@pytest.mark.parametrize("build, error, match", [
    (lambda c: _tree(-0.1, 4, 1.0, canaries=c), ValueError,
     "noise_multiplier must be nonnegative, got -0.1"),
    (lambda c: _tree("1", 4, 1.0, canaries=c), TypeError, "noise_multiplier"),
    (lambda c: _tree(0.1, 0, 1.0, canaries=c), ValueError,
     "clients_per_round must be positive, got 0"),
    (lambda c: _tree(0.1, 4, 0.0, canaries=c), ValueError,
     "clip must be positive, got 0"),
    (lambda c: _tree(0.1, 4, 1.0, canaries=None), TypeError, "canaries"),
    (lambda c: _tree(0.1, 4, 1.0, canaries=c, use_efficient="yes"),
     TypeError, "use_efficient must be a bool, got 'yes'"),
    (lambda c: _tree(0.1, 4, 1.0, canaries=c, restart_period=0), ValueError,
     "restart_period must be at least 1, got 0"),
    (lambda c: _tree(0.1, 4, 1.0, canaries=c, restart_period=2.5), TypeError,
     "restart_period must be an integer"),
    (lambda c: _tree(0.1, 4, 1.0, canaries=c, restart_warmup=2), ValueError,
     "restart_warmup=2 needs a restart_period"),
    (lambda c: _tree(0.1, 4, 1.0, canaries=c, restart_period=4,
                     restart_warmup=4), ValueError,
     "restart_warmup must be below restart_period=4"),
    (lambda c: _tree(0.1, 4, 1.0, canaries=c, noise_seed=-1), ValueError,
     "noise_seed must be at least 0"),
    (lambda c: _tree(0.1, 4, 1.0, canaries=c, noise_seed=True), TypeError,
     "noise_seed must be an integer"),
    (lambda c: _adaptive(1.0, 4, canaries=c), ValueError,
     "clipped_count_stddev"),
    (lambda c: _adaptive(0.1, 4, initial_l2_norm_clip=0.0, canaries=c),
     ValueError, "initial_l2_norm_clip must be positive"),
    (lambda c: _adaptive(0.1, 4, restart_period=None, canaries=c), TypeError,
     "restart_period must be an integer"),
    (lambda c: _adaptive(0.1, 4, target_unclipped_quantile=1.5, canaries=c),
     ValueError, r"target_unclipped_quantile must be in \[0, 1\], got 1.5"),
    (lambda c: _adaptive(0.1, 4, clip_learning_rate=-1.0, canaries=c),
     ValueError, "clip_learning_rate must be nonnegative"),
    (lambda c: _adaptive(0.1, 4, clipped_count_stddev=-1.0, canaries=c),
     ValueError, "clipped_count_stddev must be nonnegative"),
    # tensorflow_privacy tree queries hide their settings: refused, with
    # what to pass instead.
    (lambda c: factory.CanaryDPFactory(
        tfp.TreeResidualSumQuery.build_l2_gaussian_query(1.0, 0.1, SPECS), c,
        clients_per_round=4), TypeError, "TreeAggregation"),
    (lambda c: factory.CanaryDPFactory(tfp.RestartQuery(
        tfp.TreeResidualSumQuery.build_l2_gaussian_query(1.0, 0.1, SPECS),
        tfp.restart_query.PeriodicRoundRestartIndicator(4)), c), TypeError,
     "TreeAggregation"),
    (lambda c: factory.CanaryDPFactory(aggregation.TreeAggregation(
        0.1, 1.0, efficient=False, restart_period=4,
        adaptive=adaptive_clip.AdaptiveClip(0.5, 0.2, 0.1, 4.0)), c),
     ValueError, "efficient must be True with adaptive clipping"),
    (lambda c: factory.CanaryDPFactory(aggregation.TreeAggregation(
        0.1, 1.0, adaptive="yes"), c), TypeError, "adaptive must be None"),
    (lambda c: _adaptive(0.1, 4, canaries=c, noise_seed=2 ** 63 - 2),
     ValueError, "noise_seed must be at most .* with adaptive clipping"),
])
def test_bad_arguments_fail_at_construction_naming_them(build, error, match):
  with pytest.raises(error, match=match):
    build(_config())


def _seeded_adaptive(noise_seed):
  """Seeded tree_adaptive, no canary inserted; restarts after rounds 3, 11."""
  return _adaptive(0.2, 3, initial_l2_norm_clip=1.0, restart_warmup=4,
                   restart_period=8, canaries=_config(0, 4, rounds=12),
                   noise_seed=noise_seed)


@pytest.fixture(scope="module", name="adaptive_process")
def fixture_adaptive_process():
  """Built once: its tests run it from its initial state (no shared state)."""
  return _seeded_adaptive(7).create(VALUE)


def _adaptive_run(process, rounds=12):
  """(results, clips) of `_seeded_adaptive` over both restarts."""
  state = process.initialize()
  rng = np.random.default_rng(3)
  results, clips = [], []
  for _ in range(rounds):
    out = process.next(state, _client_values(rng, 3))
    state = out.state
    results.append(np.concatenate([np.ravel(v) for v in out.result]))
    clips.append(_clip_value(state))
  return np.array(results), clips


def test_a_seeded_tree_adaptive_is_reproducible_across_restarts(
    adaptive_process):
  # Both trees seeded (seeded_query): the clip adopted at each restart
  # comes from the clipped count's noise, so equal clips after the restarts
  # show that tree seeded too (tensorflow_privacy's own is unseeded, and a
  # second run from the same initial state would differ).
  first, clips = _adaptive_run(adaptive_process)
  again, clips_again = _adaptive_run(adaptive_process)
  other, clips_other = _adaptive_run(_seeded_adaptive(8).create(VALUE))
  assert len(set(clips)) == 3  # the initial clip, then two restarts
  np.testing.assert_array_equal(first, again)
  assert clips == clips_again
  assert clips_other[-1] != clips[-1] and not np.array_equal(first, other)


def test_rounds_per_tree_needs_a_run_length():
  tree = aggregation.TreeAggregation(0.5, 1.0, restart_period=16)
  assert tree.rounds_per_tree(64) == [16, 16, 16, 16]
  assert tree.rounds_per_tree(10) == [10]
  with pytest.raises(ValueError, match="num_rounds must be at least 1"):
    tree.rounds_per_tree(0)


# ------------------------------------- a mechanism is its described query


@dataclasses.dataclass(frozen=True)
class _CorrelatedGaussian:
  """A described query that no code of the process names: a noiseless
  Gaussian sum query whose `QueryNoise` claims correlated noise of node
  multiplier z, so the process reports per-round scores in units of z C."""
  clip: float
  z: float

  @property
  def query_noise(self):
    return query_noise.QueryNoise(noise_multiplier=self.z)

  def sum_query(self, unused_record_specs):
    return tfp.GaussianSumQuery(l2_norm_clip=self.clip, stddev=0.0)

  def check_canaries(self, unused_canaries):
    pass


def test_a_new_mechanism_is_a_described_query_and_nothing_else():
  config = _config(num_inserted=4, num_held_out=2, rounds=3, presentations=2)
  aggregator = factory.CanaryDPFactory(_CorrelatedGaussian(0.5, 2.0), config,
                                       clients_per_round=4)
  assert aggregator.query_noise.denominator == 4.0
  assert aggregation.tree_of(aggregator) is None
  process = aggregator.create(VALUE)
  state = process.initialize()
  for r in range(3):
    output = process.next(state, [])
    state = output.state
    # No clients, no noise: S_r = C * (the round's canaries), so a canary of
    # the round scores <c_j, S_r> / (z C) = 1 / z and the others 0. The
    # float32 transform of a vector of norm <= sqrt(4) / 2 in these units
    # rounds at ~1e-7 relative; 1e-5 leaves a wide margin.
    expected = np.zeros(config.num_canaries)
    expected[_round_ids(config, r)] = 1.0 / 2.0
    np.testing.assert_allclose(np.asarray(output.measurements[SCORES]),
                               expected, atol=1e-5)
    assert int(output.measurements["canaries_inserted"]) == len(
        _round_ids(config, r))


# ------------------------------------ the factory's old names, one release


def test_the_factorys_tree_constructors_forward_to_the_trees_with_a_warning():
  config = _config(num_inserted=2, num_held_out=2, rounds=2, presentations=1)
  new = aggregation.tree_aggregation(0.8, 3, 1.0, canaries=config,
                                     noise_seed=7, restart_period=4)
  with pytest.warns(DeprecationWarning, match=r"CanaryDPFactory\.tree_"
                    r"aggregation moved to tff_canary\.mechanisms\.tree\."
                    r"aggregation\.tree_aggregation"):
    old = factory.CanaryDPFactory.tree_aggregation(
        0.8, 3, 1.0, canaries=config, noise_seed=7, restart_period=4)
  assert type(old) is factory.CanaryDPFactory
  assert old.described_query == new.described_query
  assert old.construction == new.construction
  assert old.construction.constructor == "tree_aggregation"
  assert old.construction.function is aggregation.tree_aggregation
  with pytest.warns(DeprecationWarning, match=r"tree\.aggregation\.tree_"
                    "adaptive"):
    adaptive = factory.CanaryDPFactory.tree_adaptive(
        0.7, 10, restart_warmup=2, restart_period=4, canaries=config,
        noise_seed=7)
  assert adaptive.described_query == aggregation.tree_adaptive(
      0.7, 10, restart_warmup=2, restart_period=4, canaries=config,
      noise_seed=7).described_query
  # Rebuilt without canaries by the tree's own function, with no warning.
  with warnings.catch_warnings():
    warnings.simplefilter("error", DeprecationWarning)
    without = old.without_canaries(4)
  assert without.construction.function is aggregation.tree_aggregation
  assert without.described_query.noise_seed == 7 + factory.NOISE_CHECK_SEED_TAG
  # .tree: the factory's TreeAggregation, or None, as tree_of says.
  with pytest.warns(DeprecationWarning, match=r"tree_of"):
    assert old.tree is old.described_query
  gaussian = factory.CanaryDPFactory.gaussian_fixed(0.8, 3, 1.0,
                                                    canaries=config)
  with pytest.warns(DeprecationWarning, match=r"tree_of"):
    assert gaussian.tree is None
  assert aggregation.tree_of(gaussian) is None
  assert aggregation.tree_of(old) is old.described_query
