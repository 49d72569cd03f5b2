"""The noise self-test of a canary aggregator, from the aggregator alone.

docs/method/noise-self-test.md: `check_noise(aggregator, value_type)`
rebuilds the `CanaryDPFactory` a loop trains with without canaries
(`CanaryDPFactory.without_canaries`) and runs the correlated family's
`correlated.noise_check.check_correlated_noise` when the query's noise is
correlated across rounds (`query_noise.QueryNoise.correlated`: DP-FTRL's
tree, banded, BLT), else `noise_check.check_aggregation_noise`; under TFF's
zeroing (`factory.ZeroedFactory`) the factory inside. The result goes to
`RunWriter.record_noise_check`. Not a method of the factory: the checks
import the factory, and the correlated one is a mechanism family's, which
the federated layer does not import.
"""

from __future__ import annotations

from typing import Any

from tff_canary.federated.audit import noise_check
from tff_canary.federated.insertion import factory
from tff_canary.mechanisms.correlated import noise_check as correlated_check
from tff_canary.stats import validation
from tff_canary.stats.noise import noise_stats


def check_noise(aggregator: factory.CanaryDPFactory | factory.ZeroedFactory,
                value_type: Any, **kwargs: Any
                ) -> (noise_stats.NoiseCheck
                      | correlated_check.CorrelatedNoiseCheck):
  """The noise self-test of `aggregator`, built again without canaries.

  A zeroed aggregator (`factory.with_zeroing`, as
  `canary_dp_aggregator(..., zeroing=True)` returns it) is tested through
  its `inner_factory`, the `CanaryDPFactory`, and the test is the same: the
  check feeds zero-valued clients, which zeroing passes on unchanged (it
  zeroes a value whose norm exceeds 2 x its norm estimate + 1, at least 1),
  and zeroing adds no noise (its estimate is TFF's noiseless quantile
  process), so the zeroed aggregator's result is the inner's, value for
  value (tests/mechanisms/test_canary_noise_check.py runs the check both
  ways and compares).

  Args:
    aggregator: The `CanaryDPFactory` of the run (with its canaries), or
      the `ZeroedFactory` around it.
    value_type: The value's TFF type, e.g.
      `tff.learning.models.weights_type_from_model(model_fn).trainable`.
    **kwargs: Passed on to the check (`num_rounds`, `level`, `seed`,
      `tensor_names`, ...).

  Returns:
    The check's result (a `CorrelatedNoiseCheck` for correlated noise).

  Raises:
    TypeError: if `aggregator` is neither a `CanaryDPFactory` nor a
      `ZeroedFactory` around one.
  """
  if isinstance(aggregator, factory.ZeroedFactory):
    aggregator = aggregator.inner_factory
  if not isinstance(aggregator, factory.CanaryDPFactory):
    raise TypeError(
        "aggregator must be a tff_canary.federated.insertion.factory."
        "CanaryDPFactory, or one under factory.with_zeroing (as "
        "canary_dp_aggregator(..., zeroing=True) returns it), got "
        f"{validation.show(aggregator)}; TFF's own aggregators: "
        "noise_check.check_aggregation_noise.")
  without = aggregator.without_canaries(noise_check.DEFAULT_ROUNDS)
  if aggregator.query_noise.correlated:
    return correlated_check.check_correlated_noise(without, value_type,
                                                   **kwargs)
  return noise_check.check_aggregation_noise(without, value_type, **kwargs)


__all__ = ["check_noise"]
