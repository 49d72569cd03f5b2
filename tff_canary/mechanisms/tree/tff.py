"""DP-FTRL's tree in TFF: the TFF half of `mechanisms.tree`.

DP-FTRL with the fixed clip, its tree restarted after every epoch of
`rounds_per_epoch` rounds (the client sampler's): server-side,
`CanaryDPFactory.tree_aggregation`; with canary clients, TFF's own
`DifferentiallyPrivateFactory` over the same tree query
(`tree_factory.TreeAggregation.tff_factory`), unseeded, scored by
`CanaryScoringFactory(..., scores="dot_products")`
(`client_scores_of`; docs/method/dp-ftrl.md, "In TFF"). The
noise check is the tree's (`tree_noise_check`) over two restarts
(`check_period`). A round records no DpEvent (the tree's privacy is per
tree) but its canaries' scores in units of the node noise (tree_scores.npy).
"""

from __future__ import annotations

from typing import Any, Mapping, Optional

import numpy as np
import tensorflow_federated as tff

from tff_canary.federated.audit import tree_noise_check
from tff_canary.federated.insertion import factory
from tff_canary.federated.insertion import measurement_keys
from tff_canary.federated.insertion import tree_factory
from tff_canary.federated.structures import nested_search
from tff_canary.mechanisms import protocol_tff

# DP-FTRL's noise check spans two restarts in at most this many rounds
# (`check_period`).
MAX_CHECK_ROUNDS = 256


def _period(rounds_per_epoch: Optional[int]) -> int:
  if rounds_per_epoch is None:
    raise ValueError("aggregator='tree' needs rounds_per_epoch, the tree's "
                     "restart period; got None.")
  return int(rounds_per_epoch)


def tff_tree(config, restart_period: Optional[int]
             ) -> tree_factory.TreeAggregation:
  """DP-FTRL's tree of the run's settings restarted every `restart_period`
  rounds, for TFF's own factory (`TreeAggregation.tff_factory`, no seed)."""
  return tree_factory.TreeAggregation(
      noise_multiplier=config.noise_multiplier, clip=config.clip,
      efficient=True, restart_period=_period(restart_period))


def check_period(rounds_per_epoch: Optional[int]) -> int:
  """The restart period of DP-FTRL's noise check: the run's, when two
  restarts fit in `MAX_CHECK_ROUNDS` rounds, else the largest period that
  fits (the same query, restarted sooner), so that the check's [rounds, d]
  noise stays in memory at StackOverflow's epochs of thousands of rounds."""
  return min(_period(rounds_per_epoch), (MAX_CHECK_ROUNDS - 2) // 2)


def client_scores_of(metrics: Any, clients_per_round: float,
                noise_multiplier: float, clip: float) -> np.ndarray:
  """DP-FTRL's canary clients' scores u_j = <c_j, a_r> x clients_per_round
  / (z C_r), float64 [m], a_r the round's released mean, from the
  process's `measurement_keys.DOT_PRODUCTS_KEY` (scores="dot_products"):
  the server-side mode's scores, in units of the node noise z C_r
  (docs/method/dp-ftrl.md, "In TFF").
  """
  key = measurement_keys.DOT_PRODUCTS_KEY
  found = nested_search.find_first(
      metrics.get("aggregator", metrics) if isinstance(metrics, Mapping)
      else metrics, lambda m: isinstance(m, Mapping) and key in m)
  if found is None:
    raise ValueError(f"the round's metrics have no {key!r}: the process "
                     "was not built with scores='dot_products'.")
  unit = float(noise_multiplier) * float(clip)
  if not unit > 0.0:
    raise ValueError(f"the scores' unit z C_r must be positive, got "
                     f"noise_multiplier={noise_multiplier}, clip={clip}.")
  dots = np.asarray(found[key], np.float64)
  return dots * (float(clients_per_round) / unit)


class TreeTff(protocol_tff.TffMechanism):
  """DP-FTRL's aggregators (module docstring)."""

  client_scores = "dot_products"

  def planted_bugs(self):
    """Its planted bugs: `tff_canary.mechanisms.tree.planted` (imported
    when asked: it builds on this half)."""
    from tff_canary.mechanisms.tree import planted  # pylint: disable=g-import-not-at-top
    return planted.PLANTED_BUGS

  def canary_aggregator(self, config, canaries, noise_seed: Optional[int],
                        rounds_per_epoch: Optional[int] = None):
    return factory.CanaryDPFactory.tree_aggregation(
        config.noise_multiplier, config.clients_per_round, config.clip,
        canaries=canaries, noise_seed=noise_seed,
        restart_period=_period(rounds_per_epoch))

  def tff_aggregator(self, config, value_type, dim: int,
                     rounds_per_epoch: Optional[int] = None):
    specs = tff.types.type_to_tf_tensor_specs(value_type)
    return tff_tree(config, rounds_per_epoch).tff_factory(
        specs, config.clients_per_round)

  def noise_check(self, config, inputs: protocol_tff.NoiseCheckInputs):
    period = check_period(inputs.rounds_per_epoch)
    if config.insertion == "clients":  # TFF's factory, unseeded
      return tree_noise_check.check_tree_noise(
          self.tff_aggregator(config, inputs.value_type, inputs.dim, period),
          inputs.value_type, noise=tff_tree(config, period).noise(
              tree_noise_check.default_rounds(period)),
          noise_multiplier=config.noise_multiplier,
          tensor_names=inputs.tensor_names)
    aggregator = self.canary_aggregator(config, inputs.no_canaries,
                                        inputs.seed, period)
    return tree_noise_check.check_tree_noise(
        aggregator, inputs.value_type, tensor_names=inputs.tensor_names)

  def server_round(self, output, measurements):
    return None, np.asarray(measurements[measurement_keys.TREE_SCORES_KEY],
                            np.float64)

  def client_round(self, config, output, clip: float):
    return None, client_scores_of(
        output.metrics, config.clients_per_round, config.noise_multiplier,
        clip)


TFF_MECHANISM = TreeTff()
