"""tensorflow_privacy DP queries whose Gaussian noise comes from a seed.

`SeededGaussianSumQuery` is `tfp.GaussianSumQuery` (clip each record to L2 norm
C, add N(0, sigma^2 I) to the sum; McMahan et al., ICLR 2018,
https://arxiv.org/abs/1710.06963), and `SeededQuantileAdaptiveClipSumQuery` is
`tfp.QuantileAdaptiveClipSumQuery` (the same with the geometric adaptive clip
of Andrew et al. 2021, https://arxiv.org/abs/1905.03871), except that the
noise is a deterministic function of an explicit `noise_seed`: clipping,
results, global state (plus one counter), metrics and DpEvents are the
parents'.

What a seed means. Each query has a `noise_seed` s and a `stream` k (two
queries of one seed must have different streams). Its global state carries an
int64 counter `draw` (0 initially, +1 per `get_noised_result`), so draw t is
the t-th noising of that query. Tensor i of `tf.nest.flatten(sample_state)`
gets the noise

    tf.random.stateless_normal(tf.shape(v_i), seed=key_i, stddev=sigma,
                               alg="philox")
    key_i = fold(fold(fold([s, NOISE_TAG], k), t), i)

where fold is `tf.random.experimental.stateless_fold_in(., int64 data,
alg="philox")`. A fold-in returns [h, data], h a 64-bit pseudo-random function
of its input seed, so key_i = [h(s, k, t), i]: the keys of one seed are
distinct for distinct (k, t, i) (unless two 64-bit hashes collide,
probability 2^-64). TF turns a seed pair into the Philox key and starting
counter through one Philox block, a bijection, so distinct keys start
unrelated streams: no tensor's noise is a prefix or a shifted copy of
another's, within a draw or across draws (the failure of reusing ONE key for
every tensor: each tensor's noise is then a prefix of the largest one's).
Because the counter lives in the global state, a checkpointed state resumes
the stream: the same seed, the same rounds and the same records give bitwise
the same results.

Canaries (`canary_directions`) are `stateless_normal([d], seed=[canary_seed,
j])` with j >= 0; NOISE_TAG is negative, so the noise's base key is never a
canary's, even when canary_seed == noise_seed, and a noise key [h, i] meets
canary i only if a 64-bit hash h equals the canary seed (2^-64 per draw).
Seeded noise is for simulation only: whoever knows the seed can subtract the
noise (a deployment passes `noise_seed=None` to `factory`).

DP-FTRL's adaptive tree query. tensorflow_privacy's `QAdaClipTreeResSumQuery`
(TFF's `tree_adaptive`; Kairouz et al. 2021, arXiv 2103.00039) seeds its
value tree (`TreeResidualSumQuery`) but builds the tree of the count below
the clip estimate (`TreeQuantileEstimatorQuery`) unseeded, so the clip
adopted at each restart comes from the clock. `SeededQAdaClipTreeResSumQuery`
seeds that tree from `noise_seed + COUNT_SEED_OFFSET`: its node keys [n, n]
start far above the value tree's [noise_seed + k L + i]
(`tff_canary.mechanisms.tree.aggregation`), so the two trees never share a
key in any run that fits in memory. It overrides
`_construct_below_estimate_query`, the extension point tensorflow_privacy's
own subclass uses (clip 0.5, noise multiplier 2 x
stddev), and replaces the estimator after the parent's constructor.

All these queries are ordinary `tfp.DPQuery`s: they work in `CanaryDPFactory`
and in TFF's own `tff.aggregators.DifferentiallyPrivateFactory`.
"""

from __future__ import annotations

import collections
from typing import Any

import dp_accounting
import tensorflow as tf
import tensorflow_privacy as tfp
from tensorflow_privacy.privacy.dp_query import quantile_estimator_query

from tff_canary.stats.canaries import schedules
from tff_canary.stats import validation

# Second component of the base key [noise_seed, NOISE_TAG] of every noise
# draw (module docstring). Never change it: seeded runs are regenerated
# from it.
NOISE_TAG = -0x6E6F697365  # -int.from_bytes(b"noise", "big")

_ALG = "philox"

# The adaptive tree's count tree's seed above the value tree's (module
# docstring).
COUNT_SEED_OFFSET = 2 ** 40
MAX_NOISE_SEED = 2 ** 63 - 1 - COUNT_SEED_OFFSET


def _noise_key(noise_seed: int, stream: int, draw: Any, index: int):
  """key_index of the module docstring: an int64 [2] tensor."""
  key = tf.constant([noise_seed, NOISE_TAG], tf.int64)
  for data in (tf.constant(stream, tf.int64), tf.cast(draw, tf.int64),
               tf.constant(index, tf.int64)):
    key = tf.random.experimental.stateless_fold_in(key, data, alg=_ALG)
  return key


