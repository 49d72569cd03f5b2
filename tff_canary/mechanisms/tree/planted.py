"""DP-FTRL's planted-bug runs: the tree's `PlantedBugs`.

The tree's runs of the correlated family's planted bugs
(`mechanisms.correlated.planted`: no model trained, the aggregation of
clipped Gaussian values for whole epochs, fair-coin orthogonal candidates
once per epoch, the self-test on zero values with another noise seed, the
DP-FTRL audit `tree_audit.audit_ftrl` against the CLAIMED noise): here the
tree (`TreeBugRunConfig.aggregation`: restarted every epoch, with a noise bug
of `tree_planted_bugs` planted), its self-test and its claim, the exact
tree accounting. The whole setup: docs/method/dp-ftrl.md, "Planted bugs".
"""

from __future__ import annotations

import dataclasses

from tff_canary.mechanisms.correlated import noise_check as correlated_check
from tff_canary.mechanisms.correlated import planted as correlated_planted
from tff_canary.mechanisms.tree import planted_bugs as tree_planted_bugs
from tff_canary.mechanisms.tree import spec as tree_mechanism
from tff_canary.stats import validation
from tff_canary.stats.correlated import tree_accounting
from tff_canary.stats.correlated import tree_simulation

# The self-test's noise seed above the run's (the family's).
SELF_TEST_SEED_OFFSET = correlated_planted.SELF_TEST_SEED_OFFSET


@dataclasses.dataclass(frozen=True)
class TreeBugRunConfig(correlated_planted.CorrelatedBugRunConfig):
  """One tree run (module docstring): the family's settings
  (`CorrelatedBugRunConfig`) and the tree's own.

  Attributes:
    efficient: The efficient tree (tensorflow_privacy's `use_efficient`).
  """

  aggregator: str = tree_mechanism.TreeMechanism.name
  efficient: bool = True

  def __post_init__(self):
    super().__post_init__()
    validation.as_bool(self.efficient, "efficient")
    if self.bug == "efficient_scale" and not self.efficient:
      raise ValueError("bug 'efficient_scale' needs efficient=True.")

  def aggregation(self, noise_seed: int
                  ) -> tree_planted_bugs.PlantedTreeAggregation:
    """The tree as run: restarted every epoch, with the noise bug if any."""
    noise_bug = (self.bug if self.bug in tree_planted_bugs.NOISE_BUGS
                 else "none")
    return tree_planted_bugs.PlantedTreeAggregation(
        noise_multiplier=self.noise_multiplier, clip=self.l2_clip,
        efficient=self.efficient, restart_period=self.rounds_per_epoch,
        noise_seed=noise_seed, bug=noise_bug)


class TreePlanted(correlated_planted.CorrelatedPlanted):
  """DP-FTRL's planted bugs (module docstring)."""

  bugs = tree_simulation.BUGS
  config_type = TreeBugRunConfig

  def noise_check(self, config, checked, claimed_std):
    return correlated_check.check_correlated_noise(
        checked, config.value_type, num_rounds=config.num_rounds,
        num_clients=config.clients_per_round, seed=config.seed)

  def claim(self, config):
    epochs = config.num_rounds // config.rounds_per_epoch
    claim = tree_accounting.tree_epsilons(
        config.noise_multiplier, [config.rounds_per_epoch] * epochs,
        delta=config.delta)
    return claim.epsilon, str(claim)


PLANTED_BUGS = TreePlanted()

__all__ = ["PLANTED_BUGS", "SELF_TEST_SEED_OFFSET", "TreeBugRunConfig",
           "TreePlanted"]
