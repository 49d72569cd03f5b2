"""Participation at most k times, at least b rounds apart, with no restart.

The rule under which production BLT DP-FTRL is accounted (McMahan, Xu &
Zhang 2024, arXiv 2408.08868: each client at most k times, any two at least
b rounds apart; "b-min-sep", Choquette-Choo et al. 2023, arXiv 2306.08153),
with one strategy C over all n rounds:

* `MinSeparation.claim`: the analytical epsilon, exact GDP of mu =
  sens / z with sens = max ||C a|| over the allowed patterns
  (`sensitivity.toeplitz_sensitivity`, `analytical.matrix_epsilon`); its
  `pattern` a* is where worst-case canaries go (`SharedRounds`);
* `MinSeparation.violations`: the candidates whose schedule breaks the rule.
  Canaries sampled as the clients are record the clients' real
  participation, so a claim of a larger b (or a smaller k) than the clients
  really have is refuted by the schedules themselves, whatever the noise;
  canaries placed by the auditor on a* cannot show it;
* `SeparatedNoise` (`separated_noise`): the strategy's released noise over
  all n rounds, one block, whose worst case and claim are the rule's, so the
  correlated-noise targets, placement and audit use the rule, not one
  participation per block;
* `cyclic_schedule`: a cyclic sampler's participation (the clients in
  `period` groups, group g in rounds g, g + period, g + 2 period, ...), each
  candidate in a uniformly drawn group: exactly `period` rounds apart.

NumPy only.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any

import numpy as np

from tff_canary.stats.matrix import analytical
from tff_canary.stats.matrix import sensitivity as sensitivity_lib
from tff_canary.stats.matrix import strategy_noise
from tff_canary.stats.matrix import toeplitz
from tff_canary.stats import validation


@dataclasses.dataclass(frozen=True)
class MinSeparation:
  """At most `participations` rounds, any two at least `separation` apart,
  out of `rounds` (module docstring)."""

  rounds: int
  participations: int
  separation: int

  def __post_init__(self):
    for name, low in (("rounds", 1), ("participations", 1),
                      ("separation", 1)):
      validation.as_int(getattr(self, name), name, minimum=low)

  def sensitivity(self, coefficients: Any) -> sensitivity_lib.Sensitivity:
    """sens and a* of the Toeplitz C of `coefficients` under the rule."""
    return sensitivity_lib.toeplitz_sensitivity(
        coefficients, rounds=self.rounds, participations=self.participations,
        separation=self.separation)

  def claim(self, coefficients: Any, *, noise_multiplier: float,
            delta: float) -> analytical.MatrixEpsilon:
    """The analytical epsilon of C over the rounds under the rule."""
    return analytical.matrix_epsilon(self.sensitivity(coefficients),
                                     noise_multiplier=noise_multiplier,
                                     delta=delta)

  def violations(self, schedule: Any) -> np.ndarray:
    """[candidates] bool: the schedules with more than k rounds or two
    rounds closer than b."""
    a = np.asarray(schedule)
    if a.ndim != 2 or a.shape[1] != self.rounds or a.dtype != bool:
      raise ValueError(f"schedule must be a [candidates, {self.rounds}] "
                       f"Boolean array, got {validation.show(schedule)}.")
    too_many = a.sum(axis=1) > self.participations
    close = np.zeros(a.shape[0], dtype=bool)
    for gap in range(1, min(self.separation, self.rounds)):
      close |= np.any(a[:, gap:] & a[:, :-gap], axis=1)
    return too_many | close

  def __str__(self) -> str:
    return (f"at most {self.participations} participations at least "
            f"{self.separation} rounds apart in {self.rounds} rounds")


@dataclasses.dataclass(frozen=True)
class SeparatedNoise(strategy_noise.StrategyNoise):
  """B = C^-1 over all of `rule.rounds` (no restart), accounted under
  `rule`: a participant in up to k rounds at least b apart, so its worst
  case is the rule's a* (`MinSeparation.sensitivity`), not one round per
  block.

  Attributes (beyond `StrategyNoise`'s):
    rule: the claimed participation, a `MinSeparation`.
    coefficients: C's c_0 .. c_{n-1}, read-only.
  """

  rule: MinSeparation
  coefficients: np.ndarray

  @functools.cached_property
  def sensitivity(self) -> sensitivity_lib.Sensitivity:
    """sens and a* of C under the rule."""
    return self.rule.sensitivity(self.coefficients)

  def worst_case_rounds(self) -> np.ndarray:
    """a*: the rounds of the rule's worst-case participant."""
    return np.flatnonzero(self.sensitivity.pattern).astype(np.int64)

  def worst_case_mu(self, noise_multiplier: float) -> float:
    """sens / z = ||C a*|| / z, the GLS mean of a canary on a*."""
    z = validation.as_positive(noise_multiplier, "noise_multiplier")
    return self.sensitivity.value / z

  @property
  def participation_rule(self) -> MinSeparation:
    """`rule`: the audit checks every candidate's schedule against it."""
    return self.rule

  def worst_case_formula(self) -> str:
    """`worst_case_mu` as a formula, for reports."""
    return "sens / z = ‖C a*‖ / z, a* the rule's worst case"

  def release_mu(self, noise_multiplier: float) -> float:
    """The rounds' mu under the rule: `worst_case_mu` (B is square)."""
    return self.worst_case_mu(noise_multiplier)

  def claim(self, noise_multiplier: float, *,
            delta: float) -> analytical.MatrixEpsilon:
    """The rule's analytical epsilon (`MinSeparation.claim`)."""
    return self.rule.claim(self.coefficients,
                           noise_multiplier=noise_multiplier, delta=delta)


def separated_noise(coefficients: Any, rule: MinSeparation) -> SeparatedNoise:
  """The `SeparatedNoise` of C's `coefficients` under `rule`, [n, n]."""
  if not isinstance(rule, MinSeparation):
    raise TypeError(f"rule must be a separation.MinSeparation, got "
                    f"{validation.show(rule)}.")
  c = toeplitz.padded(coefficients, rule.rounds)
  c.setflags(write=False)
  noise = strategy_noise.strategy_noise(c, rule.rounds)
  return SeparatedNoise(released=noise.released, round_block=noise.round_block,
                        rule=rule, coefficients=c)


def cyclic_schedule(rounds: int, period: int, candidates: int,
                    rng: np.random.Generator) -> np.ndarray:
  """[candidates, rounds] bool: each candidate in rounds g, g + period, ...
  for its own g uniform in [0, period) (module docstring)."""
  n = validation.as_int(rounds, "rounds", minimum=1)
  p = validation.as_int(period, "period", minimum=1)
  if p > n:
    raise ValueError(f"period must be at most rounds = {n}, got {p}.")
  m = validation.as_int(candidates, "candidates", minimum=1)
  groups = rng.integers(0, p, size=m)
  return np.arange(n)[None, :] % p == groups[:, None]


__all__ = ["MinSeparation", "SeparatedNoise", "cyclic_schedule",
           "separated_noise"]
