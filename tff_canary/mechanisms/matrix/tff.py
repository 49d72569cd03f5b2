"""Matrix-factorization DP-FTRL in TFF: the TFF half of banded's and BLT's.

The aggregator is the run's strategy C (the NumPy half's
`strategy_kwargs`) with the fixed clip, its buffers zeroed every epoch of
`rounds_per_epoch` rounds (the client sampler's), or never with cyclic
sampling (`MatrixMechanism.restart_every`): server-side,
`CanaryDPFactory(MatrixAggregation(...))`; without canaries, TFF's own
`DifferentiallyPrivateFactory` over the same query
(`MatrixAggregation.tff_factory`), unseeded, which canary clients join as
the tree's do (`correlated.tff`). The noise check is the correlated
family's (`correlated.noise_check.check_correlated_noise`) with the
strategy's claimed noise (`MatrixAggregation.noise`, B = C^-1 per epoch) of
the run's C over two restarts (restarted sooner for long epochs:
`correlated.tff.check_period`; as many rounds unrestarted with cyclic
sampling) and sigma = z C. A round records no DpEvent but its canaries'
scores in units of z C (tree_scores.npy), as the tree's do. Its planted
bugs are `matrix_planted`'s.
"""

from __future__ import annotations

from typing import Optional

import tensorflow_federated as tff

from tff_canary.federated.insertion import factory
from tff_canary.mechanisms import protocol_tff
from tff_canary.mechanisms.correlated import noise_check as correlated_check
from tff_canary.mechanisms.correlated import tff as correlated_tff
from tff_canary.mechanisms import registry
from tff_canary.mechanisms.matrix import aggregation as matrix_aggregation


def aggregation(settings, rounds_per_epoch: Optional[int],
                noise_seed: Optional[int] = None, check: bool = False
                ) -> matrix_aggregation.MatrixAggregation:
  """The run's `MatrixAggregation` (its C for epochs of `rounds_per_epoch`
  rounds, restarted as `MatrixMechanism.restart_every` says); `check`: the
  noise check's, restarted sooner for long epochs."""
  if rounds_per_epoch is None:
    raise ValueError(f"aggregator={settings.aggregator!r} needs "
                     "rounds_per_epoch, its epoch; got None.")
  mechanism = registry.get(settings.aggregator)
  restart = mechanism.restart_every(settings, int(rounds_per_epoch))
  if check and restart is not None:
    restart = correlated_tff.check_period(restart)
  return matrix_aggregation.MatrixAggregation(
      noise_multiplier=settings.noise_multiplier, clip=settings.clip,
      restart_every=restart, noise_seed=noise_seed,
      **mechanism.strategy_kwargs(settings, int(rounds_per_epoch)))


class MatrixTff(correlated_tff.CorrelatedTff):
  """The matrix mechanisms' aggregators (module docstring); a round's
  records are the correlated family's."""

  def canary_aggregator(self, settings, canaries, noise_seed: Optional[int],
                        rounds_per_epoch: Optional[int] = None):
    return factory.CanaryDPFactory(
        aggregation(settings, rounds_per_epoch, noise_seed), canaries,
        clients_per_round=settings.clients_per_round)

  def tff_aggregator(self, settings, value_type, dim: int,
                     rounds_per_epoch: Optional[int] = None):
    specs = tff.types.type_to_tf_tensor_specs(value_type)
    return aggregation(settings, rounds_per_epoch).tff_factory(
        specs, settings.clients_per_round)

  def noise_check(self, settings, inputs: protocol_tff.NoiseCheckInputs):
    # The run's C (a BLT fitted to the run's participation), restarted sooner
    # when two epochs do not fit in the check (`correlated_tff.check_period`;
    # unrestarted, as many rounds); with canary clients TFF's own factory,
    # unseeded, as the run's.
    clients = settings.insertion == "clients"
    query = aggregation(settings, inputs.rounds_per_epoch,
                        None if clients else inputs.seed, check=True)
    period = correlated_tff.check_period(inputs.rounds_per_epoch)
    if clients:
      checked = query.tff_factory(
          tff.types.type_to_tf_tensor_specs(inputs.value_type),
          settings.clients_per_round)
    else:
      checked = factory.CanaryDPFactory(
          query, inputs.no_canaries,
          clients_per_round=settings.clients_per_round)
    return correlated_check.check_correlated_noise(
        checked, inputs.value_type,
        noise=query.noise(correlated_check.default_rounds(period)),
        node_std=settings.noise_multiplier * settings.clip,
        clients_per_round=settings.clients_per_round,
        tensor_names=inputs.tensor_names)


TFF_MECHANISM = MatrixTff()
