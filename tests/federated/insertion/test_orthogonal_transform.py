"""Orthogonal canaries: the transform, its null law, and scores in the round.

`tff_canary.federated.insertion.orthogonal_transform` (the seeded structured
orthogonal matrix R), `round_scores` (every canary's statistics inside the
aggregation process) and `tff_canary.federated.scores.orthogonal_table` (the
cosine table from the trained state). docs/method/orthogonal-canaries.md.
"""

from __future__ import annotations

import collections

import numpy as np
import pytest
from scipy import linalg
from scipy import stats
import tensorflow as tf

from tff_canary.federated.insertion import factory
from tff_canary.federated.insertion import orthogonal_transform as ot
from tff_canary.federated.scores import cosine_pass
from tff_canary.stats.canaries import canary_config
from tff_canary.stats.canaries import orthogonal_canaries
from tff_canary.stats.canaries import philox
from tff_canary.stats.canaries import schedules
from tff_canary.stats.estimators.null_law import CosineNull
import tensorflow_federated as tff  # pylint: disable=g-bad-import-order

import small_model

pytestmark = pytest.mark.tff


# ------------------------------------------------------------ the transform


@pytest.mark.parametrize("dim", [2, 3, 7, 64, 100, 1000, 1025, 3000])
def test_canaries_are_orthonormal_for_any_dim(dim):
  # All dim rows of R: R R^T = I to float32 rounding (a few ulps per layer).
  rows = ot.canary_block(5, np.arange(dim), dim).astype(np.float64)
  np.testing.assert_allclose(rows @ rows.T, np.eye(dim), atol=2e-6)


@pytest.mark.parametrize("dim", [1000, 4096, 1206590])
def test_inverse_undoes_forward(dim):
  v = tf.random.stateless_normal([dim], seed=[1, 2])
  back = ot.inverse(9, ot.forward(9, v, dim), dim)
  # float32: each of 3 layers x 2 windows rounds every entry once.
  np.testing.assert_allclose(back.numpy(), v.numpy(), atol=3e-5)


def test_scores_and_sums_are_the_canaries_products():
  dim, m = 1500, 40
  rows = ot.rows(3, dim, m)
  canaries = ot.canary_block(3, np.arange(m), dim).astype(np.float64)
  v = np.random.default_rng(0).normal(size=dim)
  scores = ot.scores(3, tf.constant(v, tf.float32), dim, rows).numpy()
  np.testing.assert_allclose(scores, canaries @ v, atol=1e-4)
  ids = np.array([4, 7, 7, 30])
  weights = np.array([1.0, 0.5, 2.0, -1.0])
  total = ot.canary_sum(3, ids, dim, rows, weights).numpy()
  np.testing.assert_allclose(total, weights @ canaries[ids], atol=1e-5)


def test_rows_are_a_prefix_of_one_permutation():
  np.testing.assert_array_equal(ot.rows(8, 5000, 300)[:100],
                                ot.rows(8, 5000, 100))
  assert len(set(ot.rows(8, 5000, 5000).tolist())) == 5000
  with pytest.raises(ValueError, match="num_canaries must be at most dim"):
    ot.rows(8, 100, 101)


@pytest.mark.parametrize("seed", [(0, -1), (5, -6), (2 ** 63 - 1, -2 ** 63),
                                  (-17, 3)])
def test_numpy_philox_is_tensorflows_stream(seed):
  # 1001 words: 250 full blocks and a partial one.
  theirs = tf.random.stateless_uniform(
      [1001], seed=tf.constant(seed, tf.int64), minval=None, maxval=None,
      dtype=tf.uint32, alg="philox").numpy()
  np.testing.assert_array_equal(philox.stateless_uint32(seed, 1001), theirs)


