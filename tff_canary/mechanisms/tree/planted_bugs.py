"""Planted DP-FTRL bugs as a user would write them: tree queries.

The TFF counterparts of `tff_canary.stats.correlated.tree_simulation`'s four
bugs (docs/method/dp-ftrl.md, "Planted bugs": what each breaks, what catches
it), each an ordinary user-side subclass of a public tensorflow_privacy class
(`tfp.TreeResidualSumQuery`, `tfp.tree_aggregation.TreeAggregator` /
`EfficientTreeAggregator`) or of a canary schedule; no TFF or
tensorflow_privacy module is patched:

* `RestartReuseTreeQuery` ("restart_reuse"): its `reset_state` starts the
  new tree from `initial_global_state()`, whose noise generator is
  re-initialized: with a `noise_seed` every restarted tree draws the first
  tree's node noises again (tensorflow_privacy's own `reset_state` keeps the
  generator state running).
* `MissingLevelTreeQuery` ("missing_level"): node noises multiplied by a
  per-level scale that is 0 at level `tree_simulation.MISSING_LEVEL` (1)
  (`ScaledLevelTreeAggregator`, `ScaledLevelEfficientTreeAggregator`).
* `HalvedVarianceTreeQuery` ("efficient_scale"): an efficient tree whose
  internal nodes' own noise is drawn with std sigma / sqrt(2), as if
  `EfficientTreeAggregator`'s variance reduction (its docstring: node std
  "roughly sigma sqrt(2^{d-1} / (2^d - 1))") had to be applied by hand.
* "double_participation", the client sampler's bug (a second round per
  epoch for each canary while the audit is told `schedules.ShuffledEpochs`),
  is the correlated family's `mechanisms.correlated.planted.TwicePerEpoch`.

and one without a counterpart in the one-tensor `tree_simulation`:

* `CrossTensorReuseTreeQuery` ("cross_tensor_reuse"): its
  `SharedSeedNoiseGenerator` draws each node's noise for every tensor from
  ONE seed, as the prefix of one draw of the largest tensor's size
  (tensorflow_privacy's `GaussianNoiseGenerator` gives tensor i the seed
  `seeds + i`). Every coordinate has the claimed law, over the rounds too;
  each smaller tensor's noise copies the larger one's first values, which
  the tree self-test's `prefix[a,b]` and exact-reuse tests find
  (`correlated.noise_check`, per tensor).

`PlantedTreeAggregation` is `aggregation.TreeAggregation` with one of the
noise bugs planted in the query its `sum_query` builds; its `noise(T)` is the
CLAIMED (correct) tree. tests/mechanisms/tree/test_planted_bugs.py checks each bug's
released-noise coefficients against `tree_simulation.planted_noise`.
"""

from __future__ import annotations

import dataclasses
import importlib
import math
from typing import Any, Callable
import warnings

import numpy as np
import tensorflow as tf
import tensorflow_privacy as tfp

from tff_canary.federated.runtime import worker_guard
from tff_canary.mechanisms.tree import aggregation
from tff_canary.stats import validation
from tff_canary.stats.correlated import tree_simulation

worker_guard.install()

NOISE_BUGS = ("restart_reuse", "missing_level", "efficient_scale")
# Bugs between the tensors of a value, which the one-tensor simulation lacks.
TENSOR_BUGS = ("cross_tensor_reuse",)

LevelScale = Callable[[tf.Tensor], tf.Tensor]


def missing_level_scale(level: tf.Tensor) -> tf.Tensor:
  """0 at level `tree_simulation.MISSING_LEVEL`, else 1."""
  return tf.where(tf.equal(level, tree_simulation.MISSING_LEVEL), 0.0, 1.0)


def halved_variance_scale(level: tf.Tensor) -> tf.Tensor:
  """1 / sqrt(2) at levels >= 1 (internal nodes), 1 at the leaves."""
  return tf.where(level >= 1, 1.0 / math.sqrt(2.0), 1.0)


