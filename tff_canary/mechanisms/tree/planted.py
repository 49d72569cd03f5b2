"""DP-FTRL's planted-bug runs: the tree's `PlantedBugs`.

The TFF counterpart of `tff_canary.stats.correlated.tree_simulation` (and
of bench/ftrl_audit.py), through `planted_runs.run`. A run is a
`TreeBugRunConfig`: no model is trained; the run's tree aggregation
(`TreeBugRunConfig.aggregation`) in a `CanaryDPFactory` aggregates
`clients_per_round` clipped Gaussian values of `dim` values a round; the
run observes every candidate's score u_{j,t} (`aggregation`: units of the
node noise), [candidates, rounds], and is judged by the DP-FTRL audit
(`tree_audit.audit_ftrl`) at family-wise level `level`. The whole setup:
docs/method/dp-ftrl.md, "Planted bugs".
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np
import tensorflow_federated as tff

from tff_canary.federated.insertion import factory
from tff_canary.federated.insertion import measurement_keys
from tff_canary.mechanisms import planted_runs
from tff_canary.mechanisms.correlated import noise_check as correlated_check
from tff_canary.mechanisms.tree import planted_bugs as tree_planted_bugs
from tff_canary.mechanisms.tree import spec as tree_mechanism
from tff_canary.stats import validation
from tff_canary.stats.canaries import canary_config
from tff_canary.stats.canaries import schedules
from tff_canary.stats.correlated import tree_accounting
from tff_canary.stats.correlated import tree_audit
from tff_canary.stats.correlated import tree_simulation

# A noise seed's node keys are [s + k L + i] (aggregation): the self-test's
# process gets keys far from the run's.
SELF_TEST_SEED_OFFSET = 1_000_003


@dataclasses.dataclass(frozen=True)
class TreeBugRunConfig(planted_runs.BugRunConfig):
  """One tree run (module docstring): `BugRunConfig`'s bug, seed, claim and
  canary settings at the tree's sizes, and the tree's own.

  The model's settings (`features`, `hidden`, `classes`,
  `examples_per_client`, `pool_clients`), `bits`, `canary_norm` and
  `noise_check_rounds` (the self-test runs `num_rounds` rounds) are unused.

  Attributes:
    efficient: The efficient tree (tensorflow_privacy's `use_efficient`).
    rounds_per_epoch: The tree's restart period (one tree per epoch).
    dim: The size of the aggregated vector.
    client_scale: The clients' values' per-coordinate std.
    level: The DP-FTRL audit's family-wise level.
  """

  mode: str = "server"
  aggregator: str = tree_mechanism.TreeMechanism.name
  noise_multiplier: float = 1.0
  clients_per_round: int = 4
  num_rounds: int = 48
  num_candidates: int = 512
  l2_clip: float = 0.5
  efficient: bool = True
  rounds_per_epoch: int = 16
  dim: int = 1024
  client_scale: float = 0.1
  level: float = 0.05

  def __post_init__(self):
    super().__post_init__()
    validation.as_bool(self.efficient, "efficient")
    if self.bug == "efficient_scale" and not self.efficient:
      raise ValueError("bug 'efficient_scale' needs efficient=True.")
    validation.as_positive(self.client_scale, "client_scale")
    per = validation.as_int(self.rounds_per_epoch, "rounds_per_epoch",
                            minimum=2)
    if self.num_rounds % per:
      raise ValueError(f"num_rounds must be whole epochs of rounds_per_epoch"
                       f"={per} rounds, got {self.num_rounds}.")
    validation.as_int(self.dim, "dim", minimum=2)
    if self.num_candidates > self.dim:
      raise ValueError(f"num_candidates={self.num_candidates} orthogonal "
                       f"canaries need dim >= num_candidates, got {self.dim}.")
    validation.as_open_unit(self.level, "level")

  @property
  def value_type(self) -> Any:
    return tff.types.to_type(tff.TensorType(np.float32, [self.dim]))

  def aggregation(self, noise_seed: int
                  ) -> tree_planted_bugs.PlantedTreeAggregation:
    """The tree as run: restarted every epoch, with the noise bug if any."""
    noise_bug = (self.bug if self.bug in tree_planted_bugs.NOISE_BUGS
                 else "none")
    return tree_planted_bugs.PlantedTreeAggregation(
        noise_multiplier=self.noise_multiplier, clip=self.l2_clip,
        efficient=self.efficient, restart_period=self.rounds_per_epoch,
        noise_seed=noise_seed, bug=noise_bug)


class TreePlanted(planted_runs.PlantedBugs):
  """DP-FTRL's planted bugs (module docstring)."""

  bugs = tree_simulation.BUGS
  modes = ("server",)
  # Aggregation-only runs judged by the DP-FTRL audit: not rows of
  # experiments/planted_bugs.py (tests/mechanisms/tree/test_planted_bugs.py runs each).
  table = ()
  gaussian_claim = False
  config_type = TreeBugRunConfig

  def canaries(self, config):
    def canaries(schedule):
      return planted_runs.coin_canaries(config, schedule, "orthogonal")
    told = canaries(schedules.ShuffledEpochs(config.num_rounds,
                                             config.rounds_per_epoch))
    if config.bug != "double_participation":
      return told, told
    return canaries(tree_planted_bugs.TwicePerEpoch(
        config.num_rounds, config.rounds_per_epoch)), told

  def aggregators(self, config, canaries):
    """The run's tree with `canaries`; the self-test's with none and its
    own noise seed (no claimed std: the claim is the tree's noise)."""
    def tree(seed, given):
      return factory.CanaryDPFactory(
          config.aggregation(seed), given,
          clients_per_round=config.clients_per_round)
    no_canaries = canary_config.CanaryConfig(
        seed=config.seed, num_inserted=0, num_held_out=0,
        schedule=schedules.FixedPresentations(config.num_rounds, 0))
    return (tree(config.seed, canaries),
            tree(config.seed + SELF_TEST_SEED_OFFSET, no_canaries), None)

  def observe(self, config, canaries, training):
    """The [candidates, rounds] scores u_{j,t} (module docstring)."""
    process = training.create(config.value_type)
    state = process.initialize()
    rng = np.random.default_rng([config.seed, 0x7EE])
    scores = []
    for _ in range(config.num_rounds):
      values = [rng.normal(scale=config.client_scale, size=config.dim).astype(
          np.float32) for _ in range(config.clients_per_round)]
      output = process.next(state, values)
      state = output.state
      scores.append(np.asarray(output.measurements[
          measurement_keys.TREE_SCORES_KEY], np.float64))
    return np.stack(scores, axis=1)

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

  def judge(self, config, observed, told, claimed_epsilon, check):
    return tree_audit.audit_ftrl(
        observed, told.schedule_matrix(), told.inserted,
        noise=config.aggregation(config.seed).noise(config.num_rounds),
        rounds_per_epoch=config.rounds_per_epoch,
        noise_multiplier=config.noise_multiplier, delta=config.delta,
        self_test_noise=check.noise,
        self_test_sizes=check.check.tensor_sizes, level=config.level,
        claimed_epsilon=claimed_epsilon), None


PLANTED_BUGS = TreePlanted()

__all__ = ["PLANTED_BUGS", "SELF_TEST_SEED_OFFSET", "TreeBugRunConfig",
           "TreePlanted"]