class SeededGaussianSumQuery(tfp.GaussianSumQuery):
  """`tfp.GaussianSumQuery` with noise drawn from (noise_seed, stream, draw).

  Global state: the parent's (l2_norm_clip, stddev) plus `draw`, an int64
  counter of the noisings done (module docstring). Clipping, the result's
  distribution and the DpEvent, `GaussianDpEvent(stddev / l2_norm_clip)`, are
  the parent's.
  """

  # pylint: disable=invalid-name
  _GlobalState = collections.namedtuple("_GlobalState",
                                        ["l2_norm_clip", "stddev", "draw"])

  def __init__(self, l2_norm_clip: float, stddev: float, noise_seed: int,
               stream: int = 0):
    """Initializes the query; `l2_norm_clip` and `stddev` are the parent's.

    Args:
      noise_seed: Integer in [0, 2^63 - 1]: the seed of the noise. For
        simulation only (module docstring).
      stream: Integer >= 0 that separates queries sharing a seed.

    Raises:
      TypeError, ValueError: for a bad `noise_seed` or `stream`, naming it.
    """
    super().__init__(l2_norm_clip, stddev)
    self._noise_seed = schedules.as_seed(noise_seed, "noise_seed")
    self._stream = validation.as_int(stream, "stream", minimum=0)

  @property
  def noise_seed(self) -> int:
    return self._noise_seed

  @property
  def stream(self) -> int:
    return self._stream

  def make_global_state(self, l2_norm_clip, stddev, draw=0):
    """A global state; `draw` is the index of the next noise draw."""
    return self._GlobalState(
        tf.cast(l2_norm_clip, tf.float32), tf.cast(stddev, tf.float32),
        tf.cast(draw, tf.int64))

  def get_noised_result(self, sample_state, global_state):
    """Adds the seeded noise of draw `global_state.draw`; increments it.

    The noise is drawn in the value's dtype if it is a float type (the parent
    draws float32 and casts), else in float32 and cast.
    """

    def add_noise(index, value):
      dtype = value.dtype if value.dtype.is_floating else tf.float32
      noise = tf.random.stateless_normal(
          tf.shape(value),
          seed=_noise_key(self._noise_seed, self._stream, global_state.draw,
                          index),
          stddev=tf.cast(global_state.stddev, dtype), dtype=dtype, alg=_ALG)
      return value + tf.cast(noise, value.dtype)

    flat = tf.nest.flatten(sample_state)
    result = tf.nest.pack_sequence_as(
        sample_state, [add_noise(i, v) for i, v in enumerate(flat)])
    noise_multiplier = global_state.stddev / global_state.l2_norm_clip
    event = dp_accounting.GaussianDpEvent(noise_multiplier)
    return result, global_state._replace(draw=global_state.draw + 1), event


class _SeededQuantileEstimatorQuery(tfp.QuantileEstimatorQuery):
  """`tfp.QuantileEstimatorQuery` whose below-estimate count is seeded."""

  def __init__(self, *args, noise_seed: int, stream: int, **kwargs):
    # The parent's __init__ calls _construct_below_estimate_query.
    self._noise_seed, self._stream = noise_seed, stream
    super().__init__(*args, **kwargs)

  def _construct_below_estimate_query(self, below_estimate_stddev,
                                      expected_num_records):
    # The parent's construction (sensitivity 0.5, see its comment) with a
    # seeded sum query.
    return tfp.NormalizedQuery(
        SeededGaussianSumQuery(0.5, below_estimate_stddev, self._noise_seed,
                               stream=self._stream),
        denominator=expected_num_records)


