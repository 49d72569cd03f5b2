"""tree_noise: the released-noise coefficients are tensorflow_privacy's own.

The exactness test runs tensorflow_privacy's `TreeResidualSumQuery` (inside
`RestartQuery` for restarts) on zero records with a noise generator whose
k-th call returns the k-th basis vector, so round t's released noise IS row
t of the coefficient matrix B; `tree_noise` must give the same matrix.
"""

import numpy as np
import pytest
import tensorflow as tf
import tensorflow_privacy as tfp

from tff_canary.stats.correlated import tree_noise

_DIM = 256  # more basis vectors than any test's generator calls


class _BasisGenerator(tfp.tree_aggregation.ValueGenerator):
  """Call k returns e_k: the released noise shows its coefficients."""

  def initialize(self):
    return tf.constant(0, tf.int32)

  def next(self, state):
    return tf.one_hot(state, _DIM, dtype=tf.float32), state + 1


def _tfp_released(num_rounds, efficient, period=None, warmup=None):
  spec = tf.TensorSpec([_DIM], tf.float32)
  query = tfp.TreeResidualSumQuery(
      record_specs=spec, noise_generator=_BasisGenerator(),
      clip_fn=lambda records, clip: records, clip_value=1.0,
      use_efficient=efficient)
  if period is not None:
    query = tfp.RestartQuery(query, tfp.restart_query.
                             PeriodicRoundRestartIndicator(period, warmup))
  state = query.initial_global_state()
  rows = []
  for _ in range(num_rounds):
    sample = query.initial_sample_state(tf.zeros([_DIM]))
    result, state, _ = query.get_noised_result(sample, state)
    rows.append(result.numpy())
  return np.array(rows, dtype=np.float64)


@pytest.mark.parametrize("efficient", [False, True])
@pytest.mark.parametrize("num_rounds,period,warmup", [
    (13, None, None), (20, 8, None), (21, 6, 2)])
def test_released_coefficients_equal_tensorflow_privacy(efficient, num_rounds,
                                                        period, warmup):
  noise = tree_noise.tree_noise(num_rounds, efficient=efficient,
                                restart_period=period, restart_warmup=warmup)
  assert noise.released.shape[1] <= _DIM
  expected = _tfp_released(num_rounds, efficient, period, warmup)
  got = np.zeros_like(expected)
  got[:, :noise.released.shape[1]] = noise.released
  # float32 sums of at most ~10 terms of weights <= 1: 1e-6 is a few ulps.
  np.testing.assert_allclose(got, expected, atol=1e-6)


def test_plain_prefix_noise_is_the_dyadic_decomposition():
  noise = tree_noise.tree_noise(40, efficient=False)
  # N_t is one node per set bit of t + 1, each of unit variance.
  variances = (noise.prefix**2).sum(axis=1)
  np.testing.assert_array_equal(variances,
                                [bin(t + 1).count("1") for t in range(40)])
  cumulative = np.cumsum(noise.released, axis=0)
  np.testing.assert_allclose(cumulative, noise.prefix, atol=1e-12)


def test_efficient_tree_has_less_prefix_noise():
  plain = tree_noise.tree_noise(64, efficient=False)
  efficient = tree_noise.tree_noise(64, efficient=True)
  v_plain = (plain.prefix**2).sum(axis=1)
  v_eff = (efficient.prefix**2).sum(axis=1)
  assert np.all(v_eff <= v_plain + 1e-12)
  assert v_eff[-1] < v_plain[-1]


def test_restarts_make_trees_independent():
  noise = tree_noise.tree_noise(24, efficient=True, restart_period=8)
  np.testing.assert_array_equal(noise.round_block, np.repeat([0, 1, 2], 8))
  k = noise.covariance
  block = k[:8, :8]
  for tree in range(3):
    s = slice(8 * tree, 8 * tree + 8)
    np.testing.assert_allclose(k[s, s], block, atol=1e-12)
    outside = np.ones(24, bool)
    outside[s] = False
    assert np.all(k[s][:, outside] == 0.0)
  # The sum over all rounds is the sum of each tree's last prefix noise.
  last = noise.prefix[[7, 15, 23]]
  np.testing.assert_allclose(noise.final_variance(),
                             (last.sum(axis=0)**2).sum(), rtol=1e-12)


def test_correlation_has_unit_diagonal():
  r = tree_noise.tree_noise(16).correlation
  np.testing.assert_allclose(np.diag(r), 1.0)


@pytest.mark.parametrize("kwargs,error,match", [
    (dict(num_rounds=0), ValueError, "num_rounds"),
    (dict(num_rounds=4, efficient=1), TypeError, "efficient"),
    (dict(num_rounds=4, restart_period=0), ValueError, "restart_period"),
    (dict(num_rounds=4, restart_period=4, restart_warmup=4), ValueError,
     "restart_warmup"),
    (dict(num_rounds=4, restart_warmup=2), ValueError, "restart_period"),
])
def test_bad_arguments(kwargs, error, match):
  with pytest.raises(error, match=match):
    tree_noise.tree_noise(**kwargs)
