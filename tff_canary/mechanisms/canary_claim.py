"""Which analytical epsilon a report audits: the one the canaries face.

docs/method/accounting.md ("The analytical epsilons of a report"): the audit
tests the epsilon that holds for the canaries' own participation, read from
their schedule (`CanaryConfig.schedule`), not the loop's client sampling.
Canaries Poisson-sampled at rate p (`schedules.PerRoundSampling`) face the
Poisson-amplified epsilon at p (amplification by sampling, Balle, Barthe &
Gaboardi 2018; the PLD accountant): `POISSON` at the clients' rate q =
clients_per_round / num_clients, else `POISSON_AT_CANARY_RATE`. Any other
canaries face the largest participation's composition without
amplification, and the clients' Poisson epsilon is marked not audited.

NumPy only.
"""

from __future__ import annotations

import ast
import dataclasses
import math
from typing import Any, Optional

from tff_canary.stats.canaries import schedules

# The analytical epsilons' names (`analytical_epsilons.analytical`).
POISSON = "Poisson sampling (PLD)"
POISSON_AT_CANARY_RATE = "Poisson sampling at the canaries' rate (PLD)"
_SCHEDULES = {cls.__name__: cls for cls in (
    schedules.ShuffledEpochs, schedules.FixedPresentations,
    schedules.PerRoundSampling, schedules.SharedRounds,
    schedules.CyclicRounds)}
# How to give canaries the clients' Poisson sampling, for the report's text.
HOW_TO_AUDIT_POISSON = (
    "to audit it, give the canaries the clients' sampling: "
    "schedules.PerRoundSampling(num_rounds, clients_per_round / num_clients)")


def schedule_of(text: Any) -> Optional[schedules.Schedule]:
  """The canary schedule whose repr is `text` (as the cosine table and
  config.json record it), or None for anything else ("" when not recorded).

  Only the literal keyword arguments of `ShuffledEpochs`, `SharedRounds`,
  `CyclicRounds`, `FixedPresentations` and `PerRoundSampling` are read
  (`ast`, nothing is evaluated).
  """
  if not isinstance(text, str) or not text:
    return None
  try:
    call = ast.parse(text, mode="eval").body
    if (not isinstance(call, ast.Call) or call.args
        or not isinstance(call.func, ast.Name)
        or call.func.id not in _SCHEDULES):
      return None
    kwargs = {k.arg: ast.literal_eval(k.value) for k in call.keywords}
    return _SCHEDULES[call.func.id](**kwargs)
  except (SyntaxError, ValueError, TypeError):
    return None


def recorded_schedule(config: dict[str, Any],
                      table_schedule: str) -> Optional[schedules.Schedule]:
  """The canaries' schedule of a run: the cosine table's, else config.json's
  (a `RunWriter`'s `schedule`, an experiment's `participation`)."""
  participation = config.get("participation") or {}
  for text in (table_schedule, config.get("schedule"),
               (participation.get("canaries") or {}).get("schedule")):
    schedule = schedule_of(text)
    if schedule is not None:
      return schedule
  return None


def poisson_rate(schedule: Optional[schedules.Schedule]) -> Optional[float]:
  """p of Poisson-sampled canaries (`PerRoundSampling` with p > 0), else
  None."""
  if isinstance(schedule, schedules.PerRoundSampling) and (
      schedule.probability > 0):
    return schedule.probability
  return None


def clients_rate(config: dict[str, Any]) -> Optional[float]:
  """q = clients_per_round / num_clients of a run that declared per-round
  sampling, else None."""
  if config.get("sampling") != "per_round":
    return None
  return float(config["clients_per_round"]) / float(config["num_clients"])


