"""Tests of tff_canary.mechanisms.matrix.query and matrix_aggregation:
matrix-factorization DP-FTRL (banded, BLT) as a tensorflow_privacy query, in
TFF's own DifferentiallyPrivateFactory and in CanaryDPFactory.

The reference is NumPy: the fresh noise xi_t is drawn by a
`SeededGaussianSumQuery` of the same seed (what the query documents), and
the released noise must be `tff_canary.stats.matrix.streaming`'s stream of
that xi, i.e. `strategy_noise`'s C^-1 xi (block-diagonal with restarts).
"""

from __future__ import annotations

import dp_accounting
import numpy as np
import pytest
import tensorflow as tf

from tff_canary.federated.insertion import factory
from tff_canary.federated.insertion import measurement_keys
from tff_canary.federated.insertion import seeded_query
from tff_canary.mechanisms.matrix import aggregation as matrix_aggregation
from tff_canary.mechanisms.matrix import query as matrix_query
from tff_canary.stats.canaries import canary_config
from tff_canary.stats.canaries import schedules
from tff_canary.stats.matrix import blt as blt_lib
from tff_canary.stats.matrix import streaming
from tff_canary.stats.matrix import toeplitz
import tensorflow_federated as tff  # pylint: disable=g-bad-import-order
import tensorflow_privacy as tfp  # pylint: disable=g-bad-import-order
from mechanisms.tree import test_aggregation as tree_tests  # pylint: disable=g-bad-import-order

VALUE = tff.types.to_type([tff.TensorType(np.float32, [4, 3]),
                           tff.TensorType(np.float32, [5])])
SPECS = tff.types.type_to_tf_tensor_specs(VALUE)
DIM = 17
STRATEGY = blt_lib.blt([0.3, 0.15], [0.9, 0.4])
ZEROS = [tf.zeros([4, 3]), tf.zeros([5])]


def _flat(value):
  return np.concatenate([np.ravel(np.asarray(v, np.float64)) for v in value])


def _fresh_rows(clip, noise_multiplier, noise_seed, rounds):
  """xi_0 .. xi_{rounds-1}: a SeededGaussianSumQuery's draws on a zero sum."""
  query = seeded_query.SeededGaussianSumQuery(clip, noise_multiplier * clip,
                                              noise_seed)
  state, rows = query.initial_global_state(), []
  for _ in range(rounds):
    noised, state, _ = query.get_noised_result(ZEROS, state)
    rows.append(_flat(noised))
  return np.stack(rows)


def _released_rows(query, rounds, sample=ZEROS):
  state, rows = query.initial_global_state(), []
  for _ in range(rounds):
    result, state, event = query.get_noised_result(sample, state)
    assert isinstance(event, dp_accounting.UnsupportedDpEvent)
    rows.append(_flat(result))
  return np.stack(rows), state


BANDS = toeplitz.square_root_coefficients(4)
KINDS = {
    "banded": (dict(coefficients=BANDS),
               lambda: streaming.BandedNoise(BANDS, [DIM])),
    "blt": (dict(strategy=STRATEGY),
            lambda: streaming.BltNoise(STRATEGY, [DIM])),
}


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("restart_every", [None, 5])
def test_released_noise_is_c_inverse_of_the_seeded_fresh_noise(
    kind, restart_every):
  rounds = 12
  strategy, numpy_stream = KINDS[kind]
  query = matrix_query.MatrixFactorizationQuery(
      SPECS, 0.5, 2.0, noise_seed=7, restart_every=restart_every, **strategy)
  released, _ = _released_rows(query, rounds)
  xi = _fresh_rows(0.5, 2.0, 7, rounds)
  noise = matrix_aggregation.MatrixAggregation(
      2.0, 0.5, restart_every=restart_every, **strategy).noise(rounds)
  # float32 recurrences against float64 products: |w| ~ 1, errors ~ 1e-6.
  np.testing.assert_allclose(released, noise.released @ xi, atol=2e-5)
  assert np.max(np.abs(released[1:] - xi[1:])) > 0.1  # not xi itself
  if restart_every is None:  # and the NumPy stream of the same xi
    np.testing.assert_allclose(
        released, streaming.stream(numpy_stream(), xi), atol=2e-5)


