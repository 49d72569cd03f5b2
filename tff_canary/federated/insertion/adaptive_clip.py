"""The quantile-adaptive clip's parameters: `AdaptiveClip`.

What adapts the clip norm to a target quantile of the clients' update norms
(Andrew, Thakkar, McMahan & Ramaswamy 2021, "Differentially Private Learning
with Adaptive Clipping", NeurIPS, the geometric update), in both adaptive
queries the canary factory builds: `tfp.QuantileAdaptiveClipSumQuery`
(`CanaryDPFactory.gaussian_adaptive`) and DP-FTRL's
`tfp.QAdaClipTreeResSumQuery` (`CanaryDPFactory.tree_adaptive`, where the
estimated clip is adopted at each restart).
"""

from __future__ import annotations

import dataclasses

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


__all__ = ["AdaptiveClip"]
