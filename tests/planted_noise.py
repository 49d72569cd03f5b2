"""Planted noise bugs for the noise self-test (tests and bench only).

Each is a tensorflow_privacy `GaussianSumQuery` subclass that claims the usual
DpEvent GaussianDpEvent(stddev / l2_norm_clip) but draws its noise wrongly,
from a per-trial seed and a round counter kept in its global state; wrapped
in `tfp.NormalizedQuery` inside TFF's own `DifferentiallyPrivateFactory`:

  * "prefix_reuse": one stateless seed per round for ALL tensors,
    `tf.random.stateless_normal(shape, seed=[s, round])`: each tensor's noise
    is a prefix of the largest one's (the bug a review found in the
    experiments' seeded noise);
  * "std_over_10": the right draws with std / 10;
  * "same_every_round": a constant seed per tensor, the same noise every
    round;
  * "correct": seed (s, round, tensor), the right std: the control, which
    must pass.
"""

from __future__ import annotations

import collections

import dp_accounting
import tensorflow as tf
import tensorflow_federated as tff
import tensorflow_privacy as tfp

BUGS = ("prefix_reuse", "std_over_10", "same_every_round")
KINDS = BUGS + ("correct",)
MLP_SHAPES = ((784, 128), (128,), (128, 5), (5,))
_TENSORS_PER_ROUND = 1 << 16


class PlantedQuery(tfp.GaussianSumQuery):
  """GaussianSumQuery with seeded noise drawn the way `kind` says."""

  _GlobalState = collections.namedtuple(  # pylint: disable=invalid-name
      "_GlobalState", ["l2_norm_clip", "stddev", "round_num"])

  def __init__(self, l2_norm_clip, stddev, *, kind: str, seed: int):
    if kind not in KINDS:
      raise ValueError(f"kind must be one of {KINDS}, got {kind!r}.")
    super().__init__(l2_norm_clip, stddev)
    self._kind = kind
    self._seed = seed

  def make_global_state(self, l2_norm_clip, stddev, round_num=0):
    return self._GlobalState(tf.cast(l2_norm_clip, tf.float32),
                             tf.cast(stddev, tf.float32),
                             tf.constant(round_num, tf.int64))

  def _noise(self, shape, dtype, index, global_state):
    round_num = global_state.round_num
    stddev = global_state.stddev
    if self._kind == "prefix_reuse":
      counter = round_num
    elif self._kind == "same_every_round":
      counter = tf.constant(index, tf.int64)
    else:
      counter = round_num * _TENSORS_PER_ROUND + index
    if self._kind == "std_over_10":
      stddev = stddev / 10.0
    seed = tf.stack([tf.constant(self._seed, tf.int64), counter])
    return tf.random.stateless_normal(shape, seed=seed, stddev=stddev,
                                      dtype=dtype)

  def get_noised_result(self, sample_state, global_state):
    flat = tf.nest.flatten(sample_state)
    noised = [v + self._noise(tf.shape(v), v.dtype, k, global_state)
              for k, v in enumerate(flat)]
    result = tf.nest.pack_sequence_as(sample_state, noised)
    new_state = global_state._replace(round_num=global_state.round_num + 1)
    event = dp_accounting.GaussianDpEvent(global_state.stddev /
                                          global_state.l2_norm_clip)
    return result, new_state, event


def planted_factory(kind: str, *, seed: int, noise_multiplier: float = 1.0,
                    clip: float = 0.5, clients_per_round: float = 10.0):
  """TFF's DifferentiallyPrivateFactory around a `PlantedQuery`."""
  query = tfp.NormalizedQuery(
      PlantedQuery(clip, clip * noise_multiplier, kind=kind, seed=seed),
      denominator=clients_per_round)
  return tff.aggregators.DifferentiallyPrivateFactory(query)


def value_type(shapes=MLP_SHAPES):
  """A model-like value type: float32 tensors of the given shapes."""
  import numpy as np  # pylint: disable=g-import-not-at-top
  return tff.types.to_type([(np.float32, s) for s in shapes])
