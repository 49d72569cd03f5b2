"""DP-FTRL's tree aggregation: its requirements and what its runs record.

DP-FTRL (Kairouz et al. 2021, arXiv 2103.00039; docs/method/dp-ftrl.md)
with a fixed clip, its tree restarted after every shuffled epoch, in either
insertion mode, with orthogonal canaries inserted by fair coins
(the correlated family's `requirements` say why each:
`tff_canary.mechanisms.correlated.spec`). There is no ledger: each round
records its canaries' scores in units of the node noise (tree_scores.npy),
and the report's section is DP-FTRL's, which computes the tree's claim from
its accounting.
Its TFF half is `tff_canary.mechanisms.tree.tff`.
"""

from __future__ import annotations

import dataclasses
from typing import Any


from tff_canary.mechanisms import protocol
from tff_canary.mechanisms.correlated import spec as correlated_spec
from tff_canary.stats.correlated import tree_noise


@dataclasses.dataclass(frozen=True)
class TreeMechanism(correlated_spec.CorrelatedMechanism):
  """DP-FTRL's tree (module docstring)."""

  name = "tree"
  help = ("DP-FTRL: TFF's tree aggregation restarted every epoch; needs a "
          "fixed --clip; with --insertion=clients the canary clients go "
          "through TFF's own factory over the tree; audited against the "
          "tree accounting, docs/method/dp-ftrl.md.")
  client_aggregator = " (DP-FTRL tree)"
  scores_of = "the tree's"  # whose scores, in the refusals' text
  client_accounting = ("the tree accounting (the analytical ε) is that of "
                       "clients_per_round real clients, each once per tree")
  # The client samplings whose participation its noise is accounted for.
  samplings = ("shuffle",)
  sampling_reason = ("DP-FTRL's accounting needs each client at most once "
                     "per tree, one tree per shuffled epoch")
  # No noise is refused (`resolve`); a fixed clip (`requirements`).
  sweep = protocol.SweepDefaults(("0.5", "1", "2", "4"), ("1",), clip=0.1)

  def resolve(self, config) -> dict[str, Any]:
    if config.noise_multiplier == 0.0:
      raise ValueError("aggregator='tree' needs noise_multiplier > 0: the "
                       "tree's scores are in units of its node noise; got "
                       "noise_multiplier=0.0.")
    return {}

  def round_noise(self, settings, num_rounds: int, rounds_per_epoch: int):
    """The claimed released noise of the run's rounds (the report's
    section): the efficient tree restarted every epoch."""
    return tree_noise.tree_noise(num_rounds, efficient=True,
                                 restart_period=rounds_per_epoch)

  def section_settings(self, settings) -> list[str]:
    """The report's settings lines for this mechanism's noise."""
    return ["tree aggregation restarted every epoch"]


MECHANISM = TreeMechanism()
