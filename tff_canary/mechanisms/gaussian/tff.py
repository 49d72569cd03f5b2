"""DP-FedAvg's Gaussian mechanism in TFF: the TFF half of `mechanisms.gaussian`.

Server-side canaries: `CanaryDPFactory.gaussian_fixed` when the settings'
`clip` is set, else `gaussian_adaptive` (Andrew et al. 2021), wrapped in
TFF's zeroing (`factory.with_zeroing`) if asked. Canary clients go through
TFF's own `DifferentiallyPrivateFactory.gaussian_fixed` or
`gaussian_adaptive` with the same arguments and the same zeroing; its
noise is unseeded. The rest is `protocol_tff.TffMechanism`'s defaults.
"""

from __future__ import annotations

from typing import Optional

import tensorflow_federated as tff

from tff_canary.federated.insertion import factory
from tff_canary.mechanisms import protocol_tff


def _gaussian(factory_class, settings, clients_per_round, **extra):
  """`factory_class`'s Gaussian aggregator of the run's settings (this
  package's `CanaryDPFactory` or TFF's `DifferentiallyPrivateFactory`,
  whose constructors share their arguments; `extra`: the canaries')."""
  if settings.clip is not None:
    aggregator = factory_class.gaussian_fixed(
        noise_multiplier=settings.noise_multiplier,
        clients_per_round=clients_per_round, clip=settings.clip, **extra)
  else:
    aggregator = factory_class.gaussian_adaptive(
        noise_multiplier=settings.noise_multiplier,
        clients_per_round=clients_per_round,
        initial_l2_norm_clip=settings.initial_clip,
        target_unclipped_quantile=settings.target_unclipped_quantile, **extra)
  return factory.with_zeroing(aggregator) if settings.zeroing else aggregator


class GaussianTff(protocol_tff.TffMechanism):
  """DP-FedAvg's aggregators (module docstring)."""

  def canary_aggregator(self, settings, canaries, noise_seed: Optional[int],
                        rounds_per_epoch: Optional[int] = None):
    return _gaussian(factory.CanaryDPFactory, settings,
                     settings.clients_per_round, canaries=canaries,
                     noise_seed=noise_seed)

  def tff_aggregator(self, settings, value_type, dim: int,
                     rounds_per_epoch: Optional[int] = None):
    return _gaussian(tff.aggregators.DifferentiallyPrivateFactory, settings,
                     float(settings.clients_per_round))


TFF_MECHANISM = GaussianTff()
