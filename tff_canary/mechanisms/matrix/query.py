"""Matrix-factorization DP-FTRL as a tensorflow_privacy `DPQuery`.

DP-FTRL in streaming form (Choquette-Choo et al. 2023, "(Amplified) Banded
Matrix Factorization: A unified approach to private training", arXiv
2306.08153; Denisov et al. 2022, arXiv 2202.08312) releases round t's clipped
sum plus w_t, row t of C^-1 xi, for a lower-triangular Toeplitz strategy C
and xi_t i.i.d. N(0, (z C_clip)^2) per coordinate. `MatrixFactorizationQuery`
adds w_t, generated round by round from a few past vectors kept in its
global state, with the recurrences of `tff_canary.stats.matrix.streaming`:

* banded C, b bands (`banded`, `banded_square_root`): w_t = (xi_t - sum_{i=1}
  ^{b-1} c_i w_{t-i}) / c_0, the b - 1 last w kept (O(b d) state);
* BLT C (`blt`; Dvijotham et al. 2024, arXiv 2404.16706; McMahan, Xu &
  Zhang 2024, arXiv 2408.08868, Alg. 3): w_t = xi_t - sum_i omega_i s_i,
  then s_i <- theta_i s_i + w_t, one buffer per pair (O(m d) state).

With `restart_every` = E the buffers are zeroed before rounds 0, E, 2E, ...:
the noise is C_E^-1 per block of E rounds, what
`tff_canary.stats.matrix.strategy_noise.strategy_noise(c, n, restart_every=E)`
describes (one participation per epoch, a block's accounting). A
`tfp.RestartQuery` around the query restarts it too (`reset_state`).

Fresh noise. xi_t is the noise a Gaussian sum query of stddev z C_clip adds
to a zero sum on its t-th call: `seeded_query.SeededGaussianSumQuery(clip,
z clip, noise_seed, stream)` with a `noise_seed` (its draw counter in the
global state, so a checkpointed state resumes the stream and a seeded run
is bitwise reproducible; its keys never meet a canary's), else
`tfp.GaussianSumQuery`, unseeded as in TFF. Clipping (L2, to the clip) is
that query's. Seeded noise is for simulation only: whoever knows the seed
can subtract the noise.

Accounting. The release is the Gaussian mechanism x -> C x + xi, of
sensitivity max_a ||C a|| over the participation patterns
(`tff_canary.stats.matrix.sensitivity`; the epsilon:
`tff_canary.stats.matrix.analytical.matrix_epsilon`). That is a property of
the whole stream and of the clients' participation, not of one round, so the
per-round DpEvent is `dp_accounting.UnsupportedDpEvent`, as the tree
queries'.

It is an ordinary `tfp.DPQuery`: TFF's own
`tff.aggregators.DifferentiallyPrivateFactory(tfp.NormalizedQuery(query,
clients_per_round))` runs BLT or banded DP-FTRL without canaries;
`matrix_factory.MatrixAggregation` describes it to `CanaryDPFactory`.
"""

from __future__ import annotations

import collections
from typing import Any, Optional

import dp_accounting
import numpy as np
import tensorflow as tf
import tensorflow_privacy as tfp

from tff_canary.federated.insertion import seeded_query
from tff_canary.stats import validation
from tff_canary.stats.canaries import schedules
from tff_canary.stats.matrix import blt as blt_lib
from tff_canary.stats.matrix import toeplitz


def _record_specs(record_specs: Any) -> Any:
  flat = tf.nest.flatten(record_specs)
  if not flat or not all(isinstance(s, tf.TensorSpec) and s.dtype.is_floating
                         and s.shape.is_fully_defined() for s in flat):
    raise TypeError(f"record_specs must be a nest of fully defined float "
                    f"tf.TensorSpecs (the model's), got "
                    f"{validation.show(record_specs)}.")
  return record_specs


