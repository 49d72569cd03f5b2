"""DP-FTRL's adaptive tree query with BOTH of its trees seeded.

tensorflow_privacy's `QAdaClipTreeResSumQuery` (TFF's
`DifferentiallyPrivateFactory.tree_adaptive`; Kairouz et al. 2021, arXiv
2103.00039, with the geometric quantile estimate of Andrew et al. 2021,
arXiv 1905.03871) noises two things through trees: the clipped values
(`TreeResidualSumQuery`, seeded by its `noise_seed`) and the count of records
below the clip estimate (`TreeQuantileEstimatorQuery`, whose tree
tensorflow_privacy builds without a seed, so its noise, and with it the clip
adopted at each restart, comes from the clock). `SeededQAdaClipTreeResSumQuery`
is the same query with the count's tree seeded too, from
`noise_seed + COUNT_SEED_OFFSET`: its node keys [n, n] (one tensor) then
start far above the value tree's [noise_seed + k L + i] (`tree_factory`), so
the two trees never share a key in any run that fits in memory. Seeded noise
is for simulation only.

The count's query is built by overriding
`TreeQuantileEstimatorQuery._construct_below_estimate_query`, the extension
point tensorflow_privacy's own subclass uses, with the same clip 0.5, noise
multiplier 2 x stddev and normalization; the adaptive query's estimator is
replaced by that seeded one after tensorflow_privacy's constructor has built
everything else (tensorflow_privacy has no argument for it).
"""

from __future__ import annotations

import tensorflow as tf
import tensorflow_privacy as tfp
from tensorflow_privacy.privacy.dp_query import quantile_estimator_query

from tff_canary.stats import validation

# The count tree's seed above the value tree's (module docstring).
COUNT_SEED_OFFSET = 2 ** 40
MAX_NOISE_SEED = 2 ** 63 - 1 - COUNT_SEED_OFFSET


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


__all__ = ["COUNT_SEED_OFFSET", "MAX_NOISE_SEED", "check_noise_seed",
           "SeededQAdaClipTreeResSumQuery",
           "SeededTreeQuantileEstimatorQuery"]
