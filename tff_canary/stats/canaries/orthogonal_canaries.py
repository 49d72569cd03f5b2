"""Orthogonal canaries in NumPy: the same seeded orthogonal matrix as TFF's.

docs/method/orthogonal-canaries.md. For a model of d parameters and a canary
seed s, R is the d x d orthogonal matrix

    R = L_3 L_2 L_1,    L_l = H_B D_{l,B} H_A D_{l,A} P_l,

H_W the normalized Sylvester-Hadamard matrix on the coordinates of window W
(`windows`), D_{l,W} seeded sign flips of window W and P_l a fixed blocked
transpose (`transpose_shape`): orthogonal for any d, no padding. Three
randomized Hadamard layers follow Yu et al., "Orthogonal Random Features"
(NeurIPS 2016). Canary j is row rho(j) of R (`rows`). A round needs one
transform of cost O(d log d), whatever the number of canaries:

  * scores: (<c_0, v>, ..., <c_{m-1}, v>) = (R v)[rho];
  * the round's inserted canaries: sum_j w_j c_j = R^T u, u = w_j at rho(j).

This module is the NumPy half, for frameworks without TensorFlow (Flower):
the sign bits are TensorFlow's stateless Philox words for the same seeds
(`philox`), so a seed gives the same canaries as
`tff_canary.federated.insertion.orthogonal_transform` (TFF's, which takes its
windows, rows and factors from here), bit for bit in the signs and
permutations, and to float32 rounding in the transform.
"""

from __future__ import annotations

import math
from typing import Sequence

import numpy as np

from tff_canary.stats import validation
from tff_canary.stats.canaries import philox

# Identifies the construction above; stored with every cosine table so that a
# table is never paired with canaries from another generator.
GENERATOR = "randomized-hadamard/3-layers/two-windows/float32/v2"

# The number of randomized Hadamard layers L.
LAYERS = 3

# The largest Hadamard factor of the Kronecker decomposition (2^4 was the
# fastest of 2^3..2^7 on this project's machine, in TensorFlow).
MAX_FACTOR_LOG2 = 4

# The sign bits of window w of layer l are drawn from the stateless seed
# (s, SIGN_TAG - (l * MAX_WINDOWS + w)) (`sign_tag`): negative, so it never
# equals a Gaussian canary's (s, j), j >= 0.
SIGN_TAG = -1
# At most two windows per layer (`windows`): sign vector l * 2 + w.
MAX_WINDOWS = 2
# The canary-to-row map is drawn from NumPy's default_rng([s, ROW_TAG]).
ROW_TAG = 0x0C7A


def windows(dim: int) -> list[tuple[int, int]]:
  """The Hadamard windows (start, size) of one layer, covering [0, dim).

  n is the largest power of two <= dim and t = dim - n. With t = 0, one
  window [0, n); otherwise also [dim - b, dim), b the smallest power of two
  >= t. Windows may be disjoint: the permutation before each layer after
  the first moves every window's coordinates across them
  (`transpose_shape`).
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
  [0, dim) drawn from (seed, ROW_TAG): a canary is a uniformly random row
  of R, which makes E[c_jk^2] = 1/dim exactly for every coordinate k.
  Prefix-consistent: canary j is the same row for any m > j.
  """
  dim = validation.as_dim(dim)
  num_canaries = validation.as_int(num_canaries, "num_canaries", minimum=0)
  if num_canaries > dim:
    raise ValueError(f"num_canaries must be at most dim = {dim} (orthogonal "
                     f"canaries are rows of a dim x dim matrix), got "
                     f"{num_canaries}.")
  rng = np.random.default_rng([seed, ROW_TAG])
  return rng.permutation(dim)[:num_canaries].astype(np.int32)


