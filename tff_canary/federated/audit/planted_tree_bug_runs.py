"""One real TFF DP-FTRL run per planted tree bug, judged by the DP-FTRL audit.

The TFF counterpart of `tff_canary.stats.correlated.tree_simulation` (and of
bench/ftrl_audit.py): `run(config)` runs a `CanaryDPFactory` tree
aggregation (`planted_tree_bugs.PlantedTreeAggregation`, the tree restarted
after every epoch, a fixed `noise_seed`) as a TFF aggregation process on a
small value type for `epochs` x `rounds_per_epoch` rounds. Each round
`clients_per_round` clients send independent zero-mean Gaussian values of
norm about `client_scale` x sqrt(d), above the clip, so the query clips them
to C; their component along a canary is O(C / sqrt(d)) per client and round,
independent across rounds.

Canaries: `num_candidates` orthogonal candidates, each inserted by a fair
coin (`CanaryConfig(assignment="coin", directions="orthogonal")`), every
candidate scheduled once per epoch (`schedules.ShuffledEpochs`; held-out
candidates get the schedules they would have had). With the bug
"double_participation" the run's `CanaryConfig` has the schedule
`planted_tree_bugs.TwicePerEpoch` (the same round plus a second one in every
epoch) while the audit is told `ShuffledEpochs`. Each round reports every
candidate's score u_{j,t} (`tree_factory`: units of the node noise), the
[candidates, rounds] array the audit takes.

The noise self-test (`tree_noise_check.check_tree_noise`) runs the run's
aggregation (with the bug, on a fresh process with no canaries and another
noise seed) for the same rounds on zero values. The audit is
`tree_audit.audit_ftrl` on the scores, the told schedule, the coins, the
CLAIMED tree (`tree_noise.tree_noise(T, efficient, restart_period=
rounds_per_epoch)`) and the self-test's noise: three checks at family-wise
level `level` (self-test, contribution, bounds) against the claimed
epsilon of the node release (`tree_accounting`).
"""

from __future__ import annotations

import dataclasses
import time
from typing import Any
import warnings

import numpy as np
import tensorflow_federated as tff

from tff_canary.federated.audit import planted_tree_bugs
from tff_canary.federated.audit import tree_noise_check
from tff_canary.federated.insertion import factory
from tff_canary.federated.insertion import measurement_keys
from tff_canary.federated.runtime import worker_guard
from tff_canary.stats.canaries import canary_config
from tff_canary.stats.canaries import schedules
from tff_canary.stats.correlated import tree_audit
from tff_canary.stats.correlated import tree_simulation
from tff_canary.stats import validation

worker_guard.install()

BUGS = tree_simulation.BUGS
# A noise seed's node keys are [s + k L + i] (tree_factory): the self-test's
# process gets keys far from the run's.
SELF_TEST_SEED_OFFSET = 1_000_003


@dataclasses.dataclass(frozen=True)
class TreeBugRunConfig:
  """One run: the bug, the tree, the sizes (module docstring)."""

  bug: str = "none"
  efficient: bool = True
  noise_multiplier: float = 1.0
  clip: float = 0.5
  clients_per_round: int = 4
  epochs: int = 3
  rounds_per_epoch: int = 16
  num_candidates: int = 512
  dim: int = 1024
  client_scale: float = 0.1
  delta: float = 1e-5
  level: float = 0.05
  seed: int = 0

  def __post_init__(self):
    validation.as_choice(self.bug, "bug", BUGS)
    if not isinstance(self.efficient, bool):
      raise TypeError(f"efficient must be a bool, got "
                      f"{validation.show(self.efficient)}.")
    if self.bug == "efficient_scale" and not self.efficient:
      raise ValueError("bug 'efficient_scale' needs efficient=True.")
    validation.as_positive(self.noise_multiplier, "noise_multiplier")
    validation.as_positive(self.clip, "clip")
    validation.as_positive(self.client_scale, "client_scale")
    for name, low in (("clients_per_round", 1), ("epochs", 1),
                      ("rounds_per_epoch", 2), ("num_candidates", 4),
                      ("dim", 2), ("seed", 0)):
      validation.as_int(getattr(self, name), name, minimum=low)
    if self.num_candidates > self.dim:
      raise ValueError(f"num_candidates={self.num_candidates} orthogonal "
                       f"canaries need dim >= num_candidates, got {self.dim}.")
    validation.as_open_unit(self.delta, "delta")
    validation.as_open_unit(self.level, "level")

  @property
  def num_rounds(self) -> int:
    return self.epochs * self.rounds_per_epoch

  @property
  def value_type(self) -> Any:
    return tff.types.to_type(tff.TensorType(np.float32, [self.dim]))

  def aggregation(self, noise_seed: int
                  ) -> planted_tree_bugs.PlantedTreeAggregation:
    """The tree as run: restarted every epoch, with the noise bug if any."""
    noise_bug = (self.bug if self.bug in planted_tree_bugs.NOISE_BUGS
                 else "none")
    return planted_tree_bugs.PlantedTreeAggregation(
        noise_multiplier=self.noise_multiplier, clip=self.clip,
        efficient=self.efficient, restart_period=self.rounds_per_epoch,
        noise_seed=noise_seed, bug=noise_bug)


