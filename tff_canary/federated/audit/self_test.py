"""The noise self-test of a canary aggregator, from the aggregator alone.

docs/method/noise-self-test.md: `check_noise(aggregator, value_type)`
rebuilds the `CanaryDPFactory` a loop trains with without canaries
(`CanaryDPFactory.without_canaries`) and runs `tree_noise_check.
check_tree_noise` when the query's noise is correlated across rounds
(`query_noise.QueryNoise.correlated`: DP-FTRL's tree), else
`noise_check.check_aggregation_noise`. The result goes to
`RunWriter.record_noise_check`. Not a method of the factory: the audit layer
imports the insertion layer (the planted bugs build canary factories), so
the factory cannot import the checks without a cycle.
"""

from __future__ import annotations

from typing import Any

from tff_canary.federated.audit import noise_check
from tff_canary.federated.audit import tree_noise_check
from tff_canary.federated.insertion import factory
from tff_canary.stats import validation
from tff_canary.stats.noise import noise_stats


def check_noise(aggregator: factory.CanaryDPFactory, value_type: Any,
                **kwargs: Any
                ) -> noise_stats.NoiseCheck | tree_noise_check.TreeNoiseCheck:
  """The noise self-test of `aggregator`, built again without canaries.

  Args:
    aggregator: The `CanaryDPFactory` of the run (with its canaries).
    value_type: The value's TFF type, e.g.
      `tff.learning.models.weights_type_from_model(model_fn).trainable`.
    **kwargs: Passed on to the check (`num_rounds`, `level`, `seed`,
      `tensor_names`, ...).

  Returns:
    The check's result (a `TreeNoiseCheck` for correlated noise).

  Raises:
    TypeError: if `aggregator` is not a `CanaryDPFactory` (a zeroed one:
      pass the factory inside `with_zeroing`).
  """
  if not isinstance(aggregator, factory.CanaryDPFactory):
    raise TypeError(
        "aggregator must be a tff_canary.federated.insertion.factory."
        "CanaryDPFactory (for a zeroed aggregator, its inner factory: "
        f"zeroing adds no noise), got {validation.show(aggregator)}.")
  without = aggregator.without_canaries(noise_check.DEFAULT_ROUNDS)
  if aggregator.query_noise.correlated:
    return tree_noise_check.check_tree_noise(without, value_type, **kwargs)
  return noise_check.check_aggregation_noise(without, value_type, **kwargs)


__all__ = ["check_noise"]