def test_named_constructors_are_the_papers_strategies():
  banded = matrix_query.MatrixFactorizationQuery.banded_square_root(
      SPECS, 0.5, 1.0, 4)
  np.testing.assert_array_equal(banded.coefficients(6),
                                [1, 0.5, 0.375, 0.3125, 0, 0])
  assert banded.num_buffers == 3 and banded.noise_seed is None
  blt = matrix_query.MatrixFactorizationQuery.blt(SPECS, 0.5, 1.0, STRATEGY)
  np.testing.assert_allclose(blt.coefficients(3),
                             [1, 0.45, 0.3 * 0.9 + 0.15 * 0.4])
  assert blt.num_buffers == 2
  # One band keeps nothing: w_t = xi_t / c_0, independent rounds.
  one_band = matrix_query.MatrixFactorizationQuery.banded(
      SPECS, 0.5, 2.0, [2.0], noise_seed=7)
  released, _ = _released_rows(one_band, 3)
  np.testing.assert_allclose(released, _fresh_rows(0.5, 2.0, 7, 3) / 2.0,
                             atol=1e-6)


def _white_failures(rows, sigma):
  """Why rows [n, d] are not iid N(0, sigma^2): each row's mean square
  (chi-square(d) / d, two-sided at 1e-4: |z| < 3.9) and the rounds'
  correlations (|r| sqrt(d) < 4.5, normal by the CLT; 28 pairs)."""
  n, d = rows.shape
  failures = []
  chi = (np.sum(rows * rows, axis=1) / sigma ** 2 - d) / np.sqrt(2 * d)
  if np.max(np.abs(chi)) > 3.9:
    failures.append(f"variance {chi.round(1).tolist()}")
  corr = np.corrcoef(rows)[np.triu_indices(n, 1)]
  if np.max(np.abs(corr)) * np.sqrt(d) > 4.5:
    failures.append("correlation")
  return failures


@pytest.mark.parametrize("kind", KINDS)
def test_unseeded_noise_whitened_by_c_is_iid_gaussian(kind):
  # No noise_seed: tensorflow_privacy's unseeded Gaussian draws. The law of
  # the released rows W must be N(0, K), K = C^-1 C^-T sigma^2, i.e. C W iid
  # N(0, sigma^2); W itself is not (its rounds are correlated).
  strategy, _ = KINDS[kind]
  specs, rounds, sigma = [tf.TensorSpec([6000], tf.float32)], 8, 1.5 * 0.4
  def build():
    return matrix_query.MatrixFactorizationQuery(specs, 0.4, 1.5, **strategy)
  tf.random.set_seed(12)  # the unseeded ops' global seed: a fixed test
  rows, _ = _released_rows(build(), rounds, [tf.zeros([6000])])
  c = matrix_aggregation.MatrixAggregation(1.5, 0.4, **strategy)
  whitened = toeplitz.strategy_matrix(c.coefficients_of(rounds), rounds) @ rows
  assert _white_failures(whitened, sigma) == []
  assert _white_failures(rows, sigma) != []
  again, _ = _released_rows(build(), 1, [tf.zeros([6000])])
  assert not np.array_equal(again[0], rows[0])  # no fixed seed


def test_tfp_restart_query_resets_the_buffers():
  # RestartQuery(period 5) restarts after calls 4, 9: as restart_every=5.
  inner = matrix_query.MatrixFactorizationQuery.blt(SPECS, 0.5, 2.0, STRATEGY,
                                                    noise_seed=3)
  restarted = tfp.RestartQuery(
      inner, tfp.restart_query.PeriodicRoundRestartIndicator(period=5))
  by_restart_query, _ = _released_rows(restarted, 11)
  by_argument, _ = _released_rows(matrix_query.MatrixFactorizationQuery.blt(
      SPECS, 0.5, 2.0, STRATEGY, noise_seed=3, restart_every=5), 11)
  np.testing.assert_array_equal(by_restart_query, by_argument)


@pytest.mark.parametrize("kwargs, error, match", [
    (dict(l2_norm_clip=0.0), ValueError, "l2_norm_clip"),
    (dict(noise_multiplier=-1.0), ValueError, "noise_multiplier"),
    (dict(coefficients=[0.0, 1.0]), ValueError, r"coefficients\[0\]"),
    (dict(strategy=STRATEGY), ValueError, "exactly one"),
    (dict(coefficients=None, strategy=[0.3]), TypeError, "strategy"),
    (dict(noise_seed=-1), ValueError, "noise_seed"),
    (dict(restart_every=0), ValueError, "restart_every"),
    (dict(record_specs=[np.zeros(3)]), TypeError, "record_specs"),
])
def test_bad_arguments_are_named(kwargs, error, match):
  arguments = dict(record_specs=SPECS, l2_norm_clip=0.5, noise_multiplier=1.0,
                   coefficients=[1.0, 0.5])
  arguments.update(kwargs)
  with pytest.raises(error, match=match):
    matrix_query.MatrixFactorizationQuery(**arguments)


