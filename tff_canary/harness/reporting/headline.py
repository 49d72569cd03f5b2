"""The headline of a report: the answer in at most 8 lines (NumPy only).

A run's report holds a dozen epsilons; the headline picks the ones that
answer "how much does this run leak?" (docs/guide/report.md, "The
headline"; docs/method/which-epsilon.md): the analytical epsilon the audit
tests (`canary_claim`), for DP-FTRL the epsilons the estimates target
(`tree_targets`), epsilon-final (mean-only) and epsilon-all with their
intervals, the strongest lower bound at the audit's Bonferroni level, the
audit's verdict (or that the claim is beyond its reach,
`audit.AuditVerdict.beyond_reach`) and the noise self-test's, and one
sentence on how to read them. A report's section picks them
(`headline_parts`, `report`). `Headline.lines()` is the terminal's and
report.md's text; `as_dict()` is report.json's "headline" key.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, Optional

from tff_canary.mechanisms import analytical_epsilons
from tff_canary.mechanisms import section
from tff_canary.stats import results

# What a report section hands the headline (`section`), by their old names.
Target, Estimate, estimate = section.Target, section.Estimate, section.estimate
beyond_reach_text, vacuous_text = (section.beyond_reach_text,
                                   section.vacuous_text)

MEANING = ("An estimate counts only if its whole interval is above the "
           "analytical ε; a bound above it refutes it.")

# What a headline says of a degenerate noise self-test (`noise_check_verdict`).
NOISE_CHECK_DEGENERATE = (
    "degenerate (no noise claimed): the released rounds were exactly zero, "
    "which is all a check of zero noise can say")
# What a headline says when a user's loop ran no noise self-test.
NOISE_CHECK_NOT_RUN = (
    "not run (run tff_canary.mechanisms.canary_noise_check.check_noise on your "
    "aggregator; docs/guide/drop-in.md)")


@dataclasses.dataclass(frozen=True)
class Headline:
  """The answer of a report (module docstring); frozen, keeps its inputs."""

  delta: float
  confidence: float
  analytical_name: str
  analytical_epsilon: float
  epsilon_final: Estimate
  epsilon_all: Optional[Estimate]
  epsilon_all_missing: str
  strongest_bound_name: str
  strongest_bound: float
  audit_verdict: str
  audit_text: str
  noise_check_verdict: str
  noise_check_text: str
  # What the estimates are compared with when it is not the analytical
  # epsilon above (Poisson-sampled canaries: the estimates target the
  # epsilon of the canaries' rounds without amplification); None: that one.
  estimates_target: Optional[tuple[str, float]] = None
  # The audit's reach (`audit.AuditVerdict.reach_dict`); None if unknown.
  audit_reach: Optional[dict[str, Any]] = None
  targets: tuple[Target, ...] = ()
  # The strongest bound's own confidence when it is a Bonferroni share of
  # `confidence` (the audit's); None: `confidence`.
  strongest_bound_confidence: Optional[float] = None
  # What epsilon-all's line adds after its interval (DP-FTRL: the held-out
  # spread, and the mechanism's reading when it differs); "" for nothing.
  epsilon_all_note: str = ""

  def _targets_line(self) -> list[str]:
    if not self.targets:
      return []
    first, *rest = self.targets
    return [f"{'rounds ε':14s}"
            f"{results.format_number(first.value):>8s}  {first.name}"
            + "".join(f"; {t.name}: {results.format_number(t.value)}"
                      for t in rest)]

  def _bound_confidence(self) -> str:
    each = self.strongest_bound_confidence
    family = results.format_confidence(self.confidence)
    if each is None or math.isclose(each, self.confidence):
      return f"the strongest; {family}"
    return (f"the strongest; {results.format_confidence(each)}, its share of "
            f"the audit's {family}")

  def _estimate_line(self, label: str, est: Optional[Estimate],
                     note: str = "") -> str:
    if est is None:
      return f"{label:14s}{'-':>8s}  {self.epsilon_all_missing}"
    target, what = self.analytical_epsilon, "the analytical ε"
    if self.estimates_target is not None:
      target = self.estimates_target[1]
      what = (f"the ε of the canaries' rounds unamplified "
              f"({self.estimates_target[0]}, {target:.4g})")
    if est.above_analytical:
      status = f"ABOVE {what} (the whole interval)"
    elif est.ci[1] < target:
      status = f"below {what}"
    else:
      status = f"consistent with {what}"
    target_text = ("" if est.target is None else
                   f"targets {results.format_number(est.target.value)} "
                   f"({est.target.name}); ")
    note = f"{note}; " if note else ""
    return (f"{label:14s}{results.format_number(est.value):>8s}  "
            f"{results.format_confidence(self.confidence)} CI "
            f"[{est.ci[0]:.4g}, {est.ci[1]:.4g}]; {note}{target_text}{status}")

  def lines(self) -> list[str]:
    """At most 8 lines: the answer, then how to read it (7 without
    `targets`)."""
    return [
        f"{'analytical ε':14s}"
        f"{results.format_number(self.analytical_epsilon):>8s}  "
        f"{self.analytical_name}, δ = "
        f"{analytical_epsilons.format_delta(self.delta)}: what the "
        "accounting guarantees",
        *self._targets_line(),
        self._estimate_line("ε-final", self.epsilon_final),
        self._estimate_line("ε-all", self.epsilon_all, self.epsilon_all_note),
        f"{'lower bound':14s}"
        f"{results.format_number(self.strongest_bound):>8s}  "
        f"{self.strongest_bound_name} ({self._bound_confidence()})",
        f"audit: {self.audit_text}",
        f"noise self-test: {self.noise_check_text}",
        MEANING,
    ]

  def text(self) -> str:
    return "\n".join(self.lines())

  def as_dict(self) -> dict[str, Any]:
    return dict(
        delta=self.delta, confidence=self.confidence,
        analytical_epsilon=dict(name=self.analytical_name,
                                value=self.analytical_epsilon),
        estimates_target=(None if self.estimates_target is None else dict(
            zip(("name", "value"), self.estimates_target))),
        epsilon_final=self.epsilon_final.as_dict(),
        epsilon_all=(None if self.epsilon_all is None
                     else self.epsilon_all.as_dict()),
        epsilon_all_note=self.epsilon_all_note,
        strongest_bound=dict(name=self.strongest_bound_name,
                             value=self.strongest_bound,
                             confidence=(self.confidence if
                                         self.strongest_bound_confidence is None
                                         else self.strongest_bound_confidence)),
        audit=dict(verdict=self.audit_verdict, text=self.audit_text,
                   reach=self.audit_reach),
        noise_check=dict(verdict=self.noise_check_verdict,
                         text=self.noise_check_text),
        targets=[t.as_dict() for t in self.targets],
        meaning=MEANING,
        lines=self.lines())


def noise_check_verdict(noise_check: Optional[dict[str, Any]],
                        not_run: str = NOISE_CHECK_NOT_RUN) -> tuple[str, str]:
  """(verdict, text) of a run's noise_check.json: verdict "passed",
  "failed", "degenerate" or "not run"; the text says what the test found (its
  first note, if any). "degenerate": no noise was claimed (noise_check.json's
  `degenerate`) and the output was exactly zero (`NOISE_CHECK_DEGENERATE`),
  no pass of a noise test; with a nonzero output it stays "failed".
  `not_run`: the text when no check was run (a Flower run's points at
  the Flower check).
  """
  if noise_check is None:
    return "not run", not_run
  verdict = noise_check.get("verdict") or (
      "passed" if noise_check.get("passed") else "failed")
  if noise_check.get("degenerate") and verdict == "passed":
    return "degenerate", NOISE_CHECK_DEGENERATE
  text = verdict
  notes = noise_check.get("notes") or []
  if notes:
    text += f" ({notes[0]})"
  elif verdict == "failed" and noise_check.get("summary"):
    text += f" ({noise_check['summary']})"
  return verdict, text
