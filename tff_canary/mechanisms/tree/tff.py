"""DP-FTRL's tree in TFF: the TFF half of `mechanisms.tree`.

DP-FTRL with the fixed clip, its tree restarted after every epoch of
`rounds_per_epoch` rounds (the client sampler's): server-side,
`aggregation.tree_aggregation`; with canary clients, TFF's own
`DifferentiallyPrivateFactory` over the same tree query
(`aggregation.TreeAggregation.tff_factory`), unseeded, scored by
`CanaryScoringFactory(..., scores="dot_products")`
(`correlated.tff.client_scores_of`; docs/method/dp-ftrl.md, "In TFF").
The noise check is the correlated family's (`correlated.noise_check`) over
two restarts (`correlated.tff.check_period`). A round records no DpEvent
(the tree's privacy is per tree) but its canaries' scores in units of the
node noise (tree_scores.npy): the correlated family's records (`CorrelatedTff`).
"""

from __future__ import annotations

from typing import Optional

import tensorflow_federated as tff

from tff_canary.mechanisms import protocol_tff
from tff_canary.mechanisms.correlated import noise_check as correlated_check
from tff_canary.mechanisms.correlated import tff as correlated_tff
from tff_canary.mechanisms.tree import aggregation


def _period(rounds_per_epoch: Optional[int]) -> int:
  if rounds_per_epoch is None:
    raise ValueError("aggregator='tree' needs rounds_per_epoch, the tree's "
                     "restart period; got None.")
  return int(rounds_per_epoch)


def tff_tree(settings, restart_period: Optional[int]
             ) -> aggregation.TreeAggregation:
  """DP-FTRL's tree of the run's settings restarted every `restart_period`
  rounds, for TFF's own factory (`TreeAggregation.tff_factory`, no seed)."""
  return aggregation.TreeAggregation(
      noise_multiplier=settings.noise_multiplier, clip=settings.clip,
      efficient=True, restart_period=_period(restart_period))


class TreeTff(correlated_tff.CorrelatedTff):
  """DP-FTRL's aggregators (module docstring)."""

  def canary_aggregator(self, settings, canaries, noise_seed: Optional[int],
                        rounds_per_epoch: Optional[int] = None):
    return aggregation.tree_aggregation(
        settings.noise_multiplier, settings.clients_per_round, settings.clip,
        canaries=canaries, noise_seed=noise_seed,
        restart_period=_period(rounds_per_epoch))

  def tff_aggregator(self, settings, value_type, dim: int,
                     rounds_per_epoch: Optional[int] = None):
    specs = tff.types.type_to_tf_tensor_specs(value_type)
    return tff_tree(settings, rounds_per_epoch).tff_factory(
        specs, settings.clients_per_round)

  def noise_check(self, settings, inputs: protocol_tff.NoiseCheckInputs):
    period = correlated_tff.check_period(inputs.rounds_per_epoch)
    if settings.insertion == "clients":  # TFF's factory, unseeded
      return correlated_check.check_correlated_noise(
          self.tff_aggregator(settings, inputs.value_type, inputs.dim,
                              period),
          inputs.value_type, noise=tff_tree(settings, period).noise(
              correlated_check.default_rounds(period)),
          noise_multiplier=settings.noise_multiplier,
          tensor_names=inputs.tensor_names)
    aggregator = self.canary_aggregator(settings, inputs.no_canaries,
                                        inputs.seed, period)
    return correlated_check.check_correlated_noise(
        aggregator, inputs.value_type, tensor_names=inputs.tensor_names)


TFF_MECHANISM = TreeTff()