@dataclasses.dataclass(frozen=True)
class CanaryClaim:
  """The analytical epsilon the canaries face (module docstring).

  Attributes:
    name: its key in the report's analytical epsilons.
    epsilon: its value.
    amplified: True for a Poisson-amplified claim (not a Gaussian mechanism's
      trade-off curve, so audited with bounds valid for any claim).
    reason: one sentence: why this claim (what the canaries did).
    not_audited: {analytical name: why it is not audited} for the clients'
      Poisson epsilon when the canaries were not sampled like the clients.
  """

  name: str
  epsilon: float
  amplified: bool
  reason: str
  not_audited: dict[str, str] = dataclasses.field(default_factory=dict)

  def as_dict(self) -> dict[str, Any]:
    return dict(name=self.name, epsilon=self.epsilon,
                amplified=self.amplified, reason=self.reason,
                not_audited=dict(self.not_audited))

  def row_note(self, name: str) -> str:
    """What the report's row of analytical epsilon `name` adds."""
    if name == self.name:
      return ("; the claim the canaries face (audited unless a claimed ε is "
              "given)")
    if name in self.not_audited:
      return f"; not audited: {self.not_audited[name]}"
    return ""

  def line(self, claim: str, claimed_epsilon: float,
           analytical: dict[str, float]) -> str:
    """Which claim the audit tests (`claim`, e.g. "analytical ε (one
    participation)" or "claimed ε"), why, and what it does not test."""
    if claim.startswith("claimed"):
      line = (f"the audit tests the claimed ε = {claimed_epsilon:.4g} given "
              f"to the report; the canaries face the analytical ε "
              f"({self.name}) = {self.epsilon:.4g}")
    elif math.isinf(claimed_epsilon):  # no noise: nothing to test
      line = (f"the {claim} = inf promises no privacy: there is no claim "
              "for the audit to test")
    else:
      line = f"the audit tests the {claim} = {claimed_epsilon:.4g}"
    line += f": {self.reason}"
    for other, why in self.not_audited.items():
      line += (f". Not audited: {other} = {analytical[other]:.4g}, {why}; "
               f"{HOW_TO_AUDIT_POISSON}")
    return line


def participation_name(analytical: dict[str, float]) -> str:
  """The analytical epsilon of the canaries' largest participation: "<r>
  participations" (r > 1) if `analytical` has it, else "one
  participation"."""
  return next((k for k in analytical if k.endswith(" participations")),
              "one participation")


def choose(config: dict[str, Any], schedule: Optional[schedules.Schedule],
           analytical: dict[str, float]) -> CanaryClaim:
  """The claim the canaries face (module docstring).

  Args:
    config: config.json's values (`sampling`, `clients_per_round`,
      `num_clients`).
    schedule: the canaries' schedule (`recorded_schedule`), None if unknown.
    analytical: the report's analytical epsilons by name; with Poisson
      canaries it holds `POISSON` (at the clients' rate) or
      `POISSON_AT_CANARY_RATE` (`analytical_epsilons.analytical`), unless the
      run has no ledger.
  """
  p, q = poisson_rate(schedule), clients_rate(config)
  participation = participation_name(analytical)
  what = "not recorded" if schedule is None else repr(schedule)
  if p is not None:
    name = (POISSON if q is not None and math.isclose(p, q, rel_tol=1e-9)
            else POISSON_AT_CANARY_RATE)
    if name in analytical:
      reason = (f"the canaries were Poisson-sampled at rate {p:.4g} per round "
                f"({what})"
                + (", the clients' rate" if name == POISSON else "")
                + ", so they face the amplified ε")
      not_audited = {}
      if name != POISSON and POISSON in analytical:
        not_audited[POISSON] = (
            f"the clients' claim (sampling='per_round' at rate {q:.4g}); the "
            f"canaries were Poisson-sampled at {p:.4g}, so it does not bound "
            "what they can leak")
      return CanaryClaim(name, analytical[name], True, reason, not_audited)
  rounds = participation.split()[0]
  reason = (f"each canary takes part in at most one round ({what}), without "
            "amplification" if rounds == "one" else
            f"each canary takes part in at most {rounds} rounds ({what}), "
            "composed without amplification")
  not_audited = {}
  if POISSON in analytical:
    not_audited[POISSON] = (
        f"the clients' claim (sampling='per_round' at rate {q:.4g}); it holds "
        "only for records Poisson-sampled at that rate, and these canaries "
        "were not, so it does not bound what they can leak")
  return CanaryClaim(participation, analytical[participation], False, reason,
                     not_audited)


__all__ = ["CanaryClaim", "POISSON", "POISSON_AT_CANARY_RATE", "choose",
           "clients_rate", "participation_name", "poisson_rate",
           "recorded_schedule", "schedule_of"]