def factors(n: int) -> list[int]:
  """Sizes of the Hadamard factors of H_n, balanced, at most
  2^MAX_FACTOR_LOG2 each."""
  k = n.bit_length() - 1
  if k == 0:
    return []
  count = math.ceil(k / MAX_FACTOR_LOG2)
  sizes = [k // count + (1 if i < k % count else 0) for i in range(count)]
  return [1 << s for s in sizes]


def hadamard(f: int) -> np.ndarray:
  """The unnormalized Sylvester-Hadamard matrix of size f (a power of two)."""
  h = np.ones((1, 1), np.float32)
  while h.shape[0] < f:
    h = np.block([[h, h], [h, -h]])
  return h


def transpose_shape(dim: int, layer: int) -> tuple[int, int] | None:
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


def sign_tag(layer: int, window: int) -> int:
  """The second seed word of the sign bits of `window` in `layer`."""
  return SIGN_TAG - (layer * MAX_WINDOWS + window)


def fwht(x: np.ndarray, n: int) -> np.ndarray:
  """H_n x / sqrt(n) along the last axis of x [batch, n] (n a power of two).

  As TFF's: with x as [batch, f_1, ..., f_k], each step multiplies the
  leading factor's axis and moves it to the end.
  """
  for f in factors(n):
    h = hadamard(f) / np.float32(math.sqrt(f))
    y = x.reshape(-1, f, n // f)
    x = np.transpose(np.matmul(h, y), (0, 2, 1))
  return np.ascontiguousarray(x.reshape(-1, n))


def _permute(x: np.ndarray, dim: int, layer: int, reverse: bool) -> np.ndarray:
  """P_l x (or P_l^T x with `reverse`) for x of shape [batch, dim]."""
  shape = transpose_shape(dim, layer)
  if shape is None:
    return x
  p, q = shape
  grid = (-1, q, p) if reverse else (-1, p, q)
  head = np.transpose(x[:, :p * q].reshape(grid), (0, 2, 1)).reshape(-1, p * q)
  return np.concatenate([head, x[:, p * q:]], axis=1)


def _flip(x: np.ndarray, seed: int, tag: int) -> np.ndarray:
  """D x: coordinate k's sign flipped by bit k mod 32 (the lowest first) of
  Philox word k // 32 drawn from the stateless seed (seed, tag), as TFF's
  `_flip`."""
  size = x.shape[-1]
  words = philox.stateless_uint32((seed, tag), (size + 31) // 32)
  bits = np.unpackbits(words.astype("<u4").view(np.uint8),
                       bitorder="little")[:size]
  flipped = x.astype(np.float32, copy=True).view(np.uint32)
  flipped ^= bits.astype(np.uint32) << np.uint32(31)
  return flipped.view(np.float32)


def _layer(x: np.ndarray, seed: int, layer: int, dim: int) -> np.ndarray:
  """L_l x = H_B D_B H_A D_A P_l x for x of shape [batch, dim]."""
  x = _permute(x, dim, layer, reverse=False)
  spans = windows(dim)
  n = spans[0][1]
  y = fwht(_flip(x[:, :n], seed, sign_tag(layer, 0)), n)
  if len(spans) == 1:
    return y
  start, b = spans[1]
  body = np.concatenate([y[:, start:], x[:, n:]], axis=1)
  body = fwht(_flip(body, seed, sign_tag(layer, 1)), b)
  return np.concatenate([y[:, :start], body], axis=1)


def _layer_transpose(x: np.ndarray, seed: int, layer: int,
                     dim: int) -> np.ndarray:
  """L_l^T x = P_l^T D_A H_A D_B H_B x (H and D are symmetric)."""
  spans = windows(dim)
  n = spans[0][1]
  if len(spans) == 1:
    x = _flip(fwht(x, n), seed, sign_tag(layer, 0))
  else:
    start, b = spans[1]
    body = _flip(fwht(x[:, start:], b), seed, sign_tag(layer, 1))
    head = np.concatenate([x[:, :start], body[:, :n - start]], axis=1)
    head = _flip(fwht(head, n), seed, sign_tag(layer, 0))
    x = np.concatenate([head, body[:, n - start:]], axis=1)
  return _permute(x, dim, layer, reverse=True)


def _batched(v, dim: int) -> tuple[np.ndarray, bool]:
  x = np.asarray(v, dtype=np.float32)
  if x.ndim not in (1, 2) or x.shape[-1] != dim:
    raise ValueError(f"the vector must have shape [dim] or [batch, dim] with "
                     f"dim = {dim}, got {x.shape}.")
  return (x, True) if x.ndim == 2 else (x[np.newaxis], False)


def forward(seed: int, v, dim: int) -> np.ndarray:
  """R v for v of shape [dim] or [batch, dim], float32."""
  dim = validation.as_dim(dim)
  x, batched = _batched(v, dim)
  for layer in range(LAYERS):
    x = _layer(x, seed, layer, dim)
  return x if batched else x[0]


def inverse(seed: int, u, dim: int) -> np.ndarray:
  """R^T u (= R^{-1} u) for u of shape [dim] or [batch, dim], float32."""
  dim = validation.as_dim(dim)
  x, batched = _batched(u, dim)
  for layer in reversed(range(LAYERS)):
    x = _layer_transpose(x, seed, layer, dim)
  return x if batched else x[0]


def scores(seed: int, v, dim: int, canary_rows: np.ndarray) -> np.ndarray:
  """<c_j, v> for every canary j: R v at the canaries' rows (`rows`)."""
  return forward(seed, v, dim)[..., np.asarray(canary_rows)]


def canary_sum(seed: int, canary_ids: Sequence[int] | np.ndarray, dim: int,
               canary_rows: np.ndarray, weights=None) -> np.ndarray:
  """sum_j w_j c_j over `canary_ids` (w_j = 1 by default), float32 [dim].

  One inverse transform of u, u at canary j's row = w_j (repeated ids add).
  """
  ids = np.asarray(canary_ids, dtype=np.int64).reshape(-1)
  weights = (np.ones(ids.size, np.float32) if weights is None
             else np.asarray(weights, np.float32).reshape(-1))
  if weights.size != ids.size:
    raise ValueError(f"weights must have one value per canary id "
                     f"({ids.size}), got {weights.size}.")
  u = np.zeros(dim, np.float32)
  np.add.at(u, np.asarray(canary_rows)[ids], weights)
  return inverse(seed, u, dim)


def canary_block(seed: int, canary_ids: Sequence[int] | np.ndarray,
                 dim: int) -> np.ndarray:
  """The canaries `canary_ids` as a float32 array [len(ids), dim] (row j is
  R^T e_{rho(j)}); for tests, plots and users who want to look at one."""
  dim = validation.as_dim(dim)
  ids = np.asarray(canary_ids, dtype=np.int64).reshape(-1)
  if ids.size and (ids.min() < 0 or ids.max() >= dim):
    raise ValueError(f"canary_ids must be in [0, dim = {dim}), got "
                     f"{ids.min()}..{ids.max()}.")
  where = rows(seed, dim, int(ids.max()) + 1 if ids.size else 0)[ids]
  basis = np.zeros((ids.size, dim), np.float32)
  basis[np.arange(ids.size), where] = 1.0
  return inverse(seed, basis, dim)
