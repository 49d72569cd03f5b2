"""The flat layout of a value structure: one vector in `tf.nest.flatten` order.

A canary (docs/method/canaries.md), a recorded aggregate and the weights the
cosines are taken with are flat vectors of the value's d elements (the
model's trainable weights), in the order of `tf.nest.flatten`.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import tensorflow as tf

from tff_canary.stats import validation


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


def flatten_numpy(value: Any, name: str = "value",
                  finite: bool = True) -> np.ndarray:
  """A structure of arrays (or one array) as a flat float32 NumPy vector.

  The order is `tf.nest.flatten`'s, as in the aggregation process. A 1-D array
  is taken as already flat. With `finite`, NaN or inf entries are an error.
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
  if finite and not np.all(np.isfinite(flat)):
    raise ValueError(f"{name} has non-finite entries.")
  return flat


def weights_pair(initial_weights: Any, final_weights: Any
                 ) -> tuple[np.ndarray, np.ndarray, int]:
  """(theta_0, theta_T, dim) as float64 vectors, of the same size.

  Each may be `ModelWeights` (its `trainable` part is the aggregated value),
  a structure of arrays in the order of the aggregated value, or a flat
  vector.
  """
  flat = []
  for weights, name in ((initial_weights, "initial_weights"),
                        (final_weights, "final_weights")):
    if hasattr(weights, "trainable") and hasattr(weights, "non_trainable"):
      weights = weights.trainable
    flat.append(flatten_numpy(weights, name).astype(np.float64))
  theta0, theta_t = flat
  if theta0.shape != theta_t.shape:
    raise ValueError(f"initial_weights has dim = {theta0.size}, final_weights "
                     f"dim = {theta_t.size}.")
  return theta0, theta_t, validation.as_dim(theta0.size,
                                            "dim (of the weights)")