@pytest.mark.parametrize("dim", [2, 3, 7, 100, 4097, 65539])
def test_the_numpy_half_gives_the_same_canaries(dim):
  # Frameworks without TensorFlow (Flower) build R in NumPy from the same
  # seed: the same sign bits (exact), permutations and rows (exact), and
  # the transform to float32 rounding (the same operations in another
  # order: at most a few ulps of entries of size ~ 1/sqrt(d)).
  seed = 1234
  ones = tf.ones([1, dim], tf.float32)
  for layer in range(ot.LAYERS):
    for window in range(2):
      tag = orthogonal_canaries.sign_tag(layer, window)
      np.testing.assert_array_equal(
          ot._flip(ones, tf.constant(seed, tf.int64), tag).numpy(),  # pylint: disable=protected-access
          orthogonal_canaries._flip(np.ones((1, dim), np.float32), seed, tag))  # pylint: disable=protected-access
  v = np.random.default_rng(dim).normal(size=(3, dim)).astype(np.float32)
  key = tf.constant(seed, tf.int64)
  tol = dict(rtol=0, atol=1e-6 * float(np.abs(v).max()))
  np.testing.assert_allclose(orthogonal_canaries.forward(seed, v, dim),
                             ot.forward(key, v, dim).numpy(), **tol)
  np.testing.assert_allclose(orthogonal_canaries.inverse(seed, v, dim),
                             ot.inverse(key, v, dim).numpy(), **tol)
  ids = np.arange(min(dim, 5))
  np.testing.assert_allclose(orthogonal_canaries.canary_block(seed, ids, dim),
                             ot.canary_block(seed, ids, dim), atol=1e-6)


def test_windows_cover_every_coordinate():
  for dim in [2, 3, 1000, 1024, 1025, 2047, 1206590, 4050748]:
    covered = np.zeros(dim, bool)
    for start, size in ot.windows(dim):
      assert size & (size - 1) == 0 and 0 <= start and start + size <= dim
      covered[start:start + size] = True
    assert covered.all()


def test_fwht_is_sylvester_hadamard():
  for n in [2, 8, 64, 2048]:
    for i in sorted({0, 1, 3, n - 1} & set(range(n))):
      np.testing.assert_array_equal(_hadamard_row(i, n), linalg.hadamard(n)[i])
    x = np.random.default_rng(n).normal(size=(3, n)).astype(np.float32)
    want = x.astype(np.float64) @ linalg.hadamard(n).T / np.sqrt(n)
    np.testing.assert_allclose(ot.fwht(tf.constant(x), n).numpy(), want,
                               atol=1e-5)


# --------------------------------------------------------------- null law


def _hadamard_row(i, n):
  """Row i of the n x n Sylvester Hadamard matrix, linalg.hadamard(n)[i]:
  (-1)^popcount(i & j) (without building the matrix: 2 GB at n = 2^14)."""
  bits = i & np.arange(n)
  parity = np.zeros(n, np.int64)
  while bits.any():
    parity ^= bits & 1
    bits >>= 1
  return 1.0 - 2.0 * parity


