"""Orthogonal canaries: rows of a seeded, structured random orthogonal matrix.

docs/method/orthogonal-canaries.md. For a model of d parameters and a canary
seed s, R is the d x d orthogonal matrix

    R = L_3 L_2 L_1,    L_l = H_B D_{l,B} H_A D_{l,A} P_l,

H_W the normalized Sylvester-Hadamard matrix on the coordinates of window W
(`windows`), D_{l,W} seeded sign flips of window W (`_flip`) and P_l a fixed
blocked transpose (`_transpose_shape`): orthogonal for any d, no padding.
Three randomized Hadamard layers follow Yu et al., "Orthogonal Random
Features" (NeurIPS 2016); the surrogate is not exactly Haar, and
tests/federated/insertion/test_orthogonal_transform.py compares its scores with the exact null law
(one layer fails it). Canary j is row rho(j) of R (`rows`). A round needs one
transform of cost O(d log d), whatever the number of canaries:

  * scores: (<c_0, v>, ..., <c_{m-1}, v>) = (R v)[rho];
  * the round's inserted canaries: sum_j w_j c_j = R^T u, u = w_j at rho(j).

The windows, the canary-to-row map, the Hadamard factors and the
permutations are `tff_canary.stats.canaries.orthogonal_canaries`' (the NumPy
half, for frameworks without TensorFlow, which draws the same sign bits):
this module is the transform in TensorFlow, graph-safe.
"""

from __future__ import annotations

import math
from typing import Any, Sequence

import numpy as np
import tensorflow as tf

from tff_canary.stats import validation
from tff_canary.stats.canaries import orthogonal_canaries

# The construction's constants and its NumPy pieces, shared with the NumPy
# half (module docstring).
GENERATOR = orthogonal_canaries.GENERATOR
LAYERS = orthogonal_canaries.LAYERS
windows = orthogonal_canaries.windows
rows = orthogonal_canaries.rows
_factors = orthogonal_canaries.factors
_hadamard = orthogonal_canaries.hadamard
_transpose_shape = orthogonal_canaries.transpose_shape
_tag = orthogonal_canaries.sign_tag