class ScaledLevelTreeAggregator(tfp.tree_aggregation.TreeAggregator):
  """The plain tree, each new node's noise times `level_scale(its level)`.

  The plain tree draws one node per step, at the level it creates
  (`level_buffer_idx[0]` after the update, `level_buffer[0]` its value);
  the first leaf, drawn at (re)initialization, keeps its noise (level 0).
  """

  def __init__(self, value_generator, level_scale: LevelScale):
    super().__init__(value_generator)
    self.level_scale = level_scale

  def get_cumsum_and_update(self, state):
    cumsum, new_state = super().get_cumsum_and_update(state)
    levels = new_state.level_buffer_idx
    first = tf.cast(self.level_scale(levels[0]), tf.float32)
    scale = tf.concat([[first], tf.ones(tf.shape(levels)[0] - 1)], axis=0)

    def rescale(buffer):
      shape = tf.concat([[-1], tf.ones(tf.rank(buffer) - 1, tf.int32)], 0)
      return buffer * tf.reshape(scale, shape)

    buffer = tf.nest.map_structure(rescale, new_state.level_buffer)
    return cumsum, new_state._replace(level_buffer=buffer)


class LevelScaledNoiseGenerator(tfp.tree_aggregation.ValueGenerator):
  """`generator`'s draws times `level_scale(level)`, in the efficient tree's
  draw order.

  `EfficientTreeAggregator` draws its nodes in post-order: each step's new
  leaf (level 0), then each node it completes, upward. So a node drawn at
  level k with m leaves drawn is a right child, and its parent (level k + 1)
  is drawn next, when the bit k of m is 0; else the next draw is a leaf. The
  state is (`generator`'s state, m, the next draw's level).
  """

  def __init__(self, generator, level_scale: LevelScale):
    self.generator, self.level_scale = generator, level_scale

  def initialize(self):
    return self.restart(self.generator.initialize())

  def restart(self, generator_state):
    """The state of a new tree, `generator` going on from `generator_state`."""
    return generator_state, tf.constant(0), tf.constant(0)

  def next(self, state):
    generator_state, leaves, level = state
    noise, generator_state = self.generator.next(generator_state)
    scale = tf.cast(self.level_scale(level), tf.float32)
    leaves += tf.cast(tf.equal(level, 0), tf.int32)
    right_child = tf.equal(tf.bitwise.right_shift(leaves, level) % 2, 0)
    return (tf.nest.map_structure(lambda n: scale * n, noise),
            (generator_state, leaves, tf.where(right_child, level + 1, 0)))


class ScaledLevelEfficientTreeAggregator(
    tfp.tree_aggregation.EfficientTreeAggregator):
  """The efficient tree, each node's OWN noise times `level_scale(its
  level)` (its generator a `LevelScaledNoiseGenerator`, restarted with each
  new tree)."""

  def __init__(self, value_generator, level_scale: LevelScale):
    super().__init__(LevelScaledNoiseGenerator(value_generator, level_scale))

  def reset_state(self, state):
    generator_state = self.value_generator.restart(
        state.value_generator_state[0])
    return super().reset_state(
        state._replace(value_generator_state=generator_state))


class RestartReuseTreeQuery(tfp.TreeResidualSumQuery):
  """A restart that starts over from the initial state (module docstring)."""

  def reset_state(self, noised_results, global_state):
    del noised_results
    fresh = self.initial_global_state()
    return fresh._replace(clip_value=global_state.clip_value)


class _LevelScaledQuery(tfp.TreeResidualSumQuery):
  """A tree query whose aggregator scales node noise by `LEVEL_SCALE`."""

  LEVEL_SCALE: LevelScale = staticmethod(lambda level: 1.0)

  def __init__(self, record_specs, noise_generator, clip_fn, clip_value,
               use_efficient=True):
    super().__init__(record_specs, noise_generator, clip_fn, clip_value,
                     use_efficient=use_efficient)
    aggregator = (ScaledLevelEfficientTreeAggregator if use_efficient
                  else ScaledLevelTreeAggregator)
    self._tree_aggregator = aggregator(noise_generator, self.LEVEL_SCALE)


class MissingLevelTreeQuery(_LevelScaledQuery):
  """Level-1 nodes get no noise (module docstring)."""

  LEVEL_SCALE = staticmethod(missing_level_scale)


class HalvedVarianceTreeQuery(_LevelScaledQuery):
  """The efficient tree's internal nodes' own noise at sigma / sqrt(2)."""

  LEVEL_SCALE = staticmethod(halved_variance_scale)

  def __init__(self, record_specs, noise_generator, clip_fn, clip_value,
               use_efficient=True):
    if not use_efficient:
      raise ValueError("HalvedVarianceTreeQuery plants a bug of the "
                       "efficient tree; use_efficient must be True.")
    super().__init__(record_specs, noise_generator, clip_fn, clip_value,
                     use_efficient=True)


