"""Canary directions: generated in the aggregation graph and eagerly after it.

docs/method/canaries.md (Andrew et al., "One-shot Empirical Privacy Estimation for Federated
Learning", ICLR 2024, arXiv 2302.03098, Section 3): a canary is a uniformly
random direction on the unit sphere S^{d-1}, d the number of trainable
parameters. Canary j of a run with seed s is

    g_j = tf.random.stateless_normal([d], seed=[s, j], dtype=float32,
                                     alg="philox"),
    c_j = g_j / |g_j|,

with |g_j| accumulated in float64, laid out by `flat_layout`. The same
function runs in the aggregation process (`canary_sum`) and after training
(`canary_block`), so the regenerated canaries are bitwise the trained ones:
canaries are never stored. Which ids a run has, and which are inserted, is
`tff_canary.stats.canaries.canary_config`.
"""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np
import tensorflow as tf

from tff_canary.stats.canaries import schedules
from tff_canary.stats import validation

# Identifies the generator above; stored with every cosine table so that a
# table is never paired with canaries from another generator.
GENERATOR = "tf.random.stateless_normal/philox/float32/unit-norm-float64/v1"


def canary_direction(seed: Any, canary_id: Any, dim: int) -> tf.Tensor:
  """Canary `canary_id` of `seed`: a unit float32 vector of length `dim`.

  Graph-safe (seed and id may be tensors). The norm is accumulated in float64;
  the direction is g * (1 / |g|) in float32, so |c| = 1 to a few float32 ulps.
  """
  key = tf.stack([tf.cast(seed, tf.int64), tf.cast(canary_id, tf.int64)])
  g = tf.random.stateless_normal([dim], seed=key, dtype=tf.float32,
                                 alg="philox")
  g64 = tf.cast(g, tf.float64)
  inv_norm = tf.math.rsqrt(tf.reduce_sum(g64 * g64))
  return g * tf.cast(inv_norm, tf.float32)


def canary_sum(seed: Any, canary_ids: tf.Tensor, dim: int) -> tf.Tensor:
  """Sum of the canaries `canary_ids` (1-D int tensor), float32 [dim].

  A `tf.while_loop` over the ids: the graph has one generator whatever the
  number of canaries (a Python loop would unroll it).
  """
  canary_ids = tf.reshape(canary_ids, [-1])
  n = tf.size(canary_ids)

  def body(i, total):
    return i + 1, total + canary_direction(seed, canary_ids[i], dim)

  _, total = tf.while_loop(
      lambda i, _: i < n, body,
      (tf.constant(0, tf.int32), tf.zeros([dim], tf.float32)),
      parallel_iterations=1)
  return total


_direction_functions: dict[int, Any] = {}


def _direction_function(dim: int):
  if dim not in _direction_functions:
    _direction_functions[dim] = tf.function(
        lambda seed, j: canary_direction(seed, j, dim),
        input_signature=[tf.TensorSpec([], tf.int64),
                         tf.TensorSpec([], tf.int64)])
  return _direction_functions[dim]


def canary_block(seed: int, canary_ids: Sequence[int] | np.ndarray,
                 dim: int, out: np.ndarray | None = None) -> np.ndarray:
  """The canaries `canary_ids` as a float32 NumPy array [len(ids), dim].

  Eager, one canary at a time through one `tf.function` per dim (the same op
  as in the graph, so the canaries are bitwise identical to the in-graph
  ones), written row by row into `out` (allocated if None): the memory is the
  block plus one canary.

  Args:
    seed: The canary seed.
    canary_ids: The ids, 1-D.
    dim: d.
    out: Optional float32 C-contiguous array with at least len(ids) rows of
      length dim; the first len(ids) rows are filled and returned.
  """
  seed = schedules.as_seed(seed)
  dim = validation.as_dim(dim)
  ids = np.asarray(canary_ids, dtype=np.int64).reshape(-1)
  if ids.size and ids.min() < 0:
    raise ValueError(f"canary_ids must be nonnegative, got {ids.min()}.")
  if out is None:
    out = np.empty((ids.size, dim), np.float32)
  elif (out.dtype != np.float32 or out.ndim != 2 or out.shape[1] != dim
        or out.shape[0] < ids.size or not out.flags.c_contiguous):
    raise ValueError(f"out must be a C-contiguous float32 array with at least "
                     f"{ids.size} rows of length {dim}, got {out.dtype} "
                     f"{out.shape}.")
  block = out[:ids.size]
  generate = _direction_function(dim)
  seed_t = tf.constant(seed, tf.int64)
  for row, j in enumerate(ids.tolist()):
    block[row] = generate(seed_t, tf.constant(j, tf.int64)).numpy()
  return block