def fwht(x: tf.Tensor, n: int) -> tf.Tensor:
  """H_n x / sqrt(n) for x of shape [n] or [batch, n] (n a power of two).

  H_n = H_{f_1} (x) ... (x) H_{f_k}: with x as an array of shape
  [f_1, ..., f_k] (row-major), each factor multiplies one axis. Each step
  multiplies the leading axis (a matrix product) and moves it to the end (a
  transpose), so after k steps every axis was multiplied once and the axes
  are back in order.
  """
  batched = x.shape.rank == 2
  for f in _factors(n):
    h = tf.constant(_hadamard(f) / np.float32(math.sqrt(f)))
    if batched:
      y = tf.reshape(x, [-1, f, n // f])
      x = tf.transpose(tf.matmul(h, y), [0, 2, 1])
    else:
      x = tf.transpose(tf.matmul(h, tf.reshape(x, [f, n // f])))
  return tf.reshape(x, [-1, n] if batched else [n])


def _permute(x: tf.Tensor, dim: int, layer: int, reverse: bool) -> tf.Tensor:
  """P_l x (or P_l^T x with `reverse`) for x of shape [batch, dim]."""
  shape = _transpose_shape(dim, layer)
  if shape is None:
    return x
  p, q = shape
  head = x[:, :p * q]
  grid = [-1, q, p] if reverse else [-1, p, q]
  head = tf.reshape(tf.transpose(tf.reshape(head, grid), [0, 2, 1]),
                    [-1, p * q])
  if p * q == dim:
    return head
  return tf.concat([head, x[:, p * q:]], axis=1)


def _flip(x: tf.Tensor, seed: Any, tag: int) -> tf.Tensor:
  """D x: the signs of x's last axis flipped by seeded fair bits.

  Coordinate k's sign is bit k mod 32 of word k // 32 of Philox uint32
  words drawn from the stateless seed (seed, tag); flipping is an XOR on the
  float's sign bit (exact, and cheaper than a multiply by drawn signs).
  """
  size = x.shape[-1]
  key = tf.stack([tf.cast(seed, tf.int64), tf.constant(tag, tf.int64)])
  words = tf.random.stateless_uniform([(size + 31) // 32], seed=key,
                                      minval=None, maxval=None,
                                      dtype=tf.uint32, alg="philox")
  shifts = tf.constant(31 - np.arange(32), tf.uint32)
  sign_bits = tf.bitwise.bitwise_and(
      tf.bitwise.left_shift(words[:, tf.newaxis], shifts[tf.newaxis, :]),
      tf.constant(0x80000000, tf.uint32))
  sign_bits = tf.reshape(sign_bits, [-1])[:size]
  flipped = tf.bitwise.bitwise_xor(tf.bitcast(x, tf.uint32), sign_bits)
  return tf.bitcast(flipped, tf.float32)


def _layer(x: tf.Tensor, seed: Any, layer: int, dim: int) -> tf.Tensor:
  """L_l x = H_B D_B H_A D_A P_l x for x of shape [batch, dim].

  D_W flips the signs of window W's coordinates only. With two windows
  A = [0, n) and B = [dim - b, dim), window B's input is A's output on the
  overlap [dim - b, n) followed by the untouched tail [n, dim).
  """
  x = _permute(x, dim, layer, reverse=False)
  spans = windows(dim)
  n = spans[0][1]
  y = fwht(_flip(x[:, :n], seed, _tag(layer, 0)), n)
  if len(spans) == 1:
    return y
  start, b = spans[1]
  body = tf.concat([y[:, start:], x[:, n:]], axis=1)
  body = fwht(_flip(body, seed, _tag(layer, 1)), b)
  return tf.concat([y[:, :start], body], axis=1)


def _layer_transpose(x: tf.Tensor, seed: Any, layer: int,
                     dim: int) -> tf.Tensor:
  """L_l^T x = P_l^T D_A H_A D_B H_B x (H and D are symmetric)."""
  spans = windows(dim)
  n = spans[0][1]
  if len(spans) == 1:
    x = _flip(fwht(x, n), seed, _tag(layer, 0))
  else:
    start, b = spans[1]
    body = _flip(fwht(x[:, start:], b), seed, _tag(layer, 1))
    head = tf.concat([x[:, :start], body[:, :n - start]], axis=1)
    head = _flip(fwht(head, n), seed, _tag(layer, 0))
    x = tf.concat([head, body[:, n - start:]], axis=1)
  return _permute(x, dim, layer, reverse=True)


def _batched(v: Any) -> tuple[tf.Tensor, bool]:
  x = tf.convert_to_tensor(v, tf.float32)
  return (x, True) if x.shape.rank == 2 else (x[tf.newaxis], False)


def forward(seed: Any, v: tf.Tensor, dim: int) -> tf.Tensor:
  """R v for v of shape [dim] or [batch, dim], float32. Graph-safe."""
  x, batched = _batched(v)
  for layer in range(LAYERS):
    x = _layer(x, seed, layer, dim)
  return x if batched else x[0]


def inverse(seed: Any, u: tf.Tensor, dim: int) -> tf.Tensor:
  """R^T u (= R^{-1} u) for u of shape [dim] or [batch, dim]. Graph-safe."""
  x, batched = _batched(u)
  for layer in reversed(range(LAYERS)):
    x = _layer_transpose(x, seed, layer, dim)
  return x if batched else x[0]


def scores(seed: Any, v: tf.Tensor, dim: int, canary_rows: Any) -> tf.Tensor:
  """<c_j, v> for every canary j: R v at the canaries' rows (`rows`)."""
  return tf.gather(forward(seed, v, dim), canary_rows, axis=-1)


def canary_sum(seed: Any, canary_ids: tf.Tensor, dim: int, canary_rows: Any,
               weights: tf.Tensor | None = None) -> tf.Tensor:
  """sum_j w_j c_j over `canary_ids` (w_j = 1 by default), float32 [dim].

  One inverse transform of u, u at canary j's row = w_j (repeated ids add).
  """
  ids = tf.reshape(tf.cast(canary_ids, tf.int32), [-1])
  where = tf.gather(tf.constant(canary_rows, tf.int32)
                    if isinstance(canary_rows, np.ndarray) else canary_rows,
                    ids)
  if weights is None:
    weights = tf.ones(tf.shape(ids), tf.float32)
  u = tf.scatter_nd(where[:, tf.newaxis], tf.cast(weights, tf.float32), [dim])
  return inverse(seed, u, dim)


def canary_block(seed: int, canary_ids: Sequence[int] | np.ndarray,
                 dim: int) -> np.ndarray:
  """The canaries `canary_ids` as a float32 NumPy array [len(ids), dim].

  Eager; row j is R^T e_{rho(j)}, computed as a batch (memory: the block
  twice). For tests, plots and users who want to look at a canary; the
  process and the scores never materialize canaries.
  """
  dim = validation.as_dim(dim)
  ids = np.asarray(canary_ids, dtype=np.int64).reshape(-1)
  if ids.size and (ids.min() < 0 or ids.max() >= dim):
    raise ValueError(f"canary_ids must be in [0, dim = {dim}), got "
                     f"{ids.min()}..{ids.max()}.")
  where = rows(seed, dim, int(ids.max()) + 1 if ids.size else 0)[ids]
  basis = np.zeros((ids.size, dim), np.float32)
  basis[np.arange(ids.size), where] = 1.0
  return inverse(tf.constant(seed, tf.int64), basis, dim).numpy()