class SharedSeedNoiseGenerator(tfp.tree_aggregation.GaussianNoiseGenerator):
  """Each node's noise for every tensor from one seed (module docstring)."""

  def next(self, state):
    flat = tf.nest.flatten(self._specs)
    sizes = [int(np.prod(spec.shape)) for spec in flat]
    draw = tf.random.stateless_normal(shape=[max(sizes)], seed=state.seeds,
                                      stddev=state.stddev)
    noise = [tf.reshape(draw[:n], spec.shape) for n, spec in zip(sizes, flat)]
    return (tf.nest.pack_sequence_as(self._specs, noise),
            self._GlobalState(state.seeds + 1, state.stddev))


class CrossTensorReuseTreeQuery(tfp.TreeResidualSumQuery):
  """A tree query over `SharedSeedNoiseGenerator` (module docstring)."""

  @classmethod
  def build_l2_gaussian_query(cls, clip_norm, noise_multiplier, record_specs,
                              noise_seed=None, use_efficient=True):
    """tensorflow_privacy's constructor with the shared-seed generator."""
    generator = SharedSeedNoiseGenerator(
        noise_std=clip_norm * noise_multiplier, specs=record_specs,
        seed=noise_seed)

    def l2_clip_fn(record_as_list, clip_norm):
      clipped_record, _ = tf.clip_by_global_norm(record_as_list, clip_norm)
      return clipped_record

    return cls(clip_fn=l2_clip_fn, clip_value=clip_norm,
               record_specs=record_specs, noise_generator=generator,
               use_efficient=use_efficient)


QUERIES = {"restart_reuse": RestartReuseTreeQuery,
           "missing_level": MissingLevelTreeQuery,
           "efficient_scale": HalvedVarianceTreeQuery,
           "cross_tensor_reuse": CrossTensorReuseTreeQuery}


@dataclasses.dataclass(frozen=True)
class PlantedTreeAggregation(aggregation.TreeAggregation):
  """`aggregation.TreeAggregation` (fixed clip) with a noise bug planted.

  Attributes:
    bug: one of `NOISE_BUGS` or `TENSOR_BUGS`, or "none" (the correct
      query).
  """

  bug: str = "none"

  def __post_init__(self):
    super().__post_init__()
    validation.as_choice(self.bug, "bug",
                         ("none",) + NOISE_BUGS + TENSOR_BUGS)
    if self.adaptive is not None:
      raise ValueError("PlantedTreeAggregation plants bugs in the fixed-clip "
                       "tree; adaptive must be None.")
    if self.bug == "restart_reuse" and (self.restart_period is None
                                        or self.noise_seed is None):
      raise ValueError("bug 'restart_reuse' needs restarts (restart_period) "
                       "and a noise_seed: an unseeded generator draws a new "
                       "seed from the clock at every initialization.")
    if self.bug == "efficient_scale" and not self.efficient:
      raise ValueError("bug 'efficient_scale' plants a bug of the efficient "
                       "tree; efficient must be True.")

  def sum_query(self, record_specs: Any) -> tfp.DPQuery:
    """`TreeAggregation.sum_query` with the bug's query class."""
    if self.bug == "none":
      return super().sum_query(record_specs)
    return self.with_restarts(QUERIES[self.bug].build_l2_gaussian_query(
        self.clip, self.noise_multiplier, record_specs,
        noise_seed=self.noise_seed, use_efficient=self.efficient))


def __getattr__(name: str):
  """`TwicePerEpoch`, which every correlated mechanism's runs plant, through
  this module (and its 0.1.0 path `federated.audit.planted_tree_bugs`) for
  one release (docs/changelog.md)."""
  if name == "TwicePerEpoch":
    new = "tff_canary.mechanisms.correlated.planted"
    warnings.warn(f"{__name__}.{name} is {new}.{name}.", DeprecationWarning,
                  stacklevel=2)
    return getattr(importlib.import_module(new), name)
  raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = ["CrossTensorReuseTreeQuery", "HalvedVarianceTreeQuery",
           "MissingLevelTreeQuery", "NOISE_BUGS", "PlantedTreeAggregation",
           "LevelScaledNoiseGenerator", "QUERIES", "RestartReuseTreeQuery",
           "ScaledLevelEfficientTreeAggregator", "ScaledLevelTreeAggregator",
           "SharedSeedNoiseGenerator", "TENSOR_BUGS",
           "halved_variance_scale", "missing_level_scale"]
