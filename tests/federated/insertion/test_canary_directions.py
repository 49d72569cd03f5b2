"""Tests of tff_canary.federated.insertion.canary_directions and flat_layout.

The canaries regenerated eagerly after training must be bitwise the ones the
aggregation graph generated; statistical checks use fixed seeds.
"""

from __future__ import annotations

import collections

import numpy as np
import pytest
import tensorflow as tf

from tff_canary.federated.insertion import canary_directions
from tff_canary.federated.structures import flat_layout


def test_block_matches_in_graph_generation_bitwise():
  dim = 3001

  @tf.function
  def in_graph(seed, j):
    return canary_directions.canary_direction(seed, j, dim)

  block = canary_directions.canary_block(99, [0, 5, 2], dim)
  for row, j in zip(block, [0, 5, 2]):
    np.testing.assert_array_equal(row, in_graph(tf.constant(99, tf.int64),
                                                tf.constant(j)).numpy())
  # Deterministic across calls, different across ids and seeds.
  np.testing.assert_array_equal(
      block, canary_directions.canary_block(99, [0, 5, 2], dim))
  assert not np.array_equal(
      block[0], canary_directions.canary_block(98, [0], dim)[0])


def test_canaries_are_unit_and_nearly_orthogonal():
  dim, m = 4000, 200
  c = canary_directions.canary_block(1, range(m), dim).astype(np.float64)
  # float32 entries scaled by a float64 norm: |c| = 1 to ~1e-7.
  np.testing.assert_allclose(np.linalg.norm(c, axis=1), 1.0, atol=1e-6)
  gram = c @ c.T
  off = gram[np.triu_indices(m, 1)]
  # 19900 pairwise cosines ~ N(0, 1/d) (weakly dependent): their mean has sd
  # about 1/sqrt(d * 19900) = 1.1e-4 and their variance is 1/d = 2.5e-4 with
  # relative sd ~1%. Bands of 5 sd (fixed seed).
  assert abs(off.mean()) < 5 * np.sqrt(1 / (dim * off.size))
  assert abs(off.var() * dim - 1.0) < 0.1


def test_canary_sum_is_one_generator_in_a_loop():
  dim = 500

  @tf.function(input_signature=[tf.TensorSpec([None], tf.int32)])
  def total(ids):
    return canary_directions.canary_sum(tf.constant(4, tf.int64), ids, dim)

  ids = np.array([3, 1, 7, 7, 0], np.int32)
  expected = canary_directions.canary_block(4, ids, dim).astype(
      np.float64).sum(0)
  np.testing.assert_allclose(total(ids).numpy(), expected, atol=1e-6)
  np.testing.assert_array_equal(total(np.zeros(0, np.int32)).numpy(),
                                np.zeros(dim))
  graph = total.get_concrete_function().graph.as_graph_def()
  ops = [n.op for n in graph.node]
  for function in graph.library.function:
    ops += [n.op for n in function.node_def]
  # One generator whatever the number of canaries: the loop is not unrolled.
  assert ops.count("StatelessRandomNormalV2") == 1


def test_flatten_and_unflatten_round_trip():
  specs = collections.OrderedDict(
      b=tf.TensorSpec([2, 3], tf.float32), a=[tf.TensorSpec([4], tf.float32)])
  assert flat_layout.tensor_specs_dim(specs) == 10
  flat = tf.range(10, dtype=tf.float32)
  value = flat_layout.unflatten_value(flat, specs)
  np.testing.assert_array_equal(flat_layout.flatten_value(value).numpy(),
                                np.arange(10))
  np.testing.assert_array_equal(
      flat_layout.flatten_numpy(tf.nest.map_structure(np.asarray, value)),
      np.arange(10))
  with pytest.raises(TypeError, match="dtype int32"):
    flat_layout.tensor_specs_dim([tf.TensorSpec([3], tf.int32)])
  with pytest.raises(ValueError, match="not fully defined"):
    flat_layout.tensor_specs_dim([tf.TensorSpec([None], tf.float32)])
