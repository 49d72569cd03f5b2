"""Planted-bug runs of correlated noise: what the tree's and the matrix mechanisms' share.

The TFF counterpart of `tff_canary.stats.correlated.tree_simulation` and of
bench/ftrl_audit.py and bench/matrix_audit.py, through `planted_runs.run`. A
run is a `CorrelatedBugRunConfig`: no model is trained; the run's
aggregation (`aggregation(noise_seed)`: the tree, `mechanisms.tree.planted`,
or a banded or BLT strategy, `mechanisms.matrix.planted`, restarted every
epoch, with the noise bug if any) in a `CanaryDPFactory` aggregates
`clients_per_round` clipped Gaussian values of `dim` values a round; the run
observes every candidate's score u_{j,t}, [candidates, rounds], in units of
the noise, with fair-coin orthogonal candidates once per epoch (or twice,
"double_participation": `TwicePerEpoch`), and is judged by the DP-FTRL audit
(`tree_audit.audit_ftrl`) against the CLAIMED noise at family-wise level
`level`. The whole setup: docs/method/dp-ftrl.md, "Planted bugs".
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np
import tensorflow_federated as tff

from tff_canary.federated.insertion import factory
from tff_canary.federated.insertion import measurement_keys
from tff_canary.mechanisms import planted_runs
from tff_canary.stats import validation
from tff_canary.stats.canaries import canary_config
from tff_canary.stats.canaries import schedules
from tff_canary.stats.correlated import tree_audit

# A noise seed's node keys are [s + k L + i] (the aggregations'): the
# self-test's process gets keys far from the run's.
SELF_TEST_SEED_OFFSET = 1_000_003


@dataclasses.dataclass(frozen=True)
class CorrelatedBugRunConfig(planted_runs.BugRunConfig):
  """One run of correlated noise (module docstring): `BugRunConfig`'s bug,
  seed, claim and canary settings at these runs' sizes, and their own.

  The model's settings (`features`, `hidden`, `classes`,
  `examples_per_client`, `pool_clients`), `bits`, `canary_norm` and
  `noise_check_rounds` (the self-test runs `num_rounds` rounds) are unused.
  A mechanism's config adds its aggregation (`aggregation`).

  Attributes:
    rounds_per_epoch: The restart period (one tree or strategy per epoch).
    dim: The size of the aggregated vector.
    client_scale: The clients' values' per-coordinate std.
    level: The DP-FTRL audit's family-wise level.
  """

  mode: str = "server"
  noise_multiplier: float = 1.0
  clients_per_round: int = 4
  num_rounds: int = 48
  num_candidates: int = 512
  l2_clip: float = 0.5
  rounds_per_epoch: int = 16
  dim: int = 1024
  client_scale: float = 0.1
  level: float = 0.05

  def __post_init__(self):
    super().__post_init__()
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

  def aggregation(self, noise_seed: int):
    """The aggregation as run, with the noise bug if any (a subclass's)."""
    raise NotImplementedError(type(self).__qualname__)


@dataclasses.dataclass(frozen=True)
class TwicePerEpoch(schedules.ShuffledEpochs):
  """"double_participation", the client sampler's bug: `ShuffledEpochs`'
  round of every epoch, plus a second, uniformly drawn other round of the
  same epoch, while the audit is told `ShuffledEpochs`. The noise is
  correct.

  The first rounds are exactly those `ShuffledEpochs(num_rounds,
  rounds_per_epoch).realize(seed, ids)` draws (the same stream, drawn
  first), so a `CanaryConfig` of the same seed with `ShuffledEpochs` is the
  schedule the audit is told. Whole epochs only.
  """

  def __post_init__(self):
    super().__post_init__()
    if self.partial_last_epoch or self.rounds_per_epoch < 2:
      raise ValueError("TwicePerEpoch needs whole epochs of at least 2 "
                       "rounds.")

  def expected_participation(self) -> float:
    return 2.0 * self.num_epochs

  def _draw(self, rng, num_canaries):
    per, epochs = self.rounds_per_epoch, self.num_epochs
    first = rng.integers(0, per, size=(num_canaries, epochs))
    second = (first + rng.integers(1, per, size=(num_canaries, epochs))) % per
    starts = np.arange(epochs) * per
    both = np.concatenate([first + starts, second + starts], axis=1)
    return list(np.sort(both, axis=1))


class CorrelatedPlanted(planted_runs.PlantedBugs):
  """What the correlated mechanisms' planted bugs share (module docstring);
  a subclass gives `bugs`, `config_type`, `noise_check` and `claim`."""

  modes = ("server",)
  # Aggregation-only runs judged by the DP-FTRL audit: not rows of
  # experiments/planted_bugs.py (the mechanisms' tests run each).
  table = ()
  gaussian_claim = False

  def canaries(self, config):
    def canaries(schedule):
      return planted_runs.coin_canaries(config, schedule, "orthogonal")
    told = canaries(schedules.ShuffledEpochs(config.num_rounds,
                                             config.rounds_per_epoch))
    if config.bug != "double_participation":
      return told, told
    return canaries(TwicePerEpoch(config.num_rounds,
                                  config.rounds_per_epoch)), told

  def aggregators(self, config, canaries):
    """The run's aggregation with `canaries`; the self-test's with none and
    its own noise seed (no claimed std: the claim is the aggregation's
    noise)."""
    def aggregator(seed, given):
      return factory.CanaryDPFactory(
          config.aggregation(seed), given,
          clients_per_round=config.clients_per_round)
    no_canaries = canary_config.CanaryConfig(
        seed=config.seed, num_inserted=0, num_held_out=0,
        schedule=schedules.FixedPresentations(config.num_rounds, 0))
    return (aggregator(config.seed, canaries),
            aggregator(config.seed + SELF_TEST_SEED_OFFSET, no_canaries), None)

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

  def judge(self, config, observed, told, claimed_epsilon, check):
    return tree_audit.audit_ftrl(
        observed, told.schedule_matrix(), told.inserted,
        noise=config.aggregation(config.seed).noise(config.num_rounds),
        rounds_per_epoch=config.rounds_per_epoch,
        noise_multiplier=config.noise_multiplier, delta=config.delta,
        self_test_noise=check.noise,
        self_test_sizes=check.check.tensor_sizes, level=config.level,
        claimed_epsilon=claimed_epsilon), None


__all__ = ["CorrelatedBugRunConfig", "CorrelatedPlanted",
           "SELF_TEST_SEED_OFFSET", "TwicePerEpoch"]
