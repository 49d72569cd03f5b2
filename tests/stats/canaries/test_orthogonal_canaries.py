"""Orthogonal canaries in NumPy (stats/canaries/orthogonal_canaries.py).

Exact identities on small d, against dense matrices built by the transform
itself and by an independent construction (the product of the layers'
dense factors). The agreement with TFF's transform, canary for canary, is
tests/federated/insertion/test_orthogonal_transform.py's (it needs
TensorFlow).
"""

import math

import numpy as np
import pytest
from scipy import linalg

from tff_canary.stats.canaries import orthogonal_canaries as oc
from tff_canary.stats.canaries import philox

DIMS = [2, 3, 5, 16, 100, 1000, 1029]


def _dense(seed, dim):
  return oc.forward(seed, np.eye(dim, dtype=np.float32), dim).T  # R's rows


@pytest.mark.parametrize("dim", DIMS)
def test_the_matrix_is_orthogonal_and_inverse_is_its_transpose(dim):
  r = _dense(3, dim)
  # float32 Hadamard products: each entry of R R^T is a sum of dim products
  # of entries ~ 1/sqrt(dim), rounding ~ 1e-7 each.
  np.testing.assert_allclose(r @ r.T, np.eye(dim), atol=2e-6)
  u = np.random.default_rng(dim).normal(size=(2, dim)).astype(np.float32)
  np.testing.assert_allclose(oc.inverse(3, u, dim), u @ r, atol=2e-5)


def _independent(seed, dim):
  """R = L_3 L_2 L_1 from dense factors: H from scipy, D from the sign
  rule written out bit by bit, P as a permutation matrix."""
  matrix = np.eye(dim)
  for layer in range(oc.LAYERS):
    perm = np.arange(dim)
    shape = oc.transpose_shape(dim, layer)
    if shape is not None:
      p, q = shape
      perm[:p * q] = np.arange(p * q).reshape(p, q).T.reshape(-1)
    step = np.eye(dim)[perm]  # (P x)_i = x_perm[i]
    for window, (start, size) in enumerate(oc.windows(dim)):
      words = philox.stateless_uint32((seed, oc.sign_tag(layer, window)),
                                      (size + 31) // 32)
      signs = np.array([-1.0 if (int(words[k // 32]) >> (k % 32)) & 1 else 1.0
                        for k in range(size)])
      block = np.eye(dim)
      block[start:start + size, start:start + size] = (
          linalg.hadamard(size) / math.sqrt(size)) * signs[np.newaxis, :]
      step = block @ step
    matrix = step @ matrix
  return matrix


@pytest.mark.parametrize("dim", [3, 16, 100, 1029])
def test_the_transform_equals_the_product_of_its_dense_layers(dim):
  np.testing.assert_allclose(_dense(11, dim), _independent(11, dim),
                             atol=2e-6)


def test_scores_and_canary_sums_are_the_rows():
  dim, seed = 1000, 5
  block = oc.canary_block(seed, np.arange(8), dim)
  rows = oc.rows(seed, dim, 8)
  np.testing.assert_allclose(block, _dense(seed, dim)[rows], atol=1e-6)
  v = np.random.default_rng(0).normal(size=dim).astype(np.float32)
  np.testing.assert_allclose(oc.scores(seed, v, dim, rows), block @ v,
                             rtol=1e-5, atol=1e-5)
  weights = np.array([1, -2, 0.5], np.float32)
  ids = [2, 7, 2]  # a repeated id adds
  np.testing.assert_allclose(
      oc.canary_sum(seed, ids, dim, rows, weights),
      weights @ block[ids], atol=1e-6)
  np.testing.assert_allclose(np.linalg.norm(block, axis=1), 1.0, rtol=1e-5)


def test_rows_are_prefix_consistent_and_distinct():
  rows = oc.rows(9, 500, 500)
  assert sorted(rows.tolist()) == list(range(500))
  np.testing.assert_array_equal(oc.rows(9, 500, 20), rows[:20])


def test_bad_input_is_refused_by_name():
  with pytest.raises(ValueError, match="num_canaries must be at most dim"):
    oc.rows(1, 10, 11)
  with pytest.raises(ValueError, match=r"shape \[dim\] or \[batch, dim\]"):
    oc.forward(1, np.zeros(9), 10)
  with pytest.raises(ValueError, match="canary_ids must be in"):
    oc.canary_block(1, [10], 10)
  with pytest.raises(ValueError, match="one value per canary id"):
    oc.canary_sum(1, [0, 1], 10, oc.rows(1, 10, 2), [1.0])
