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
"""

from __future__ import annotations

import math
from typing import Any, Sequence

import numpy as np
import tensorflow as tf

from tff_canary.stats import validation

# Identifies the construction above; stored with every cosine table so that a
# table is never paired with canaries from another generator.
GENERATOR = "randomized-hadamard/3-layers/two-windows/float32/v2"

# The number of randomized Hadamard layers L.
LAYERS = 3

# The largest Hadamard factor of the Kronecker decomposition (2^4 was the
# fastest of 2^3..2^7 on this project's machine).
_MAX_FACTOR_LOG2 = 4

# The sign bits of window w of layer l are drawn from the stateless seed
# (s, _SIGN_TAG - (l * _MAX_WINDOWS + w)) (`_tag`): negative, so it never
# equals a Gaussian canary's (s, j), j >= 0.
_SIGN_TAG = -1
# At most two windows per layer (`windows`): sign vector l * 2 + w.
_MAX_WINDOWS = 2
# The canary-to-row map is drawn from NumPy's default_rng([s, _ROW_TAG]).
_ROW_TAG = 0x0C7A


def windows(dim: int) -> list[tuple[int, int]]:
  """The Hadamard windows (start, size) of one layer, covering [0, dim).

  n is the largest power of two <= dim and t = dim - n. With t = 0, one
  window [0, n); otherwise also [dim - b, dim), b the smallest power of two
  >= t. Windows may be disjoint: the permutation before each layer after
  the first moves every window's coordinates across them
  (`_transpose_shape`).
  """
  dim = validation.as_dim(dim)
  n = 1 << (dim.bit_length() - 1)
  t = dim - n
  if t == 0:
    return [(0, n)]
  b = 1 << (t - 1).bit_length()
  return [(0, n), (dim - b, b)]


def rows(seed: int, dim: int, num_canaries: int) -> np.ndarray:
  """rho(j), the row of R that is canary j, for j < num_canaries (int32).

  The first `num_canaries` entries of a uniformly random permutation of
  [0, dim) drawn from (seed, _ROW_TAG): a canary is a uniformly random row
  of R, which makes E[c_jk^2] = 1/dim exactly for every coordinate k.
  Prefix-consistent: canary j is the same row for any m > j.
  """
  dim = validation.as_dim(dim)
  num_canaries = validation.as_int(num_canaries, "num_canaries", minimum=0)
  if num_canaries > dim:
    raise ValueError(f"num_canaries must be at most dim = {dim} (orthogonal "
                     f"canaries are rows of a dim x dim matrix), got "
                     f"{num_canaries}.")
  rng = np.random.default_rng([seed, _ROW_TAG])
  return rng.permutation(dim)[:num_canaries].astype(np.int32)


def _factors(n: int) -> list[int]:
  """Sizes of the Hadamard factors of H_n, balanced, at most 2^_MAX_FACTOR_LOG2
  each."""
  k = n.bit_length() - 1
  if k == 0:
    return []
  count = math.ceil(k / _MAX_FACTOR_LOG2)
  sizes = [k // count + (1 if i < k % count else 0) for i in range(count)]
  return [1 << s for s in sizes]


def _hadamard(f: int) -> np.ndarray:
  """The unnormalized Sylvester-Hadamard matrix of size f (a power of two)."""
  h = np.ones((1, 1), np.float32)
  while h.shape[0] < f:
    h = np.block([[h, h], [h, -h]])
  return h


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


def _transpose_shape(dim: int, layer: int) -> tuple[int, int] | None:
  """(p, q) of layer `layer`'s permutation, or None for no permutation.

  Layer 0 has none; layers 1 and 2 transpose the first p q coordinates read
  as a p x q matrix, p = 0.618 sqrt(dim) and sqrt(dim)
  (docs/method/orthogonal-canaries.md, "The matrix").
  """
  if layer == 0:
    return None
  scale = (math.sqrt(5.0) - 1.0) / 2.0 if layer == 1 else 1.0
  p = int(round(scale * math.sqrt(dim)))
  if p < 2 or dim // p < 2:
    return None
  return p, dim // p


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


def _tag(layer: int, window: int) -> int:
  return _SIGN_TAG - (layer * _MAX_WINDOWS + window)


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
