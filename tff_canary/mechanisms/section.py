"""What a report section gives the headline: its estimates and audit lines.

A mechanism's report section (`protocol.Mechanism.report_section`) hands
the harness's headline (`tff_canary.harness.reporting.headline`) the
epsilons it answers with, as these values, and the audit's line in these
words; the headline lays them out. NumPy only.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Optional


@dataclasses.dataclass(frozen=True)
class Target:
  """An epsilon an estimate is the estimate of, named by what it is the
  epsilon of (DP-FTRL: `tree_targets`)."""

  name: str
  value: float

  def as_dict(self) -> dict[str, Any]:
    return dataclasses.asdict(self)


@dataclasses.dataclass(frozen=True)
class Estimate:
  """An epsilon with its interval, and whether the interval is above the
  analytical epsilon (the only case that is evidence against it)."""

  name: str
  value: float
  ci: tuple[float, float]
  above_analytical: bool
  target: Optional[Target] = None

  def as_dict(self) -> dict[str, Any]:
    return dict(dataclasses.asdict(self), ci=list(self.ci))


def estimate(name: str, result: Any, analytical_epsilon: float,
             target: Optional[Target] = None) -> Estimate:
  """An `Estimate` of an `EpsilonEstimate`, flagged only when its interval
  lies entirely above the analytical epsilon; `target` is what it estimates
  when that is not the analytical epsilon (DP-FTRL)."""
  low, high = result.interval.low, result.interval.high
  return Estimate(name=name, value=result.epsilon, ci=(low, high),
                  above_analytical=bool(low > analytical_epsilon),
                  target=target)


def beyond_reach_text(verdict: Any, claim: str) -> str:
  """The audit line of a claim beyond the reach of every bound
  (`audit.AuditVerdict.beyond_reach`): not "consistent", since nothing was
  tested."""
  return (f"BEYOND REACH of the {claim} = {verdict.claimed_epsilon:.4g}: "
          f"{verdict.reach_text()}")


def vacuous_text(claim: str) -> str:
  """The audit line of a claim of epsilon = inf (`audit.AuditVerdict.vacuous`,
  e.g. noise multiplier 0): nothing to audit, nothing any run can refute."""
  return (f"not needed: the {claim} = inf promises no privacy, so no run "
          "can refute it")


__all__ = ["Estimate", "Target", "beyond_reach_text", "estimate",
           "vacuous_text"]
