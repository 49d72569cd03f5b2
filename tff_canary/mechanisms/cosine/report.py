"""The report section of a run scored by a cosine table (NumPy only).

The default section (`protocol.Mechanism.report_section`): DP-FedAvg's
Gaussian noise, TFF's distributed DP and any mechanism whose canaries'
evidence is the cosine table. `build` recomputes every estimate of the
table at any delta and confidence (`table_estimates.estimate_table`),
takes the analytical epsilons from the run's mechanism
(`protocol.Mechanism.claim`; docs/method/accounting.md) and audits the
claim the canaries face (`canary_claim`; `audit.audit_table`); the plots
are this section's (`PLOT_FILES`).

The analytical bound: no attack on a canary can exceed the epsilon of the
rounds it took part in, composed without amplification, if the mechanism is
what its ledger claims (by adaptive composition the other rounds add
nothing). So every estimate or bound above the analytical epsilon of the
run's largest participation is flagged, with its interval: estimator noise,
or the mechanism is not what it claims.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, ClassVar, Optional

from tff_canary.mechanisms import analytical_epsilons
from tff_canary.mechanisms import canary_claim as canary_claim_lib
from tff_canary.mechanisms import protocol
from tff_canary.mechanisms import records as records_lib
from tff_canary.mechanisms import section as section_lib
from tff_canary.stats import results
from tff_canary.stats.audit import audit
from tff_canary.stats.audit import table_estimates
from tff_canary.stats.canaries.cosine_table import CosineTable

_F, _A = table_estimates.FINAL_MODEL, table_estimates.ALL_ITERATES
# The figures report.md embeds (plots/, `plots.write_report_plots`): alt text.
PLOT_FILES = {"cosines.png": "cosines",
              "max_cosine_by_round.png": "max cosine by round",
              "epsilons.png": "epsilons"}
# The paper's estimates that are shown but never flagged: over many rounds the
# Gaussian fit to the maxima overshoots the mechanism's epsilon.
PAPER_ESTIMATES = frozenset(
    {f"{_A}: epsilon_all (Gaussian fit to maxima, paper)"})
# The table's bound rows -> the same bounds in the audit (`audit.table_bounds`).
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

ALL_ITERATE_ROWS = frozenset(k for k in AUDITED_AS if k.startswith(_A))


def _as_final(bound: str) -> str:
  """"tight one-run bound all" -> "tight one-run bound final"."""
  return bound.removesuffix(" all") + " final"


@dataclasses.dataclass(frozen=True)
class CosineSection:
  """A cosine table's estimates, analytical epsilons and audit, frozen
  (`report` module docstring)."""

  title: ClassVar[str] = ""
  plot_files: ClassVar[dict[str, str]] = PLOT_FILES

  confidence: float
  claim: str
  claimed_epsilon: float
  estimates: table_estimates.TableEstimates
  verdict: audit.AuditVerdict
  # The mechanism's claim (`protocol.AnalyticalClaim`) and the one the
  # canaries face (`canary_claim.choose`).
  analytical_claim: protocol.AnalyticalClaim
  canary_claim: canary_claim_lib.CanaryClaim
  table: CosineTable = dataclasses.field(repr=False, compare=False)
  insertion: str = "server"  # the mode (`records.RunRecords.insertion`)

  @property
  def analytical(self) -> dict[str, float]:
    return self.analytical_claim.epsilons

  @property
  def max_participation(self) -> int:
    return self.analytical_claim.max_participation

  @property
  def num_inserted(self) -> int:
    return self.estimates.num_inserted

  @property
  def num_held_out(self) -> int:
    return self.estimates.num_held_out

  @property
  def analytical_bound(self) -> tuple[str, float]:
    """(name, epsilon): the analytical epsilon no attack on a correct
    mechanism can exceed, for the run's largest participation."""
    name = canary_claim_lib.participation_name(self.analytical)
    return name, self.analytical[name]

  def claim_line(self) -> str:
    """Which claim the audit tests and why (`CanaryClaim.line`)."""
    return self.canary_claim.line(self.claim, self.claimed_epsilon,
                                  self.analytical)

  def above_analytical_bound(self) -> list[dict[str, Any]]:
    """What is evidence against `analytical_bound`, with intervals: an
    estimate whose whole interval lies above it, or a bound (which holds with
    its confidence) above it. Neither the paper's nominal epsilon_lo nor its
    Gaussian fit to maxima is flagged: their numbers carry no guarantee."""
    bound_name, bound = self.analytical_bound
    out = []
    for name, kind, result in self.estimates.rows():
      interval = getattr(result, "interval", None)
      low = interval.low if kind == "estimate" else result.epsilon
      if kind == "nominal bound" or name in PAPER_ESTIMATES or not low > bound:
        continue
      out.append(dict(
          name=name, kind=kind, epsilon=result.epsilon,
          interval=None if interval is None else [interval.low,
                                                  interval.high],
          analytical=bound_name, analytical_epsilon=bound))
    return out

  def _flag(self, item: dict[str, Any]) -> str:
    interval = ("" if item["interval"] is None else
                f" ({results.format_confidence(self.confidence)} CI [{item['interval'][0]:.4g}, "
                f"{item['interval'][1]:.4g}])")
    what = ("its whole interval is above" if item["kind"] == "estimate"
            else "a bound that holds with its confidence is above")
    return (f"{item['name']} = {item['epsilon']:.4g}{interval}: {what} the "
            f"analytical ε for {item['analytical']} = "
            f"{item['analytical_epsilon']:.4g}, so the mechanism is likely "
            "not what it claims (check the clip, the noise and the "
            "accounting)")

  def known_canaries_line(self) -> str:
    """Which statistics had the other inserted canaries removed (a table
    of an older version that removed them says at what norm)."""
    removed = self.table.known_canaries_removed
    if removed == "final_and_all_iterates":
      return ("other inserted canaries: their projections removed from every "
              "round's aggregate and from the final model, exactly "
              "(orthogonal canaries)")
    if removed == "all_iterates" and self.insertion != "server":
      return ("other inserted canaries: removed from each round's aggregate "
              "(from the weights, (θ_{r-1} − θ_r) / server_learning_rate) at "
              "min(canary_norm, the round's clip), the norm a canary client "
              "enters TFF's sum with, for the all-iterates cosines; not from "
              "the final model")
    if removed == "all_iterates":  # older tables
      return ("other inserted canaries: removed from each round's aggregate "
              "for the all-iterates cosines; not from the final model (its "
              "known part cannot be subtracted in training)")
    return ("other inserted canaries: not removed (gaussian canaries, the "
            "paper's construction); they add noise to every statistic")

  def _audit_detail(self, name: str) -> str:
    """How the audit uses the bound of row `name`, at its own level."""
    audited = self.verdict.bounds.get(AUDITED_AS.get(name))
    if AUDITED_AS.get(name) in self.verdict.powerless:
      return audit.POWERLESS_DETAIL
    if audited is None:
      if (name in ALL_ITERATE_ROWS and audit.repeats_final(self.table)
          and _as_final(AUDITED_AS[name]) in self.verdict.bounds):
        return audit.REPEATS_FINAL_DETAIL
      return "; not in the audit"
    level = self.verdict.per_bound_confidence
    if math.isclose(level, self.confidence):
      return "; the audit uses it at this level"
    return (f"; in the audit: {results.format_number(audited.epsilon)} at "
            f"{results.format_confidence(level)}, not {results.format_confidence(self.confidence)} (Bonferroni over "
            f"{len(self.verdict.bounds)} bounds)")

  def rows(self) -> list[tuple[str, str, float, str]]:
    """(name, kind, epsilon, detail) rows of the report's table."""
    out = []
    for name in self.analytical:
      row = self.analytical_claim.row(name)
      out.append(row[:3] + (row[3] + self.canary_claim.row_note(name),))
    above = {item["name"] for item in self.above_analytical_bound()}
    bound = self.analytical_bound[1]
    for name, kind, result in self.estimates.rows():
      if kind == "estimate":
        detail = (f"{results.format_confidence(self.confidence)} CI [{result.interval.low:.4g}, "
                  f"{result.interval.high:.4g}]")
        if name in PAPER_ESTIMATES:
          detail += ("; the paper's construction, which overshoots over many "
                     "rounds (docs/method/which-epsilon.md); never flagged")
        elif name not in above and result.interval.low <= bound <= (
            result.interval.high):
          detail += "; consistent with the analytical ε"
      elif kind == "nominal bound":
        detail = (f"paper's construction; {results.format_confidence(self.confidence)} is nominal "
                  "only; not in the audit")
      else:
        detail = (f"holds with {results.format_confidence(self.confidence)} confidence"
                  + self._audit_detail(name))
      if kind != "estimate" and getattr(result, "saturated", False):
        detail = f"saturated (ceiling {result.ceiling:.4g}); {detail}"
      if name in above:
        detail += "; ABOVE THE ANALYTICAL ε (see the flag below)"
      out.append((name, kind, result.epsilon, detail))
    return out

  def headline_parts(self) -> dict[str, Any]:
    """The headline (module docstring): estimates read against the
    analytical bound, named apart when it is not the claim the canaries
    face (Poisson-sampled canaries)."""
    name, claim = self.canary_claim.name, self.canary_claim.epsilon
    target = self.analytical_bound  # what the estimates target
    bound = target[1]
    est, verdict = self.estimates, self.verdict
    epsilon_all = None
    if est.all_iterates is not None:
      epsilon_all = section_lib.estimate(f"{_A}: epsilon_all",
                                          est.all_iterates, bound)
    missing = ("not estimated: " + "; ".join(est.warnings) if est.warnings
               else "not estimated: no round's aggregate was recorded")
    # The strongest bound by its name in the report's table.
    strongest = {v: k for k, v in AUDITED_AS.items()}.get(verdict.strongest,
                                                           verdict.strongest)
    audit_text = (
        f"{verdict.verdict} with the {self.claim} = "
        f"{self.claimed_epsilon:.4g} ({len(verdict.bounds)} "
        f"bound{'' if len(verdict.bounds) == 1 else 's'}, "
        f"{results.format_confidence(self.confidence)} together)")
    if verdict.beyond_reach:
      audit_text = section_lib.beyond_reach_text(verdict, self.claim)
    if verdict.refuted:
      audit_text = (f"REFUTED: {strongest} = "
                    f"{verdict.largest_bound:.4g} > {self.claim} = "
                    f"{self.claimed_epsilon:.4g} at {results.format_confidence(self.confidence)} "
                    "confidence")
    # A claim of inf: one line, no clause on what else was not tested.
    vacuous = verdict.vacuous
    if vacuous:
      audit_text = section_lib.vacuous_text(self.claim)
    for other in () if vacuous else self.canary_claim.not_audited:
      audit_text += (f"; the clients' {other} = "
                     f"{self.analytical[other]:.4g} is not tested: the "
                     "canaries were not sampled like the clients (details)")
    if est.one_run_final is None and not vacuous:  # no fair-coin assignment
      audit_text += ("; no one-run bounds without CanaryConfig("
                     "assignment=\"coin\")")
    return dict(
        analytical_name=name, analytical_epsilon=claim,
        estimates_target=None if target[0] == name else target,
        epsilon_final=section_lib.estimate(
            f"{_F}: epsilon_final (mean-only)", est.final_mean_only, bound),
        epsilon_all=epsilon_all, epsilon_all_missing=missing,
        strongest_bound_name=strongest,
        strongest_bound=verdict.largest_bound,
        strongest_bound_confidence=verdict.per_bound_confidence,
        audit_verdict=verdict.verdict, audit_text=audit_text,
        audit_reach=verdict.reach_dict())

  def notes(self) -> list[str]:
    return ([f"audit ({self.claim}): {self.verdict}",
             f"claim: {self.claim_line()}"]
            + [f"flag: {self._flag(item)}"
               for item in self.above_analytical_bound()]
            + [self.known_canaries_line()])

  def settings(self, config: dict[str, Any]) -> list[str]:
    return [f"noise multiplier {config['noise_multiplier']}"]

  def markdown(self, report) -> tuple[list[str], list[str]]:
    before = []
    line = report.participation_line()
    if line is not None and report.participation_mismatch:
      before += [f"**{line}**", ""]
    elif line is not None:
      before += [f"Participation: {line}.", ""]
    known = self.known_canaries_line()
    before += [known[0].upper() + known[1:] + ".", ""]
    mode, *findings = report.insertion.lines()
    before += [mode[0].upper() + mode[1:] + ".", ""]
    before += [f"- **{f[0].upper() + f[1:]}**." for f in findings]
    before += [""] if findings else []
    after = ["", f"**Audit** of the {self.claim}: {self.verdict}.", "",
             f"Claim: {self.claim_line()}.", ""]
    if report.noise_check is not None:
      after += [f"**{report.noise_check_line()}**", ""]
    for item in self.above_analytical_bound():
      after += [f"**Flag**: {self._flag(item)}.", ""]
    after += [
        "Point estimates (ε-final, ε-all) are estimates of what the canary "
        "attack achieves, not bounds. Only the bounds that hold with their "
        "confidence decide the audit; ε_lo saturates with the number of "
        "canaries, which is why the point estimates exist. The paper's ε_lo "
        f"is shown for comparison; its {results.format_confidence(self.confidence)} is nominal "
        "only."]
    if report.accuracy is not None:
      after += ["", f"Final model: accuracy {report.accuracy:.4f}, loss "
                f"{report.loss:.4f}."]
    if self.estimates.warnings:
      after += ["", "Warnings:"] + [f"- {w}" for w in self.estimates.warnings]
    return before, after

  def as_dict(self, report) -> dict[str, Any]:
    detail = self.analytical_claim.detail
    return dict(
        verdict=self.verdict.as_dict(),
        max_participation=self.max_participation,
        analytical_bound=dict(zip(("name", "epsilon"),
                                  self.analytical_bound)),
        canary_claim=self.canary_claim.as_dict(),
        claim_line=self.claim_line(),
        above_analytical_bound=self.above_analytical_bound(),
        participation_line=report.participation_line(),
        participation_mismatch=report.participation_mismatch,
        known_canaries_removed=self.table.known_canaries_removed,
        known_canaries_line=self.known_canaries_line(),
        ddp_bound=None if detail is None else detail.as_dict(),
        estimates=self.estimates.as_dict())

  def write_plots(self, report, directory: str) -> list[str]:
    from tff_canary.mechanisms.cosine import plots  # pylint: disable=g-import-not-at-top
    return plots.write_report_plots(report, directory)


def build(records: records_lib.RunRecords, *, delta: float,
          confidence: float, claimed_epsilon: Optional[float]
          ) -> CosineSection:
  """The section of a run scored by a cosine table, from its records; the
  arguments are checked by `report.build_report`."""
  table, config = records.table, records.config
  estimates = table_estimates.estimate_table(table, delta=delta,
                                             confidence=confidence)
  analytical_claim, faced = analytical_epsilons.of_run(records, delta)
  claim = "claimed ε"
  if claimed_epsilon is None:
    claimed_epsilon = faced.epsilon
    claim = f"{analytical_claim.label} ({faced.name})"
  # Poisson and DDP claims are not Gaussian: Steinke et al.'s bound (`audit`).
  gaussian_claim = analytical_claim.gaussian and not faced.amplified
  verdict = audit.audit_table(table, claimed_epsilon=claimed_epsilon,
                              delta=delta, confidence=confidence,
                              gaussian_claim=gaussian_claim)
  return CosineSection(
      confidence=confidence, claim=claim, claimed_epsilon=claimed_epsilon,
      estimates=estimates, verdict=verdict, analytical_claim=analytical_claim,
      canary_claim=faced, table=table,
      insertion=records.insertion)
