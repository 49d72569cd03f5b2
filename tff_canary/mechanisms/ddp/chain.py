"""TFF's distributed-DP aggregator, built from its parts with plain sums.

`ddp_sum_factory(parameters)` is TFF's `DistributedDpSumFactory` chain
(distributed_dp.py `_build_aggregation_factory`, TFF 0.87) composed from
its parts, with the numbers `stats.ddp_parameters` derives: concat ->
rotation (DFT or randomized Hadamard) -> L2 clip at C -> scaling and
conditional stochastic rounding -> `DifferentiallyPrivateFactory` with TFF's
own distributed query (`ddp_query`: each client adds its noise share in
`preprocess_record`) -> modular clipping to [-2^(b-1), 2^(b-1)) and
[0, 2^b) -> a PLAIN `SumFactory` where TFF has `SecureSumFactory`: SecAgg
does not change the sum, and TFF's simulation context refuses the secure
intrinsics (docs/guide/distributed-dp.md; tests/harness/runner/test_planted_bug_runs.py
checks the chain's state against the real factory's). `ddp_mean_factory`
puts it under `UnweightedMeanFactory`, as `tff.learning.
ddp_secure_aggregator` does: the mean divides by the clients that took part,
not by the expected `clients_per_round`. `DiscretizationFactory` and
`ModularClippingSumFactory` are not exported from `tff.aggregators` in TFF
0.87, so they come from their modules.
`tff_canary.mechanisms.ddp.planted_bugs` plants its DDP bugs in this chain.
"""

from __future__ import annotations

import math
from typing import Optional

import tensorflow_federated as tff
import tensorflow_privacy as tfp
from tensorflow_federated.python.aggregators import discretization
from tensorflow_federated.python.aggregators import modular_clipping

from tff_canary.federated.runtime import worker_guard
from tff_canary.stats import validation
from tff_canary.stats.accounting import ddp_parameters

worker_guard.install()


def _check(parameters) -> ddp_parameters.DdpParameters:
  if not isinstance(parameters, ddp_parameters.DdpParameters):
    raise TypeError("parameters must be a tff_canary.stats.accounting.ddp_parameters."
                    f"DdpParameters, got {validation.show(parameters)}.")
  return parameters


def ddp_query(parameters: ddp_parameters.DdpParameters) -> tfp.DPQuery:
  """TFF's distributed query for `parameters` (integer domain): its L2 (and
  for Skellam L1) norm bounds and the clients' local noise std."""
  p = _check(parameters)
  if p.mechanism == "distributed_dgauss":
    return tfp.DistributedDiscreteGaussianSumQuery(
        l2_norm_bound=p.l2_sensitivity, local_stddev=p.scaled_local_std)
  return tfp.DistributedSkellamSumQuery(
      l1_norm_bound=p.l1_sensitivity, l2_norm_bound=p.l2_sensitivity,
      local_stddev=p.scaled_local_std)


def ddp_sum_factory(parameters: ddp_parameters.DdpParameters, *,
                    query: Optional[tfp.DPQuery] = None,
                    clip: Optional[float] = None
                    ) -> tff.aggregators.UnweightedAggregationFactory:
  """`DistributedDpSumFactory`'s chain with a plain sum for SecAgg.

  Args:
    parameters: `ddp_parameters.ddp_parameters(...)` for the factory as told
      (its `clients_per_round` is `expected_clients_per_round`).
    query: the DP query (default `ddp_query(parameters)`, TFF's).
    clip: the L2 clip before rounding (default parameters.l2_clip).

  Returns:
    An unweighted SUM factory. Its `create` must run eagerly, as the
    original's.
  """
  p = _check(parameters)
  clip = p.l2_clip if clip is None else validation.as_positive(clip, "clip")
  bits = p.bits
  nested = tff.aggregators.SumFactory()
  nested = modular_clipping.ModularClippingSumFactory(
      clip_range_lower=0, clip_range_upper=2**bits, inner_agg_factory=nested)
  nested = modular_clipping.ModularClippingSumFactory(
      clip_range_lower=-(2**(bits - 1)), clip_range_upper=2**(bits - 1),
      inner_agg_factory=nested)
  nested = tff.aggregators.DifferentiallyPrivateFactory(
      query=ddp_query(p) if query is None else query,
      record_aggregation_factory=nested)
  nested = discretization.DiscretizationFactory(
      inner_agg_factory=nested, scale_factor=p.scale, stochastic=True,
      beta=p.beta, prior_norm_bound=clip)
  nested = tff.aggregators.clipping_factory(clipping_norm=clip,
                                            inner_agg_factory=nested)
  rotation = (tff.aggregators.HadamardTransformFactory if p.rotation == "hd"
              else tff.aggregators.DiscreteFourierTransformFactory)
  return tff.aggregators.concat_factory(
      inner_agg_factory=rotation(inner_agg_factory=nested))


def ddp_mean_factory(parameters: ddp_parameters.DdpParameters
                     ) -> tff.aggregators.UnweightedAggregationFactory:
  """The chain under `UnweightedMeanFactory` (module docstring)."""
  return tff.aggregators.UnweightedMeanFactory(
      value_sum_factory=ddp_sum_factory(parameters))


def claimed_std(parameters: ddp_parameters.DdpParameters) -> float:
  """Per-coordinate noise std of the sum the factory claims (model units).

  sqrt(expected clients) x share std / scale: the shares of every client the
  factory was told to expect (`DdpParameters.total_noise_std`).
  """
  p = _check(parameters)
  return p.total_noise_std() / p.scale


def actual_std(parameters: ddp_parameters.DdpParameters,
               participants: int) -> float:
  """The same with the shares of the clients that actually take part."""
  p = _check(parameters)
  n = validation.as_int(participants, "participants", minimum=1)
  return math.sqrt(n) * p.share_std / p.scale


__all__ = ["actual_std", "claimed_std", "ddp_mean_factory", "ddp_query",
           "ddp_sum_factory"]
