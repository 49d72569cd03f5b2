"""DP-FedAvg's planted bugs as a user would write them: buggy Gaussian queries.

Two of issue 10's bug classes, each an ordinary user-side `tfp.DPQuery` (no
TFF or tensorflow_privacy module is patched); what each run of them shows:
docs/guide/distributed-dp.md ("Each bug once in a real TFF run"). The third,
distributed DP's, is `tff_canary.mechanisms.ddp.planted_bugs`.

* `ClipBugQuery`: a Gaussian sum query that clips each record at
  `clip_factor` x C while its sample params, its global state and its
  DpEvent (`GaussianDpEvent(stddev / C)`) all say C: the effective noise
  multiplier is z / `clip_factor`.
* `NoiseReuseQuery`: a Gaussian sum query whose noise for every tensor is
  the prefix of ONE draw of the largest tensor's size (one Philox key for all
  tensors, the defect `seeded_query` avoids). Each coordinate's noise has
  the claimed variance.
"""

from __future__ import annotations

import dp_accounting
import tensorflow as tf

from tff_canary.federated.insertion import seeded_query
from tff_canary.federated.runtime import worker_guard
from tff_canary.stats import validation

worker_guard.install()


class ClipBugQuery(seeded_query.SeededGaussianSumQuery):
  """Records clipped at `clip_factor` x C; params, state, DpEvent say C."""

  def __init__(self, l2_norm_clip, stddev, noise_seed: int, *,
               clip_factor: float = 10.0, stream: int = 0):
    super().__init__(l2_norm_clip, stddev, noise_seed, stream)
    factor = validation.as_positive(clip_factor, "clip_factor")
    if factor < 1.0:
      raise ValueError(f"clip_factor must be >= 1, got {clip_factor}.")
    self._clip_factor = factor

  @property
  def clip_factor(self) -> float:
    return self._clip_factor

  def preprocess_record(self, params, record):
    return super().preprocess_record(self._clip_factor * params, record)


class NoiseReuseQuery(seeded_query.SeededGaussianSumQuery):
  """Every tensor's noise is a prefix of one draw (module docstring)."""

  def get_noised_result(self, sample_state, global_state):
    flat = tf.nest.flatten(sample_state)
    sizes = [v.shape.num_elements() for v in flat]
    if any(size is None for size in sizes):
      raise ValueError("NoiseReuseQuery needs fully defined tensor shapes, "
                       f"got {[v.shape for v in flat]}.")
    # pylint: disable=protected-access
    key = seeded_query._noise_key(self.noise_seed, self.stream,
                                  global_state.draw, 0)
    shared = tf.random.stateless_normal(
        [max(sizes)], seed=key, stddev=global_state.stddev, dtype=tf.float32,
        alg="philox")
    noised = [v + tf.cast(tf.reshape(shared[:size], tf.shape(v)), v.dtype)
              for v, size in zip(flat, sizes)]
    event = dp_accounting.GaussianDpEvent(
        global_state.stddev / global_state.l2_norm_clip)
    return (tf.nest.pack_sequence_as(sample_state, noised),
            global_state._replace(draw=global_state.draw + 1), event)


__all__ = ["ClipBugQuery", "NoiseReuseQuery"]