@dataclasses.dataclass(frozen=True)
class TreeBugRun:
  """One run's audit and self-test, with what they saw."""

  config: TreeBugRunConfig
  audit: tree_audit.FtrlAudit
  self_test: tree_noise_check.TreeNoiseCheck
  scores: np.ndarray
  schedule: np.ndarray
  inserted: np.ndarray
  seconds: float

  @property
  def caught_by(self) -> tuple[str, ...]:
    return self.audit.caught_by

  def __str__(self) -> str:
    c = self.config
    tree = "efficient" if c.efficient else "plain"
    return (f"{c.bug} ({tree} tree, {c.epochs} x {c.rounds_per_epoch} rounds, "
            f"{c.num_candidates} candidates, z = {c.noise_multiplier:g}, "
            f"{self.seconds:.0f} s):\n{self.audit}")


def _canaries(config: TreeBugRunConfig, schedule: schedules.Schedule
              ) -> canary_config.CanaryConfig:
  half = config.num_candidates // 2
  with warnings.catch_warnings():
    # More candidates than dim / 100: orthogonal canaries are exact.
    warnings.simplefilter("ignore", canary_config.TooManyCanariesWarning)
    return canary_config.CanaryConfig(
        seed=config.seed, num_inserted=half,
        num_held_out=config.num_candidates - half, schedule=schedule,
        assignment="coin", directions="orthogonal")


def canary_configs(config: TreeBugRunConfig
                   ) -> tuple[canary_config.CanaryConfig,
                              canary_config.CanaryConfig]:
  """(the run's canaries, the canaries the audit is told of)."""
  told = _canaries(config, schedules.ShuffledEpochs(config.num_rounds,
                                                    config.rounds_per_epoch))
  if config.bug != "double_participation":
    return told, told
  return _canaries(config, planted_tree_bugs.TwicePerEpoch(
      config.num_rounds, config.rounds_per_epoch)), told


def _client_values(rng, config):
  return [rng.normal(scale=config.client_scale, size=config.dim).astype(
      np.float32) for _ in range(config.clients_per_round)]


def run(config: TreeBugRunConfig) -> TreeBugRun:
  """Runs the aggregation with canaries, the self-test, and the audit."""
  if not isinstance(config, TreeBugRunConfig):
    raise TypeError(f"config must be a TreeBugRunConfig, got "
                    f"{validation.show(config)}.")
  start = time.perf_counter()
  canaries, told = canary_configs(config)
  aggregator = factory.CanaryDPFactory(
      config.aggregation(config.seed), canaries,
      clients_per_round=config.clients_per_round)
  process = aggregator.create(config.value_type)
  state = process.initialize()
  rng = np.random.default_rng([config.seed, 0x7EE])
  scores = []
  for _ in range(config.num_rounds):
    output = process.next(state, _client_values(rng, config))
    state = output.state
    scores.append(np.asarray(output.measurements[
        measurement_keys.TREE_SCORES_KEY], np.float64))
  u = np.stack(scores, axis=1)
  no_canaries = canary_config.CanaryConfig(
      seed=config.seed, num_inserted=0, num_held_out=0,
      schedule=schedules.FixedPresentations(config.num_rounds, 0))
  self_test = tree_noise_check.check_tree_noise(
      factory.CanaryDPFactory(
          config.aggregation(config.seed + SELF_TEST_SEED_OFFSET),
          no_canaries, clients_per_round=config.clients_per_round),
      config.value_type, num_rounds=config.num_rounds,
      num_clients=config.clients_per_round, seed=config.seed)
  a = told.schedule_matrix()
  verdict = tree_audit.audit_ftrl(
      u, a, told.inserted, noise=aggregator.tree.noise(config.num_rounds),
      rounds_per_epoch=config.rounds_per_epoch,
      noise_multiplier=config.noise_multiplier, delta=config.delta,
      self_test_noise=self_test.noise,
      self_test_sizes=self_test.check.tensor_sizes, level=config.level)
  return TreeBugRun(config=config, audit=verdict, self_test=self_test,
                    scores=u, schedule=a, inserted=np.array(told.inserted),
                    seconds=time.perf_counter() - start)


__all__ = ["BUGS", "TreeBugRun", "TreeBugRunConfig", "canary_configs", "run"]
