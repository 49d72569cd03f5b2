"""Matrix-factorization DP-FTRL's planted-bug runs: banded's and BLT's `PlantedBugs`.

The TFF counterpart of bench/matrix_audit.py, through `planted_bug_runs.run`
and the correlated family's runs (`mechanisms.correlated.planted`: no model
trained, a `CanaryDPFactory` aggregation on a float32 vector of `dim` values
for whole epochs, fair-coin orthogonal candidates once per epoch, the
self-test on zero values with another noise seed, the audit
`tree_audit.audit_ftrl` against the CLAIMED noise). The aggregation is the run's strategy (`bands` or `blt_buffers`, as
the experiments', `mechanisms.banded` / `mechanisms.blt`) restarted every
epoch, with a noise bug of `matrix_planted_bugs` planted, or the sampler's
"double_participation" (`correlated.planted.TwicePerEpoch`). The claim is
the strategy's: exact GDP of the restarted strategy's sensitivity
(`LinearNoise.claim`).
"""

from __future__ import annotations

import dataclasses
from typing import ClassVar, Optional

from tff_canary.mechanisms import registry
from tff_canary.mechanisms.correlated import noise_check as correlated_check
from tff_canary.mechanisms.correlated import planted as correlated_planted
from tff_canary.mechanisms.matrix import planted_bugs as matrix_planted_bugs
from tff_canary.stats import validation
from tff_canary.stats.matrix import planted_strategies


@dataclasses.dataclass(frozen=True)
class MatrixBugRunConfig(correlated_planted.CorrelatedBugRunConfig):
  """One matrix-mechanism run (module docstring): the family's settings
  (`CorrelatedBugRunConfig`) and the strategy's and bug's own.

  Attributes:
    aggregator: the registered matrix mechanism, banded or BLT.
    bands: banded's bands (`mechanisms.banded`).
    blt_buffers: BLT's buffers (`mechanisms.blt`), fitted to one
      participation per epoch; or, with `blt_output_scale` and
      `blt_buf_decay`, the given BLT's (its `BltMechanism` settings).
    reset_every, factor, lag: the noise bug's argument
      (`matrix_planted_bugs.PlantedMatrixAggregation`).
  """

  aggregator: str = "blt"  # a registered matrix mechanism (registry)
  bands: int = 4
  blt_buffers: int = 3
  blt_output_scale: Optional[str] = None
  blt_buf_decay: Optional[str] = None
  reset_every: int = 1
  factor: float = 0.5
  lag: Optional[int] = None
  # Shuffled epochs, restarted every epoch (the mechanism's rule reads it).
  sampling: ClassVar[str] = "shuffle"

  def __post_init__(self):
    super().__post_init__()
    validation.as_int(self.bands, "bands", minimum=1)
    validation.as_int(self.blt_buffers, "blt_buffers", minimum=1)
    self.aggregation(self.seed)  # checks the bug's argument

  def aggregation(self, noise_seed: int
                  ) -> matrix_planted_bugs.PlantedMatrixAggregation:
    """The strategy as run: restarted every epoch, with the noise bug if
    any."""
    mechanism = registry.get(self.aggregator)
    noise_bug = (self.bug if self.bug in planted_strategies.BUGS
                 else "none")
    return matrix_planted_bugs.PlantedMatrixAggregation(
        noise_multiplier=self.noise_multiplier, clip=self.l2_clip,
        restart_every=self.rounds_per_epoch, noise_seed=noise_seed,
        bug=noise_bug, reset_every=self.reset_every, factor=self.factor,
        lag=self.lag,
        **mechanism.strategy_kwargs(self, self.rounds_per_epoch))


class MatrixPlanted(correlated_planted.CorrelatedPlanted):
  """Banded's and BLT's planted bugs (module docstring)."""

  bugs = planted_strategies.BUGS + ("double_participation",)
  config_type = MatrixBugRunConfig

  def noise_check(self, config, checked, claimed_std):
    """The tree's self-test with the strategy's claimed noise, sigma = z C
    (`matrix_tff`'s)."""
    return correlated_check.check_correlated_noise(
        checked, config.value_type,
        noise=config.aggregation(config.seed).noise(config.num_rounds),
        node_std=config.noise_multiplier * config.l2_clip,
        clients_per_round=config.clients_per_round,
        num_clients=config.clients_per_round, seed=config.seed)

  def claim(self, config):
    claim = config.aggregation(config.seed).noise(config.num_rounds).claim(
        config.noise_multiplier, delta=config.delta)
    return claim.epsilon, str(claim)


PLANTED_BUGS = MatrixPlanted()

__all__ = ["MatrixBugRunConfig", "MatrixPlanted", "PLANTED_BUGS"]
