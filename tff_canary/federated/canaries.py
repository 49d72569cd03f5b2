"""Canaries: their configuration, and their generation in graph and eagerly.

METHOD §2 (Andrew et al., "One-shot Empirical Privacy Estimation for Federated
Learning", ICLR 2024, arXiv 2302.03098, Section 3): a canary is a uniformly
random direction on the unit sphere S^{d-1}, d the number of trainable
parameters. Canary j of a run with seed s is

    g_j = tf.random.stateless_normal([d], seed=[s, j], dtype=float32,
                                     alg="philox"),
    c_j = g_j / |g_j|,

with |g_j| accumulated in float64. The flat vector is laid out in the order of
`tf.nest.flatten` of the aggregated value's structure (the model's trainable
weights) and split and reshaped into that structure. The same function runs
inside the aggregation process (`canary_sum`, in a `tf.while_loop`) and after
training (`canary_block`, eagerly in blocks), so the canaries used in training
and the ones regenerated for the cosines are bitwise identical: canaries are
never stored.

Canary ids 0..m-1 (m = num_inserted + num_held_out). With the default
`assignment="fixed"`, ids 0..k-1 are inserted and k..m-1 held out (never
inserted). With `assignment="coin"` (for the one-run bound of Steinke, Nasr and
Jagielski 2023, METHOD §7) each of the m candidates is inserted by an
independent fair coin drawn from the seed, so the number inserted is
Binomial(m, 1/2) and only the total m is fixed by the two counts. Either way the
membership is the explicit boolean array `CanaryConfig.inserted`.
"""

from __future__ import annotations

import dataclasses
import warnings
from typing import Any, Sequence

import numpy as np
import tensorflow as tf

from tff_canary.stats import schedules
from tff_canary.stats import validation

# Identifies the generator above; stored with every cosine table so that a
# table is never paired with canaries from another generator.
GENERATOR = "tf.random.stateless_normal/philox/float32/unit-norm-float64/v1"

# Warn when m = num_inserted + num_held_out exceeds dim / ORTHOGONALITY_RATIO.
ORTHOGONALITY_RATIO = 100


class TooManyCanariesWarning(UserWarning):
  """More canaries than the model's dimension keeps nearly orthogonal."""


@dataclasses.dataclass(frozen=True)
class CanaryConfig:
  """Which canaries a run has, and when the inserted ones take part.

  Frozen and validated at construction; the membership and the realized
  schedule are computed then, deterministically from `seed`.

  Attributes:
    seed: Nonnegative integer seed of the canary directions, the coin and the
      schedule.
    num_inserted: k >= 0, inserted canaries (ids 0..k-1 with "fixed").
    num_held_out: k' >= 0, held-out canaries (ids k..k+k'-1 with "fixed").
    schedule: A `tff_canary.stats.schedules.Schedule`.
    assignment: "fixed" (above) or "coin" (each of the k + k' candidates is
      inserted by an independent fair coin from the seed).
    record_aggregate: Whether the aggregation process reports each round's
      noised aggregate (measurement `noised_aggregate`), needed for the
      all-iterates cosines.
    inserted: bool [k + k'], canary id -> inserted (derived).
    participation: `schedules.Participation` of the inserted canaries
      (derived).
  """

  seed: int
  num_inserted: int
  num_held_out: int
  schedule: schedules.Schedule
  assignment: str = "fixed"
  record_aggregate: bool = True
  inserted: np.ndarray = dataclasses.field(init=False, repr=False)
  participation: schedules.Participation = dataclasses.field(
      init=False, repr=False)

  def __post_init__(self):
    seed = schedules.as_seed(self.seed, "seed")
    num_inserted = validation.as_int(self.num_inserted, "num_inserted",
                                     minimum=0)
    num_held_out = validation.as_int(self.num_held_out, "num_held_out",
                                     minimum=0)
    if num_inserted + num_held_out > np.iinfo(np.int32).max:
      raise ValueError(f"num_inserted + num_held_out must fit in int32, got "
                       f"{num_inserted + num_held_out}.")
    if not isinstance(self.schedule, schedules.Schedule):
      raise TypeError(f"schedule must be a tff_canary.stats.schedules.Schedule "
                      f"(ShuffledEpochs, FixedPresentations, PerRoundSampling)"
                      f", got {self.schedule!r}.")
    assignment = validation.as_choice(self.assignment, "assignment",
                                      schedules.ASSIGNMENTS)
    if not isinstance(self.record_aggregate, (bool, np.bool_)):
      raise TypeError(f"record_aggregate must be a bool, got "
                      f"{self.record_aggregate!r}.")
    total = num_inserted + num_held_out
    if assignment == "fixed":
      inserted = np.arange(total) < num_inserted
    else:
      rng = np.random.default_rng([seed, schedules.COIN_TAG])
      inserted = rng.integers(0, 2, size=total).astype(bool)
    inserted.setflags(write=False)
    participation = self.schedule.realize(seed, np.flatnonzero(inserted))
    object.__setattr__(self, "seed", seed)
    object.__setattr__(self, "num_inserted", num_inserted)
    object.__setattr__(self, "num_held_out", num_held_out)
    object.__setattr__(self, "assignment", assignment)
    object.__setattr__(self, "record_aggregate", bool(self.record_aggregate))
    object.__setattr__(self, "inserted", inserted)
    object.__setattr__(self, "participation", participation)

  @property
  def num_canaries(self) -> int:
    """m = num_inserted + num_held_out, all canary ids."""
    return self.num_inserted + self.num_held_out

  @property
  def num_rounds(self) -> int:
    return self.schedule.num_rounds

  @property
  def inserted_ids(self) -> np.ndarray:
    return np.flatnonzero(self.inserted)

  @property
  def held_out_ids(self) -> np.ndarray:
    return np.flatnonzero(~self.inserted)

  def counts(self) -> np.ndarray:
    """Realized participation count of every canary id (0 if held out)."""
    return self.participation.counts(self.num_canaries)

  def __eq__(self, other):
    if not isinstance(other, CanaryConfig):
      return NotImplemented
    return (self.seed, self.num_inserted, self.num_held_out, self.schedule,
            self.assignment, self.record_aggregate) == (
                other.seed, other.num_inserted, other.num_held_out,
                other.schedule, other.assignment, other.record_aggregate)

  def __hash__(self):
    return hash((self.seed, self.num_inserted, self.num_held_out,
                 self.schedule, self.assignment, self.record_aggregate))