def _adversarial(dim):
  """Fixed vectors a structured transform could fail on."""
  rng = np.random.default_rng(2)
  vectors = {"e_0": np.eye(1, dim, 0)[0], "e_last": np.eye(1, dim, dim - 1)[0],
             "constant": np.ones(dim)}
  sparse = np.zeros(dim)
  sparse[rng.choice(dim, 10, replace=False)] = 1.0
  vectors["10-sparse"] = sparse
  block = np.zeros(dim)
  block[:dim // 8] = 1.0
  vectors["block"] = block
  n = 1 << (dim.bit_length() - 1)
  walsh = np.zeros(dim)
  walsh[:n] = _hadamard_row(3, n)  # a Hadamard row
  vectors["hadamard row"] = walsh
  vectors["heavy-tailed"] = (rng.standard_t(1.5, dim)
                             * np.exp(-3.0 * np.arange(dim) / dim))
  return vectors


def _model_delta():
  """theta_0 - theta_T of a small Keras MLP after 20 SGD steps (d = 3274)."""
  tf.keras.utils.set_random_seed(4)
  model = tf.keras.Sequential([
      tf.keras.layers.InputLayer(input_shape=(40,)),
      tf.keras.layers.Dense(64, activation="relu"),
      tf.keras.layers.Dense(10)])
  before = np.concatenate([w.numpy().ravel() for w in model.weights])
  rng = np.random.default_rng(5)
  x = rng.normal(size=(640, 40)).astype(np.float32)
  y = rng.integers(0, 10, 640)
  model.compile(optimizer=tf.keras.optimizers.SGD(0.1),
                loss=tf.keras.losses.SparseCategoricalCrossentropy(
                    from_logits=True))
  model.fit(x, y, batch_size=32, epochs=1, verbose=0)
  after = np.concatenate([w.numpy().ravel() for w in model.weights])
  return before - after


def _ks_p(v, dim, seed):
  """KS p-value of the canaries' cosines with v against the exact null law.

  All dim canaries (every row of R): their cosines with v are R v / |v|, the
  coordinates of a rotated v; for a Haar-random R they are the coordinates
  of a uniform point on the sphere, whose empirical law is the null law.
  """
  r = ot.forward(seed, tf.constant(v, tf.float32), dim).numpy()
  cosines = r.astype(np.float64) / np.linalg.norm(v)
  return stats.kstest(cosines, CosineNull(dim).cdf).pvalue


# d = 3000 = 2^11 + 952: two overlapping windows; 20480 = 2^14 + 2^12: two
# disjoint ones (only the permutations mix them).
@pytest.mark.parametrize("dim", [3000, 20480])
def test_scores_follow_the_exact_null_law_for_adversarial_vectors(dim):
  # 7 vectors x 2 seeds = 14 KS tests per dim: each p is uniform if the law
  # holds, so p < 1e-4 anywhere has chance 0.14% (a false alarm is rare), and
  # the one-layer failures below are far beyond it (p < 1e-30).
  for name, v in _adversarial(dim).items():
    for seed in (11, 12):
      p = _ks_p(v, dim, seed)
      assert p > 1e-4, (name, seed, p)


def test_scores_with_a_real_model_delta_follow_the_null_law():
  delta = _model_delta()
  assert delta.size == 3274 and np.linalg.norm(delta) > 0  # 2^11 + 1226
  for seed in (11, 12, 13):  # 3 tests at 1e-4: false alarm 0.03%
    assert _ks_p(delta, delta.size, seed) > 1e-4


def test_one_hadamard_layer_fails_the_null_law(monkeypatch):
  # One randomized Hadamard layer maps e_0 to +-1/sqrt(n) on a window: far
  # from the null law; the test above would catch it.
  monkeypatch.setattr(ot, "LAYERS", 1)
  dim = 21384
  vectors = _adversarial(dim)
  for name in ("e_0", "e_last", "10-sparse"):
    assert _ks_p(vectors[name], dim, 11) < 1e-30, name


# ----------------------------------------------------- scores in the round

SPECS = collections.OrderedDict(a=tf.TensorSpec([30, 7], tf.float32),
                                b=tf.TensorSpec([13], tf.float32))
DIM = 30 * 7 + 13


def _process(canaries, noise_multiplier, noise_seed=None):
  f = factory.CanaryDPFactory.gaussian_fixed(
      noise_multiplier=noise_multiplier, clients_per_round=2, clip=1.0,
      canaries=canaries, noise_seed=noise_seed)
  return f.create(tff.types.tensorflow_to_type(SPECS))


def _config(**kwargs):
  kwargs = dict(seed=3, num_inserted=6, num_held_out=4,
                schedule=schedules.FixedPresentations(5, 2),
                assignment="fixed", directions="orthogonal") | kwargs
  return canary_config.CanaryConfig(**kwargs)


def _flat(value):
  return np.concatenate([np.asarray(value["a"]).ravel(),
                         np.asarray(value["b"])]).astype(np.float64)


def _client(rng):
  return collections.OrderedDict(
      a=rng.normal(size=(30, 7)).astype(np.float32) * 0.05,
      b=rng.normal(size=13).astype(np.float32) * 0.05)


def test_without_noise_each_round_carries_exactly_its_canaries():
  canaries = _config()
  process = _process(canaries, 0.0)
  state = process.initialize()
  zero = collections.OrderedDict(a=np.zeros((30, 7), np.float32),
                                 b=np.zeros(13, np.float32))
  rows = ot.canary_block(3, np.arange(10), DIM).astype(np.float64)
  for r in range(5):
    output = process.next(state, [zero, zero])
    state = output.state
    # a_r = clip * sum of the round's canaries / clients_per_round.
    want = rows[canaries.participation.canaries_in(r)].sum(axis=0) / 2.0
    np.testing.assert_allclose(_flat(output.result), want, atol=1e-6)
  scores = state.scores
  inserted = canaries.inserted
  # Alone in its residual, an inserted canary has cosine 1 in its rounds;
  # a held-out one 0 (float32 rounding of the transform: ~1e-6 relative).
  np.testing.assert_allclose(scores.max_cosine[inserted], 1.0, atol=1e-5)
  assert np.abs(scores.max_cosine[~inserted]).max() < 1e-3
  np.testing.assert_array_equal(scores.scheduled_rounds,
                                canaries.scheduled_counts())
  np.testing.assert_allclose(scores.scheduled_sum[inserted], 2.0, atol=1e-5)
  assert int(scores.rounds_scored) == 5


def test_scores_in_the_round_equal_scores_after_it():
  # With noise and clients: the process's running max and scheduled sums
  # equal the same statistics computed in NumPy from each round's released
  # aggregate and the explicit canaries.
  canaries = _config(num_inserted=8, num_held_out=8, assignment="coin")
  process = _process(canaries, 0.7, noise_seed=5)
  state = process.initialize()
  rng = np.random.default_rng(0)
  rows = ot.canary_block(3, np.arange(16), DIM).astype(np.float64)
  x = []
  for r in range(5):
    output = process.next(state, [_client(rng), _client(rng)])
    state = output.state
    a = _flat(output.result)
    s = rows @ a
    removed = np.zeros(16, bool)
    removed[canaries.participation.canaries_in(r)] = True
    residual = a @ a - np.sum(s[removed] ** 2) + removed * s ** 2
    x.append(s / np.sqrt(residual))
  x = np.array(x)
  scores = state.scores
  # float32 transform against float64 NumPy: 1e-5 absolute on cosines.
  np.testing.assert_allclose(scores.max_cosine, x.max(axis=0), atol=1e-5)
  np.testing.assert_array_equal(scores.max_round, x.argmax(axis=0))
  events = canaries.scheduled_events()
  want = np.zeros(16)
  np.add.at(want, events[:, 1], x[events[:, 0], events[:, 1]])
  np.testing.assert_allclose(scores.scheduled_sum, want, atol=1e-5)


def test_the_table_comes_from_the_state_without_recorded_aggregates():
  canaries = _config()
  assert not canaries.record_aggregates  # nothing to record
  process = _process(canaries, 0.5, noise_seed=2)
  state = process.initialize()
  rng = np.random.default_rng(1)
  theta0 = rng.normal(size=DIM)
  theta = theta0.copy()
  for _ in range(5):
    output = process.next(state, [_client(rng), _client(rng)])
    state = output.state
    theta -= _flat(output.result)
  table = cosine_pass.compute_cosine_table(canaries, theta0, theta,
                                           state=state)
  assert table.known_canaries_removed == "final_and_all_iterates"
  assert table.generator == ot.GENERATOR and table.rounds_recorded == 5
  assert table.has_max_cosines and table.has_scheduled_sums
  rows = ot.canary_block(3, np.arange(10), DIM).astype(np.float64)
  delta = theta0 - theta
  s = rows @ delta
  inserted = canaries.inserted
  residual = delta @ delta - np.sum(s[inserted] ** 2) + inserted * s ** 2
  np.testing.assert_allclose(table.final_cosine, s / np.sqrt(residual),
                             atol=1e-5)
  np.testing.assert_array_equal(table.max_cosine, np.clip(
      state.scores.max_cosine, -1.0, 1.0))
  with pytest.raises(ValueError, match="pass state"):
    cosine_pass.compute_cosine_table(canaries, theta0, theta)
  other = _config(seed=4)
  with pytest.raises(ValueError, match="seed"):
    cosine_pass.compute_cosine_table(other, theta0, theta, state=state)


def test_gaussian_canaries_keep_an_empty_score_state():
  canaries = _config(directions="gaussian")
  state = _process(canaries, 0.0).initialize()
  assert np.asarray(state.scores.max_cosine).shape == (0,)


def test_directions_are_validated():
  with pytest.raises(ValueError, match="directions"):
    _config(directions="hadamard")


def test_recording_defaults_to_the_directions_and_is_refused_when_orthogonal():
  # Gaussian canaries record each round's aggregate by default (the pass
  # after training needs it); orthogonal ones are scored in the round and
  # record nothing: asking for it is an error, not silently ignored.
  assert _config(directions="gaussian").record_aggregates is True
  assert not _config(directions="gaussian",
                     record_aggregates=False).record_aggregates
  assert _config().record_aggregates is False
  assert _config(record_aggregates=False).record_aggregates is False
  assert _config() == _config(record_aggregates=False)
  with pytest.raises(ValueError, match=r"record_aggregates=True with "
                     r"directions='orthogonal': orthogonal canaries are "
                     r"scored inside each round"):
    _config(record_aggregates=True)


# ------------------------------------------------------ the experiments


@pytest.mark.slow
def test_canary_clients_through_ddp_score_orthogonal_canaries(tmp_path):
  # Canary clients through TFF's DDP chain, with the default server
  # optimizer (momentum: no aggregate is read from the weights): the table
  # comes from the scoring wrapper's state. (Canary clients through TFF's
  # Gaussian factory: tests/federated/insertion/test_canary_clients.py, without an experiment.)
  # In this process, not through experiments/emnist.py (a subprocess
  # imports TensorFlow again; the script's flags are tested in
  # tests/experiments/test_experiment_cli.py): its defaults' client_learning_rate and
  # checkpoint_every are given.
  import os  # pylint: disable=g-import-not-at-top
  import warnings  # pylint: disable=g-import-not-at-top
  from tff_canary.harness.config import experiment_config  # pylint: disable=g-import-not-at-top
  from tff_canary.harness.runner import experiment  # pylint: disable=g-import-not-at-top
  from tff_canary.stats.canaries.cosine_table import CosineTable  # pylint: disable=g-import-not-at-top
  out = str(tmp_path / "run")
  config = experiment_config.ExperimentConfig(
      output_dir=out, num_rounds=3, clients_per_round=4,
      examples_per_client=16, num_inserted=6, num_held_out=6,
      noise_multiplier=0.5, eval_every=0, client_learning_rate=0.1,
      checkpoint_every=20, allow_large_canary_fraction=True,
      directions="orthogonal", insertion="clients", seeded_noise=False,
      aggregator="ddp", clip=0.5, zeroing=False)
  # tests/small_model.py's CNN: the table's source does not depend on it.
  with warnings.catch_warnings(), small_model.emnist_cnn():
    # half the participants are canaries
    warnings.simplefilter("ignore", experiment.CanaryFractionWarning)
    experiment.run_experiment(config, progress=False, log=lambda *a: None)
  table = CosineTable.load(os.path.join(out, "cosines.npz"))
  assert table.generator == ot.GENERATOR and table.rounds_recorded == 3
  assert table.has_max_cosines and table.has_scheduled_sums
  assert not os.path.exists(os.path.join(out, "aggregates.npy"))


def test_the_generator_marks_tables_as_orthogonal():
  from tff_canary.stats.canaries import cosine_table  # pylint: disable=g-import-not-at-top
  assert ot.GENERATOR.startswith(cosine_table.ORTHOGONAL_GENERATOR_PREFIX)
