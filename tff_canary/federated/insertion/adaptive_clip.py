"""The quantile-adaptive clip's parameters: `AdaptiveClip`.

What adapts the clip norm to a target quantile of the clients' update norms
(Andrew, Thakkar, McMahan & Ramaswamy 2021, "Differentially Private Learning
with Adaptive Clipping", NeurIPS, the geometric update), in both adaptive
queries the canary factory builds: `tfp.QuantileAdaptiveClipSumQuery`
(`CanaryDPFactory.gaussian_adaptive`) and DP-FTRL's
`tfp.QAdaClipTreeResSumQuery` (`tff_canary.mechanisms.tree.aggregation.
tree_adaptive`, where the estimated clip is adopted at each restart).
`from_arguments` checks both constructors' arguments and splits the noise.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Optional

import tensorflow_federated as tff

from tff_canary.federated.insertion import construction
from tff_canary.stats import validation


@dataclasses.dataclass(frozen=True)
class AdaptiveClip:
  """The adaptive clip's arguments besides the clip and the value's noise
  (module docstring).

  Attributes:
    target_unclipped_quantile: In [0, 1].
    learning_rate: >= 0, the clip learning rate.
    clipped_count_stddev: >= 0, the noise std of the clipped count's tree.
    expected_num_records: > 0, the clipped count's denominator
      (`clients_per_round`).
  """

  target_unclipped_quantile: float
  learning_rate: float
  clipped_count_stddev: float
  expected_num_records: float

  def __post_init__(self):
    checked = dict(
        target_unclipped_quantile=validation.as_unit_interval(
            self.target_unclipped_quantile, "target_unclipped_quantile"),
        learning_rate=validation.as_nonnegative(self.learning_rate,
                                                "learning_rate"),
        clipped_count_stddev=validation.as_nonnegative(
            self.clipped_count_stddev, "clipped_count_stddev"),
        expected_num_records=validation.as_positive(
            self.expected_num_records, "expected_num_records"))
    for name, value in checked.items():
      object.__setattr__(self, name, value)


def from_arguments(noise_multiplier: Any, clients_per_round: Any,
                   initial_l2_norm_clip: Any, target_unclipped_quantile: Any,
                   learning_rate: Any, clipped_count_stddev: Optional[Any],
                   learning_rate_name: str
                   ) -> tuple[float, float, AdaptiveClip]:
  """(value noise multiplier, initial clip, `AdaptiveClip`): the checked
  arguments of an adaptive clip, the effective `noise_multiplier` split by
  TFF's `adaptive_clip_noise_params` (None: TFF's default count std)."""
  noise_multiplier, clients_per_round = construction.noise_arguments(
      noise_multiplier, clients_per_round)
  clip = validation.as_positive(initial_l2_norm_clip, "initial_l2_norm_clip")
  validation.as_unit_interval(target_unclipped_quantile,
                              "target_unclipped_quantile")
  validation.as_nonnegative(learning_rate, learning_rate_name)
  if clipped_count_stddev is not None:
    clipped_count_stddev = validation.as_nonnegative(clipped_count_stddev,
                                                     "clipped_count_stddev")
  value_noise_multiplier, count_stddev = (
      tff.aggregators.differential_privacy.adaptive_clip_noise_params(
          noise_multiplier, clients_per_round, clipped_count_stddev))
  return value_noise_multiplier, clip, AdaptiveClip(
      target_unclipped_quantile, learning_rate, count_stddev,
      clients_per_round)


__all__ = ["AdaptiveClip", "from_arguments"]