def check_orthogonality(num_canaries: int, dim: int) -> bool:
  """Warns (`TooManyCanariesWarning`) if m > dim / 100; returns whether it did.

  The statistics treat canaries as orthogonal. The cosine of two independent
  uniform directions is ~ N(0, 1/d), so in a model delta carrying k inserted
  canaries at norm C, canary j's inner product picks up the other canaries'
  cross-talk, a zero-mean term of variance (k - 1) C^2 / d: the canaries act
  as extra noise of multiplier sqrt((k - 1) / d) on top of the DP noise, and the
  Gram matrix of m canaries has eigenvalues in (1 +- sqrt(m / d))^2
  (Marchenko-Pastur). At m <= d / 100 that extra noise multiplier is <= 0.1,
  ten times below the z ~ 1 of meaningful DP, and small next to the z = 0.23
  that already gives the paper's epsilon = 30; beyond it the canaries start to
  measure each other. The paper's settings use m / d ~ 1e-3. The warning
  counts held-out canaries too (they do not enter the model, but the threshold
  is meant as a plain, conservative rule).
  """
  num_canaries = validation.as_int(num_canaries, "num_canaries", minimum=0)
  dim = validation.as_dim(dim)
  if num_canaries * ORTHOGONALITY_RATIO > dim:
    warnings.warn(
        f"{num_canaries} canaries for a model of dim = {dim}: more than "
        f"dim / {ORTHOGONALITY_RATIO} = {dim / ORTHOGONALITY_RATIO:g}. Random "
        f"canaries have pairwise cosines ~ N(0, 1/dim); their cross-talk adds "
        f"a noise multiplier of about sqrt(k/dim) = "
        f"{np.sqrt(num_canaries / dim):.3g} to the statistics. Use fewer "
        "canaries or a larger model.", TooManyCanariesWarning, stacklevel=3)
    return True
  return False


# ---------------------------------------------------------------------------
# Flat layout of a value structure.


def tensor_specs_dim(specs: Any) -> int:
  """d: total number of elements of a structure of `tf.TensorSpec`s.

  Raises:
    TypeError: for a non-floating dtype.
    ValueError: for a shape that is not fully defined, or d < 2.
  """
  total = 0
  for i, spec in enumerate(tf.nest.flatten(specs)):
    if not isinstance(spec, tf.TensorSpec):
      raise TypeError(f"value leaf {i} must be a tensor, got {spec!r}.")
    if not spec.dtype.is_floating:
      raise TypeError(f"value leaf {i} has dtype {spec.dtype.name}; canaries "
                      "need floating-point values (model weights).")
    if not spec.shape.is_fully_defined():
      raise ValueError(f"value leaf {i} has shape {spec.shape}, which is not "
                       "fully defined.")
    total += spec.shape.num_elements()
  return validation.as_dim(total, "dim (number of elements of the value)")


def flatten_value(value: Any) -> tf.Tensor:
  """One flat float32 vector of a structure, in `tf.nest.flatten` order."""
  leaves = [tf.reshape(tf.cast(x, tf.float32), [-1])
            for x in tf.nest.flatten(value)]
  if not leaves:
    return tf.zeros([0], tf.float32)
  return tf.concat(leaves, axis=0)


def unflatten_value(flat: tf.Tensor, specs: Any) -> Any:
  """Splits a flat vector into the structure of `specs` (shapes and dtypes)."""
  leaves = tf.nest.flatten(specs)
  sizes = [spec.shape.num_elements() for spec in leaves]
  parts = tf.split(flat, sizes) if leaves else []
  parts = [tf.cast(tf.reshape(p, spec.shape), spec.dtype)
           for p, spec in zip(parts, leaves)]
  return tf.nest.pack_sequence_as(specs, parts)


def flatten_numpy(value: Any, name: str = "value") -> np.ndarray:
  """A structure of arrays (or one array) as a flat float32 NumPy vector.

  The order is `tf.nest.flatten`'s, as in the aggregation process. A 1-D array
  is taken as already flat.
  """
  leaves = tf.nest.flatten(value)
  if not leaves:
    raise ValueError(f"{name} is empty.")
  arrays = []
  for i, leaf in enumerate(leaves):
    try:
      array = np.asarray(leaf)
    except Exception as e:  # pylint: disable=broad-except
      raise TypeError(f"{name} leaf {i} is not an array: {e}") from None
    if not (np.issubdtype(array.dtype, np.floating)
            or np.issubdtype(array.dtype, np.integer)):
      raise TypeError(f"{name} leaf {i} must be numeric, got dtype "
                      f"{array.dtype}.")
    arrays.append(array.astype(np.float32, copy=False).reshape(-1))
  flat = np.concatenate(arrays) if len(arrays) > 1 else arrays[0].copy()
  if not np.all(np.isfinite(flat)):
    raise ValueError(f"{name} has non-finite entries.")
  return flat


# ---------------------------------------------------------------------------
# Generation.


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