class MatrixFactorizationQuery(tfp.SumAggregationDPQuery):
  """Adds row t of C^-1 xi to round t's clipped sum (module docstring).

  Build it with `banded`, `banded_square_root` or `blt`. Global state: the
  fresh-noise query's state, the round counter and the buffers: for each
  tensor of `tf.nest.flatten(record)`, a tuple of m tensors of its shape
  (the b - 1 past w, newest first, or the m BLT buffers s_i). Separate
  tensors, not one [m, ...] stack: the banded shift is then a re-ordering,
  where a stack would be copied whole every round.
  """

  # pylint: disable=invalid-name
  _GlobalState = collections.namedtuple(
      "_GlobalState", ["fresh_state", "round", "buffers"])

  def __init__(self, record_specs: Any, l2_norm_clip: float,
               noise_multiplier: float, *,
               coefficients: Optional[Any] = None,
               strategy: Optional[blt_lib.BLT] = None,
               noise_seed: Optional[int] = None, stream: int = 0,
               restart_every: Optional[int] = None):
    """Initializes the query; prefer the named constructors.

    Args:
      record_specs: The nest of `tf.TensorSpec`s of a record (the model).
      l2_norm_clip: C_clip > 0.
      noise_multiplier: z >= 0; xi's std is z C_clip.
      coefficients: For a banded C: c_0 .. c_{b-1}.
      strategy: For a BLT C: the `blt.BLT`. Exactly one of the two.
      noise_seed: None (unseeded) or the seed of xi (module docstring).
      stream: >= 0, separates queries of one `noise_seed`.
      restart_every: None, or E >= 1: the buffers restart every E rounds.

    Raises:
      TypeError, ValueError: for a bad argument, naming it.
    """
    self._record_specs = _record_specs(record_specs)
    self._clip = validation.as_positive(l2_norm_clip, "l2_norm_clip")
    self._noise_multiplier = validation.as_nonnegative(noise_multiplier,
                                                       "noise_multiplier")
    if (coefficients is None) == (strategy is None):
      raise ValueError("give exactly one of coefficients (banded C) and "
                       "strategy (BLT C).")
    if strategy is not None and not isinstance(strategy, blt_lib.BLT):
      raise TypeError(f"strategy must be a BLT (tff_canary.stats.matrix.blt."
                      f"blt), got {validation.show(strategy)}.")
    self._coefficients = (None if coefficients is None
                          else toeplitz.as_coefficients(coefficients))
    self._strategy = strategy
    self._restart_every = (None if restart_every is None else
                           validation.as_int(restart_every, "restart_every",
                                             minimum=1))
    stddev = self._noise_multiplier * self._clip
    if noise_seed is None:
      self._noise_seed = None
      self._fresh = tfp.GaussianSumQuery(self._clip, stddev)
    else:
      self._noise_seed = schedules.as_seed(noise_seed, "noise_seed")
      self._fresh = seeded_query.SeededGaussianSumQuery(
          self._clip, stddev, self._noise_seed, stream=stream)

  @classmethod
  def banded(cls, record_specs: Any, l2_norm_clip: float,
             noise_multiplier: float, coefficients: Any,
             **kwargs) -> "MatrixFactorizationQuery":
    """A banded Toeplitz C of coefficients c_0 .. c_{b-1} (b bands).

    Streaming noise of Choquette-Choo et al. 2023 (arXiv 2306.08153, Alg. 9
    for Toeplitz C): keeps the b - 1 last noise rows. Keyword arguments:
    `noise_seed`, `stream`, `restart_every` (`__init__`).
    """
    return cls(record_specs, l2_norm_clip, noise_multiplier,
               coefficients=coefficients, **kwargs)

  @classmethod
  def banded_square_root(cls, record_specs: Any, l2_norm_clip: float,
                         noise_multiplier: float, bands: int,
                         **kwargs) -> "MatrixFactorizationQuery":
    """The b-banded square root of the prefix sums: c_i = binom(2i, i)/4^i.

    Choquette-Choo et al. 2023 (arXiv 2306.08153), banded; the full square
    root (Fichtenberger, Henzinger & Upadhyay 2023, arXiv 2202.11205) for
    `bands` = rounds (`toeplitz.square_root_coefficients`).
    """
    return cls.banded(record_specs, l2_norm_clip, noise_multiplier,
                      toeplitz.square_root_coefficients(bands), **kwargs)

  @classmethod
  def blt(cls, record_specs: Any, l2_norm_clip: float,
          noise_multiplier: float, strategy: blt_lib.BLT,
          **kwargs) -> "MatrixFactorizationQuery":
    """A BLT C: c_0 = 1, c_t = sum_i omega_i theta_i^(t-1).

    Dvijotham et al. 2024 (arXiv 2404.16706); the noise C^-1 xi streamed
    with one buffer per pair, McMahan, Xu & Zhang 2024 (arXiv 2408.08868,
    Alg. 3). `strategy`: `blt.blt(output_scale, buf_decay)` or a fitted one
    (`blt_fit.fit_blt(...).strategy`).
    """
    return cls(record_specs, l2_norm_clip, noise_multiplier,
               strategy=strategy, **kwargs)

  @property
  def noise_multiplier(self) -> float:
    return self._noise_multiplier

  @property
  def noise_seed(self) -> Optional[int]:
    return self._noise_seed

  @property
  def restart_every(self) -> Optional[int]:
    return self._restart_every

  def coefficients(self, rounds: int) -> np.ndarray:
    """C's c_0 .. c_{rounds-1} (zeros past a banded C's bands)."""
    if self._strategy is not None:
      return self._strategy.coefficients(rounds)
    return toeplitz.padded(self._coefficients, rounds)

  @property
  def num_buffers(self) -> int:
    """Vectors of the model's size kept: b - 1 (banded) or m (BLT)."""
    if self._strategy is not None:
      return self._strategy.num_buffers
    return self._coefficients.size - 1

  def _zero_buffers(self) -> tuple:
    return tuple(tuple(tf.zeros(spec.shape, spec.dtype)
                       for _ in range(self.num_buffers))
                 for spec in tf.nest.flatten(self._record_specs))

  def initial_global_state(self):
    return self._GlobalState(self._fresh.initial_global_state(),
                             tf.constant(0, tf.int64), self._zero_buffers())

  def derive_sample_params(self, global_state):
    return self._fresh.derive_sample_params(global_state.fresh_state)

  def preprocess_record(self, params, record):
    return self._fresh.preprocess_record(params, record)

  def _step(self, fresh: tf.Tensor, buffers: tuple) -> tuple:
    """(w_t, next buffers) from xi_t and one tensor's buffers."""
    def minus(weights):  # xi_t - sum_i weights_i buffers_i
      if not buffers:
        return fresh
      return fresh - tf.add_n([tf.cast(a, fresh.dtype) * b
                               for a, b in zip(weights, buffers)])

    if self._strategy is None:  # w = (xi - sum_i c_i w_{t-i}) / c_0
      c = self._coefficients
      w = minus(c[1:]) / tf.cast(c[0], fresh.dtype)
      return w, ((w,) + buffers)[:len(buffers)]
    w = minus(self._strategy.output_scale)
    return w, tuple(tf.cast(t, fresh.dtype) * s + w
                    for t, s in zip(self._strategy.buf_decay, buffers))

  def get_noised_result(self, sample_state, global_state):
    """The sum plus w_t; the buffers and counters advanced."""
    zeros = tf.nest.map_structure(tf.zeros_like, sample_state)
    fresh, fresh_state, _ = self._fresh.get_noised_result(
        zeros, global_state.fresh_state)
    buffers = global_state.buffers
    if self._restart_every is not None:
      buffers = tf.cond(
          tf.equal(global_state.round % self._restart_every, 0),
          self._zero_buffers, lambda: buffers)
    steps = [self._step(tf.cast(x, spec.dtype), tuple(b)) for x, b, spec in zip(
        tf.nest.flatten(fresh), buffers,
        tf.nest.flatten(self._record_specs))]
    result = tf.nest.pack_sequence_as(sample_state, [
        v + tf.cast(w, v.dtype) for v, (w, _) in zip(
            tf.nest.flatten(sample_state), steps)])
    new_state = self._GlobalState(fresh_state, global_state.round + 1,
                                  tuple(b for _, b in steps))
    return result, new_state, dp_accounting.UnsupportedDpEvent()

  def reset_state(self, noised_results, global_state):
    """The state with zeroed buffers (for `tfp.RestartQuery`)."""
    del noised_results
    return global_state._replace(buffers=self._zero_buffers())


__all__ = ["MatrixFactorizationQuery"]