class SeededQuantileAdaptiveClipSumQuery(tfp.QuantileAdaptiveClipSumQuery):
  """`tfp.QuantileAdaptiveClipSumQuery` with seeded noise.

  The sum's noise is a `SeededGaussianSumQuery` with stream 0, the noise of
  the quantile estimator's below-estimate count one with stream 1, both of
  `noise_seed`. Arguments, state layout, clip updates and the DpEvent
  (`ComposedDpEvent([sum event, count event])`) are the parent's.
  """

  def __init__(self,
               initial_l2_norm_clip,
               noise_multiplier,
               target_unclipped_quantile,
               learning_rate,
               clipped_count_stddev,
               expected_num_records,
               geometric_update=True,
               *,
               noise_seed: int):
    """Initializes the query; arguments as the parent's, plus `noise_seed`.

    Raises:
      TypeError, ValueError: for a bad `noise_seed`, naming it.
    """
    noise_seed = schedules.as_seed(noise_seed, "noise_seed")
    super().__init__(initial_l2_norm_clip, noise_multiplier,
                     target_unclipped_quantile, learning_rate,
                     clipped_count_stddev, expected_num_records,
                     geometric_update)
    self._noise_seed = noise_seed
    # The parent's two sub-queries, rebuilt with seeded noise.
    self._sum_query = SeededGaussianSumQuery(
        initial_l2_norm_clip, noise_multiplier * initial_l2_norm_clip,
        noise_seed, stream=0)
    self._quantile_estimator_query = _SeededQuantileEstimatorQuery(
        initial_l2_norm_clip, target_unclipped_quantile, learning_rate,
        clipped_count_stddev, expected_num_records, geometric_update,
        noise_seed=noise_seed, stream=1)

  @property
  def noise_seed(self) -> int:
    return self._noise_seed

  def get_noised_result(self, sample_state, global_state):
    """The parent's, with the sum query's draw counter carried on."""
    noised_vectors, sum_state, sum_event = self._sum_query.get_noised_result(
        sample_state.sum_state, global_state.sum_state)

    new_l2_norm_clip, new_quantile_estimator_state, quantile_event = (
        self._quantile_estimator_query.get_noised_result(
            sample_state.quantile_estimator_state,
            global_state.quantile_estimator_state))

    new_l2_norm_clip = tf.maximum(new_l2_norm_clip, 0.0)
    new_sum_stddev = new_l2_norm_clip * global_state.noise_multiplier
    new_sum_query_state = self._sum_query.make_global_state(
        l2_norm_clip=new_l2_norm_clip, stddev=new_sum_stddev,
        draw=sum_state.draw)

    new_global_state = self._GlobalState(global_state.noise_multiplier,
                                         new_sum_query_state,
                                         new_quantile_estimator_state)
    event = dp_accounting.ComposedDpEvent(events=[sum_event, quantile_event])
    return noised_vectors, new_global_state, event


def check_noise_seed(noise_seed: int) -> int:
  """`noise_seed` if the count tree's seed above it fits in int64."""
  noise_seed = validation.as_int(noise_seed, "noise_seed", minimum=0)
  if noise_seed > MAX_NOISE_SEED:
    raise ValueError(f"noise_seed must be at most {MAX_NOISE_SEED} with "
                     "adaptive clipping (the clipped count's tree is seeded "
                     f"{COUNT_SEED_OFFSET} above), got {noise_seed}.")
  return noise_seed


class SeededTreeQuantileEstimatorQuery(
    quantile_estimator_query.TreeQuantileEstimatorQuery):
  """`TreeQuantileEstimatorQuery` whose count tree has `noise_seed`."""

  def __init__(self, *args, noise_seed: int, **kwargs):
    self._count_noise_seed = validation.as_int(noise_seed, "noise_seed",
                                               minimum=0)
    super().__init__(*args, **kwargs)

  def _construct_below_estimate_query(self, below_estimate_stddev,
                                      expected_num_records):
    # tensorflow_privacy's construction, with the seed.
    sum_query = tfp.TreeResidualSumQuery.build_l2_gaussian_query(
        clip_norm=0.5, noise_multiplier=2 * below_estimate_stddev,
        record_specs=tf.TensorSpec([]), noise_seed=self._count_noise_seed)
    return tfp.NormalizedQuery(sum_query, denominator=expected_num_records)


class SeededQAdaClipTreeResSumQuery(tfp.QAdaClipTreeResSumQuery):
  """`QAdaClipTreeResSumQuery` with its count tree seeded (module doc)."""

  def __init__(self, initial_l2_norm_clip, noise_multiplier, record_specs,
               target_unclipped_quantile, learning_rate, clipped_count_stddev,
               expected_num_records, geometric_update=True, *,
               noise_seed: int):
    noise_seed = check_noise_seed(noise_seed)
    super().__init__(initial_l2_norm_clip, noise_multiplier, record_specs,
                     target_unclipped_quantile, learning_rate,
                     clipped_count_stddev, expected_num_records,
                     geometric_update, noise_seed=noise_seed)
    self._quantile_estimator_query = SeededTreeQuantileEstimatorQuery(
        initial_l2_norm_clip, target_unclipped_quantile, learning_rate,
        clipped_count_stddev, expected_num_records, geometric_update,
        noise_seed=noise_seed + COUNT_SEED_OFFSET)


__all__ = ["COUNT_SEED_OFFSET", "MAX_NOISE_SEED", "NOISE_TAG",
           "SeededGaussianSumQuery", "SeededQAdaClipTreeResSumQuery",
           "SeededQuantileAdaptiveClipSumQuery",
           "SeededTreeQuantileEstimatorQuery", "check_noise_seed"]
