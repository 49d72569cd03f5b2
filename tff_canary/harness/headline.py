"""The headline of a report: the answer in at most 8 lines (NumPy only).

A run's report holds a dozen epsilons. The headline picks the ones that
answer "how much does this run leak?" (docs/method/which-epsilon.md):

  * the analytical epsilon: what the run's DP accounting guarantees for the
    largest participation of a canary (`RunReport.analytical_bound`);
  * for DP-FTRL only, the epsilons below it that the estimates are read
    against (`tree_targets`): what the released rounds show about the
    worst-case participant, and about this run's canaries (`targets`, one
    line); each estimate names the one it targets;
  * epsilon-final: the mean-only estimate for the final model, with its
    interval (the variant whose variance is the null's, so it is not biased
    upward by the sampling noise of a fitted variance);
  * epsilon-all: the estimate of the mechanism's epsilon for an adversary who
    sees every round (the max model), with its interval. The paper's
    Gaussian fit to the maxima is not here: over many rounds it targets
    neither the mechanism's epsilon nor a bound on it, so it stays in the
    details as the paper's construction;
  * the strongest lower bound: the largest of the audit's bounds, each at the
    audit's Bonferroni level, so it holds with the report's confidence;
  * the audit's verdict on the claim, and the noise self-test's verdict;
  * one sentence on how to read them: estimates are evidence against the
    analytical epsilon only when their whole interval lies above it; a bound
    above it refutes the claim.

`Headline.lines()` is the terminal's and report.md's text; `as_dict()` is
report.json's "headline" key.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Optional

from tff_canary.harness import analytical_epsilons
from tff_canary.stats import results
from tff_canary.stats.audit import table_estimates

MEANING = ("An estimate counts only if its whole interval is above the "
           "analytical ε; a bound above it refutes it.")

# The table's bound rows -> the same bounds in the audit (`audit.table_bounds`).
_F, _A = table_estimates.FINAL_MODEL, table_estimates.ALL_ITERATES
AUDITED_AS = {
    f"{_F}: epsilon_lo (exact null)": "epsilon_lo final",
    f"{_F}: f-DP one-run bound": "f-DP one-run bound final",
    f"{_F}: one-run bound": "one-run bound final",
    f"{_F}: tight one-run bound": "tight one-run bound final",
    f"{_A}: epsilon_lo (held-out null)": "epsilon_lo all",
    f"{_A}: f-DP one-run bound": "f-DP one-run bound all",
    f"{_A}: one-run bound": "one-run bound all",
    f"{_A}: tight one-run bound": "tight one-run bound all",
}
# What a headline says when a user's loop ran no noise self-test.
NOISE_CHECK_NOT_RUN = (
    "not run (run tff_canary.federated.audit.noise_check."
    "check_aggregation_noise on your aggregator; docs/guide/drop-in.md)")


@dataclasses.dataclass(frozen=True)
class Target:
  """An epsilon an estimate is the estimate of, named by what it is the
  epsilon of (DP-FTRL: `tree_targets`)."""

  name: str
  value: float

  def as_dict(self) -> dict[str, Any]:
    return dict(name=self.name, value=self.value)


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
    return dict(name=self.name, value=self.value, ci=list(self.ci),
                above_analytical=self.above_analytical,
                target=None if self.target is None else self.target.as_dict())


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
  targets: tuple[Target, ...] = ()
  targets_label: str = "rounds ε"

  def _targets_line(self) -> list[str]:
    if not self.targets:
      return []
    first, *rest = self.targets
    return [f"{self.targets_label:14s}"
            f"{results.format_number(first.value):>8s}  {first.name}"
            + "".join(f"; {t.name}: {results.format_number(t.value)}"
                      for t in rest)]

  def _estimate_line(self, label: str, est: Optional[Estimate]) -> str:
    if est is None:
      return f"{label:14s}{'-':>8s}  {self.epsilon_all_missing}"
    if est.above_analytical:
      status = "ABOVE the analytical ε (the whole interval)"
    elif est.ci[1] < self.analytical_epsilon:
      status = "below the analytical ε"
    else:
      status = "consistent with the analytical ε"
    target = ("" if est.target is None else
              f"targets {results.format_number(est.target.value)} "
              f"({est.target.name}); ")
    return (f"{label:14s}{results.format_number(est.value):>8s}  "
            f"{self.confidence:.0%} CI [{est.ci[0]:.4g}, {est.ci[1]:.4g}]; "
            f"{target}{status}")

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
        self._estimate_line("ε-all", self.epsilon_all),
        f"{'lower bound':14s}"
        f"{results.format_number(self.strongest_bound):>8s}  "
        f"{self.strongest_bound_name} ({self.confidence:.0%}, the strongest)",
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
        epsilon_final=self.epsilon_final.as_dict(),
        epsilon_all=(None if self.epsilon_all is None
                     else self.epsilon_all.as_dict()),
        strongest_bound=dict(name=self.strongest_bound_name,
                             value=self.strongest_bound),
        audit=dict(verdict=self.audit_verdict, text=self.audit_text),
        noise_check=dict(verdict=self.noise_check_verdict,
                         text=self.noise_check_text),
        targets=[t.as_dict() for t in self.targets],
        meaning=MEANING,
        lines=self.lines())


def estimate(name: str, result: Any, analytical_epsilon: float,
             target: Optional[Target] = None) -> Estimate:
  """An `Estimate` of an `EpsilonEstimate`, flagged only when its interval
  lies entirely above the analytical epsilon; `target` is what it estimates
  when that is not the analytical epsilon (DP-FTRL)."""
  low, high = result.interval.low, result.interval.high
  return Estimate(name=name, value=result.epsilon, ci=(low, high),
                  above_analytical=bool(low > analytical_epsilon),
                  target=target)


def noise_check_verdict(noise_check: Optional[dict[str, Any]]
                        ) -> tuple[str, str]:
  """(verdict, text) of a run's noise_check.json: verdict "passed", "failed"
  or "not run"; the text says what the test found (its first note, if any)."""
  if noise_check is None:
    return "not run", NOISE_CHECK_NOT_RUN
  verdict = noise_check.get("verdict") or (
      "passed" if noise_check.get("passed") else "failed")
  text = verdict
  notes = noise_check.get("notes") or []
  if notes:
    text += f" ({notes[0]})"
  elif verdict == "failed" and noise_check.get("summary"):
    text += f" ({noise_check['summary']})"
  return verdict, text


def of_report(report: Any) -> Headline:
  """The headline of a `report.RunReport` (module docstring)."""
  name, bound = report.analytical_bound
  est = report.estimates
  epsilon_all = None
  if est.all_iterates is not None:
    epsilon_all = estimate(f"{_A}: epsilon_all",
                           est.all_iterates, bound)
  missing = ("not estimated: " + "; ".join(est.warnings) if est.warnings
             else "not estimated: no round's aggregate was recorded")
  verdict = report.verdict
  # The strongest bound by its name in the report's table.
  strongest = {v: k for k, v in AUDITED_AS.items()}.get(verdict.strongest,
                                                         verdict.strongest)
  audit_text = (
      f"{verdict.verdict} with the {report.claim} = "
      f"{report.claimed_epsilon:.4g} ({len(verdict.bounds)} bounds, "
      f"{report.confidence:.0%} together)")
  if verdict.refuted:
    audit_text = (f"REFUTED: {strongest} = "
                  f"{verdict.largest_bound:.4g} > {report.claim} = "
                  f"{report.claimed_epsilon:.4g} at {report.confidence:.0%} "
                  "confidence")
  if est.one_run_final is None:  # no fair-coin assignment
    audit_text += ("; no one-run bounds without CanaryConfig("
                   "assignment=\"coin\")")
  noise_verdict, noise_text = noise_check_verdict(report.noise_check)
  return Headline(
      delta=report.delta, confidence=report.confidence, analytical_name=name,
      analytical_epsilon=bound,
      epsilon_final=estimate(
          f"{_F}: epsilon_final (mean-only)",
          est.final_mean_only, bound),
      epsilon_all=epsilon_all, epsilon_all_missing=missing,
      strongest_bound_name=strongest,
      strongest_bound=verdict.largest_bound,
      audit_verdict=verdict.verdict, audit_text=audit_text,
      noise_check_verdict=noise_verdict, noise_check_text=noise_text)
