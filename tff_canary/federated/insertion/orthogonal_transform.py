"""Orthogonal canaries: rows of a seeded, structured random orthogonal matrix.

docs/method/orthogonal-canaries.md. For a model of d parameters and a canary
seed s, R is the d x d orthogonal matrix

    R = L_3 L_2 L_1,    L_l = H_{W_2} D_{l,2} H_{W_1} D_{l,1} P_l,

where P_l is the stride permutation k -> a_l k mod d (`multiplier`), each
D_{l,w} = diag(+-1) has independent fair signs drawn from (s, its tag), and
H_W applies the normalized Sylvester-Hadamard matrix to the coordinates of
window W (`windows`: [0, n) with n the largest power of two <= d, and, when
d is not a power of two, [d - b, d) with b the smallest power of two >=
d - n). Each factor is orthogonal, so R is, exactly, for any d: no padding
or truncation. Canary j is row rho(j) of R (`rows`: a prefix of a seeded
random permutation of [0, d)), a unit vector; distinct canaries are
orthogonal.

Three randomized Hadamard layers follow Yu et al., "Orthogonal Random
Features" (NeurIPS 2016), who use three HD blocks as a surrogate of a
Haar-random orthogonal matrix. The surrogate is not exactly Haar (one layer
maps e_0 to +-1/sqrt(n) on a window); tests/test_orthogonal_canaries.py
compares canary scores with the exact null law for adversarial vectors, and
shows that one layer fails it.

Everything a round needs is one transform of cost O(d log d), whatever the
number of canaries:

  * scores: (<c_0, v>, ..., <c_{m-1}, v>) = (R v)[rho];
  * the round's inserted canaries: sum_j w_j c_j = R^T u, u = w_j at rho(j).

Each Hadamard transform is a product of small Hadamard factors (H_n =
H_{f_1} (x) ... (x) H_{f_k}, f_i <= 32), one matrix product and one
transpose per factor: dense kernels that TFF's C++ runtime runs like any TF
op (faster here than einsums or a butterfly; `bench/round_overhead.py
--directions orthogonal` prints the transform's unit cost).
"""

from __future__ import annotations

import math
from typing import Any, Sequence

import numpy as np
import tensorflow as tf

from tff_canary.stats import validation

# Identifies the construction above; stored with every cosine table so that a
# table is never paired with canaries from another generator.
GENERATOR = "randomized-hadamard/3-layers/two-windows/float32/v1"

# The number of randomized Hadamard layers L.
LAYERS = 3

# The largest Hadamard factor of the Kronecker decomposition (2^5 was the
# fastest of 2^4..2^8 on this project's machine).
_MAX_FACTOR_LOG2 = 5

# The sign vector of window w of layer l is drawn from the stateless seed
# (s, _SIGN_TAG - (l * _MAX_WINDOWS + w)): negative, so it never equals a
# Gaussian canary's (s, j), j >= 0.
_SIGN_TAG = -1
# At most two windows per layer (`windows`): sign vector l * 2 + w.
_MAX_WINDOWS = 2
# The canary-to-row map is drawn from NumPy's default_rng([s, _ROW_TAG]).
_ROW_TAG = 0x0C7A


def windows(dim: int) -> list[tuple[int, int]]:
  """The Hadamard windows (start, size) of one layer, covering [0, dim).

  n is the largest power of two <= dim and t = dim - n. With t = 0, one
  window [0, n); otherwise also [dim - b, dim), b the smallest power of two
  >= t. Windows may be disjoint: the permutation before each layer moves
  every coordinate across them (`multiplier`).
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
  of R, which makes E[c_jk^2] = 1/dim exactly for every coordinate k (module
  docstring). Prefix-consistent: canary j is the same row for any m > j.
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
  """Sizes of the Hadamard factors of H_n, balanced, each <= 2^7."""
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


def _signs(seed: Any, layer: int, dim: int) -> tf.Tensor:
  key = tf.stack([tf.cast(seed, tf.int64),
                  tf.constant(_SIGN_TAG - layer, tf.int64)])
  bits = tf.random.stateless_uniform([dim], seed=key, minval=0, maxval=2,
                                     dtype=tf.int32, alg="philox")
  return tf.cast(1 - 2 * bits, tf.float32)


def _mix(x: tf.Tensor, seed: Any, layer: int, dim: int,
         reverse: bool) -> tf.Tensor:
  """The layer's window transforms, each after its own random signs.

  Forward: for each window W in order, x <- H_W D_{l,W} x, where D_{l,W} is
  a sign diagonal on the whole vector. The inverse applies the transposes in
  reverse order: x <- D_{l,W} H_W x.
  """
  spans = list(enumerate(windows(dim)))
  for index, (start, n) in (reversed(spans) if reverse else spans):
    signs = _signs(seed, layer * _MAX_WINDOWS + index, dim)
    if not reverse:
      x = x * signs
    if n == dim:
      x = fwht(x, n)
    else:
      head, body, tail = (x[..., :start], x[..., start:start + n],
                          x[..., start + n:])
      x = tf.concat([head, fwht(body, n), tail], axis=-1)
    if reverse:
      x = x * signs
  return x


def multiplier(dim: int, layer: int) -> int:
  """a_l: the layer's coordinate permutation is k -> a_l k mod dim.

  The integer coprime with dim nearest to dim times the fractional part of
  (layer + 1) times the golden ratio, a low-discrepancy stride: any window of
  consecutive coordinates is spread over all of [0, dim).
  """
  frac = ((layer + 1) * (math.sqrt(5.0) - 1.0) / 2.0) % 1.0
  a = max(1, int(round(dim * frac)))
  offset = 0
  while True:
    for cand in (a + offset, a - offset):
      if 1 <= cand < max(dim, 2) and math.gcd(cand, dim) == 1:
        return cand
    offset += 1


def _stride_permutation(dim: int, a: int) -> tf.Tensor:
  """[(k * a) mod dim for k in range(dim)], computed in the graph (int32)."""
  k = tf.range(dim, dtype=tf.int64)
  return tf.cast(tf.math.floormod(k * a, dim), tf.int32)


def _permutation(layer: int, dim: int) -> tf.Tensor:
  return _stride_permutation(dim, multiplier(dim, layer))


def _inverse_permutation(layer: int, dim: int) -> tf.Tensor:
  a = multiplier(dim, layer)
  return _stride_permutation(dim, pow(a, -1, dim) if dim > 1 else 0)



def forward(seed: Any, v: tf.Tensor, dim: int) -> tf.Tensor:
  """R v for v of shape [dim] or [batch, dim], float32. Graph-safe."""
  x = tf.convert_to_tensor(v, tf.float32)
  for layer in range(LAYERS):
    x = tf.gather(x, _permutation(layer, dim), axis=-1)
    x = _mix(x, seed, layer, dim, reverse=False)
  return x


def inverse(seed: Any, u: tf.Tensor, dim: int) -> tf.Tensor:
  """R^T u (= R^{-1} u) for u of shape [dim] or [batch, dim]. Graph-safe."""
  x = tf.convert_to_tensor(u, tf.float32)
  for layer in reversed(range(LAYERS)):
    x = _mix(x, seed, layer, dim, reverse=True)
    x = tf.gather(x, _inverse_permutation(layer, dim), axis=-1)
  return x


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