# ------------------------------------------------------------------- TFF


@pytest.mark.tff
@pytest.mark.parametrize("aggregation", [
    matrix_aggregation.MatrixAggregation.banded_square_root(
        1.5, 0.5, 3, noise_seed=21, restart_every=4),
    matrix_aggregation.MatrixAggregation.blt(1.5, 0.5, STRATEGY, noise_seed=21,
                                         restart_every=4),
], ids=["banded", "blt"])
def test_tffs_own_factory_releases_the_numpy_stream(aggregation):
  # Zero client updates: the released mean times clients_per_round is the
  # noise; it must be C^-1 xi per block of 4 rounds for the seed's xi, and
  # the state between rounds must carry the buffers (else rows 1-3 of each
  # block would be xi itself).
  rounds, clients = 6, 2
  process = aggregation.tff_factory(SPECS, clients).create(VALUE)
  state, rows = process.initialize(), []
  zero = [np.zeros([4, 3], np.float32), np.zeros([5], np.float32)]
  for _ in range(rounds):
    output = process.next(state, [zero] * clients)
    state = output.state
    rows.append(_flat(output.result) * clients)
  xi = _fresh_rows(aggregation.clip, aggregation.noise_multiplier, 21, rounds)
  expected = aggregation.noise(rounds).released @ xi
  np.testing.assert_allclose(np.stack(rows), expected, atol=2e-5)
  assert np.max(np.abs(expected - xi)) > 0.1  # the test can tell them apart


@pytest.mark.tff
def test_without_noise_the_sum_is_tffs_clipped_sum_exactly():
  aggregation = matrix_aggregation.MatrixAggregation.blt(0.0, 0.7, STRATEGY,
                                                     noise_seed=5)
  ours = aggregation.tff_factory(SPECS, 3).create(VALUE)
  theirs = tff.aggregators.DifferentiallyPrivateFactory.gaussian_fixed(
      0.0, 3, 0.7).create(VALUE)
  state_o, state_t = ours.initialize(), theirs.initialize()
  rng = np.random.default_rng(4)
  for _ in range(3):
    clients = [[rng.normal(size=(4, 3)).astype(np.float32),
                rng.normal(size=5).astype(np.float32)] for _ in range(3)]
    out_o, out_t = ours.next(state_o, clients), theirs.next(state_t, clients)
    state_o, state_t = out_o.state, out_t.state
    for a, b in zip(out_o.result, out_t.result):
      np.testing.assert_array_equal(a, b)
    assert np.max(np.abs(_flat(out_o.result))) > 0.01


@pytest.mark.tff
def test_canary_factory_scores_are_whitened_by_the_strategys_covariance():
  # BLT with canaries, zero clients, 8 rounds restarted every 4: held-out
  # scores ~ N(0, K), inserted ones N(a / z, K), K = noise(8).covariance.
  rounds, z = 8, 2.0
  config = canary_config.CanaryConfig(
      seed=31, num_inserted=32, num_held_out=64,
      schedule=schedules.FixedPresentations(rounds, 2), assignment="fixed",
      directions="orthogonal")
  aggregation = matrix_aggregation.MatrixAggregation.blt(
      z, 0.5, STRATEGY, noise_seed=41, restart_every=4)
  # One tensor of 128 coordinates: room for 96 orthogonal canaries.
  process = factory.CanaryDPFactory(aggregation, config,
                                    clients_per_round=10).create(
                                        tff.TensorType(np.float32, [128]))
  state, scores = process.initialize(), []
  for _ in range(rounds):
    output = process.next(state, [])
    state = output.state
    scores.append(np.asarray(output.measurements[
        measurement_keys.TREE_SCORES_KEY]))
  u = np.stack(scores, axis=1)
  a = np.zeros_like(u)
  events = config.participation.events
  a[events[:, 1], events[:, 0]] = 1.0
  k = aggregation.noise(rounds).covariance
  inserted, held_out = config.inserted_ids, config.held_out_ids
  # ALPHA = 1e-4 per check (tree/test_aggregation): fixed seeds, 768 scores.
  assert tree_tests.whitening_failures(u[held_out], k) == {}
  assert tree_tests.whitening_failures(u[inserted] - a[inserted] / z, k) == {}
  # The checks reject rounds taken as independent, and unshifted canaries.
  assert tree_tests.whitening_failures(u[held_out], np.eye(rounds)) != {}
  assert "mean" in tree_tests.whitening_failures(u[inserted], k)
