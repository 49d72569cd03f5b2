"""Planted bugs of a matrix mechanism as a user would write them: queries.

The TFF counterparts of `tff_canary.stats.matrix.planted_strategies`, each a
user-side subclass of `matrix_query.MatrixFactorizationQuery` that changes
one line of its noise generator; nothing of TFF or tensorflow_privacy is
patched:

* `BuffersResetQuery` ("buffers_reset"): the generator's buffers (the
  banded query's past noises, the BLT's buffers) zeroed every `reset_every`
  rounds of an epoch, as if they were a local of the round and not part of
  the state (`reset_every` = 1: never carried);
* `ScaledCoefficientsQuery` ("coefficient_scale"): the generator's c_i,
  i >= 1, multiplied by `factor` (a BLT's output scales given in another
  convention, or a banded strategy's off-diagonal bands);
* `NoiseReuseQuery` ("noise_reuse"): the fresh-noise query's state put back
  to its initial value every `lag` rounds, so that with a `noise_seed` round
  t + lag draws round t's fresh noise again (a ring of `lag` seeds).

A client counted twice in an epoch is the sampler's bug
(`correlated.planted.TwicePerEpoch`), the same for every correlated noise.

`PlantedMatrixAggregation` is `matrix_aggregation.MatrixAggregation` whose
`sum_query` builds the planted query; its `noise(T)` is the CLAIMED noise
(the correct strategy's). tests/mechanisms/matrix/test_planted_bugs.py checks each query's
released noise against `planted_strategies.planted_noise`.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Optional

import numpy as np
import tensorflow as tf

from tff_canary.mechanisms.matrix import aggregation as matrix_aggregation
from tff_canary.mechanisms.matrix import query as matrix_query
from tff_canary.stats import validation
from tff_canary.stats.matrix import blt as blt_lib
from tff_canary.stats.matrix import planted_strategies


class BuffersResetQuery(matrix_query.MatrixFactorizationQuery):
  """Buffers zeroed every `reset_every` rounds of an epoch (module doc)."""

  def __init__(self, *args, reset_every: int = 1, **kwargs):
    super().__init__(*args, **kwargs)
    self._reset_every = validation.as_int(reset_every, "reset_every",
                                          minimum=1)

  def get_noised_result(self, sample_state, global_state):
    step = global_state.round
    if self.restart_every is not None:
      step = step % self.restart_every
    buffers = tf.cond(tf.equal(step % self._reset_every, 0),
                      self._zero_buffers, lambda: global_state.buffers)
    return super().get_noised_result(
        sample_state, global_state._replace(buffers=buffers))


class ScaledCoefficientsQuery(matrix_query.MatrixFactorizationQuery):
  """The generator's c_i, i >= 1, times `factor` (module docstring)."""

  def __init__(self, *args, factor: float = 0.5, **kwargs):
    super().__init__(*args, **kwargs)
    factor = validation.as_positive(factor, "factor")
    if self._strategy is not None:
      self._strategy = blt_lib.blt(factor * self._strategy.output_scale,
                                   self._strategy.buf_decay)
    else:
      c = self._coefficients
      self._coefficients = np.concatenate([c[:1], factor * c[1:]])


class NoiseReuseQuery(matrix_query.MatrixFactorizationQuery):
  """The fresh noise's state reset every `lag` rounds (module docstring)."""

  def __init__(self, *args, lag: int = 8, **kwargs):
    super().__init__(*args, **kwargs)
    self._lag = validation.as_int(lag, "lag", minimum=1)

  def get_noised_result(self, sample_state, global_state):
    fresh = tf.cond(tf.equal(global_state.round % self._lag, 0),
                    self._fresh.initial_global_state,
                    lambda: global_state.fresh_state)
    return super().get_noised_result(
        sample_state, global_state._replace(fresh_state=fresh))


QUERIES = {"none": matrix_query.MatrixFactorizationQuery,
           "buffers_reset": BuffersResetQuery,
           "coefficient_scale": ScaledCoefficientsQuery,
           "noise_reuse": NoiseReuseQuery}


@dataclasses.dataclass(frozen=True)
class PlantedMatrixAggregation(matrix_aggregation.MatrixAggregation):
  """`MatrixAggregation` with `bug` planted in its query (module docstring).

  Attributes (beside `MatrixAggregation`'s):
    bug: one of `planted_strategies.BUGS`.
    reset_every, factor, lag: the bug's argument (`planted_strategies.
      planted_noise`); `lag` defaults to half of `restart_every`.
  """

  bug: str = "none"
  reset_every: int = 1
  factor: float = 0.5
  lag: Optional[int] = None

  def __post_init__(self):
    super().__post_init__()
    validation.as_choice(self.bug, "bug", planted_strategies.BUGS)
    if self.bug == "none":
      return
    if self.restart_every is None or self.noise_seed is None:
      raise ValueError(f"bug {self.bug!r} is planted in a query restarted "
                       "every epoch with a noise_seed; give restart_every "
                       f"and noise_seed, got {self.restart_every} and "
                       f"{self.noise_seed}.")
    # The NumPy description checks the bug's argument against the epoch.
    planted_strategies.planted_noise(
        self.coefficients_of(self.restart_every), 2 * self.restart_every,
        restart_every=self.restart_every, bug=self.bug, **self._argument())

  def _argument(self) -> dict[str, Any]:
    return {"buffers_reset": dict(reset_every=self.reset_every),
            "coefficient_scale": dict(factor=self.factor),
            "noise_reuse": dict(lag=self.lag or self.restart_every // 2),
            "none": {}}[self.bug]

  def sum_query(self, record_specs: Any
                ) -> matrix_query.MatrixFactorizationQuery:
    """The planted query for values of `record_specs`."""
    return QUERIES[self.bug](
        record_specs, self.clip, self.noise_multiplier,
        coefficients=self.coefficients, strategy=self.strategy,
        noise_seed=self.noise_seed, restart_every=self.restart_every,
        **self._argument())

  def released_noise(self, num_rounds: int):
    """The noise the planted query really releases, in units of z C
    (`planted_strategies.planted_noise`)."""
    return planted_strategies.planted_noise(
        self.coefficients_of(num_rounds), num_rounds,
        restart_every=self.restart_every, bug=self.bug, **self._argument())


__all__ = ["BuffersResetQuery", "NoiseReuseQuery", "PlantedMatrixAggregation",
           "QUERIES", "ScaledCoefficientsQuery"]
