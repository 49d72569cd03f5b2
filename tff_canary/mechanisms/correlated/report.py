"""The report section of a DP-FTRL run (NumPy only).

A DP-FTRL run (docs/method/dp-ftrl.md) has no ledger and no cosine table:
its canaries' evidence is their score in every round, u_{j,t}
(tree_scores.npy, units of the node noise), whose noise is correlated
across the rounds of a tree. `build` (the tree's
`protocol.Mechanism.report_section`) computes from the run's records
(`records.RunRecords`: the scores, the candidates' schedules and coins) and
the claimed noise (`round_noise`: the tree or a strategy's, restarted every
epoch or under a rule) the `TreeSection`:
the analytical epsilons (`tree_accounting.tree_epsilons`), the epsilons
each estimate targets (`tree_targets`; docs/method/dp-ftrl.md, "Three ε"),
the estimates (`tree_audit.ftrl_estimates`) and the audit
(`tree_audit.audit_ftrl`: the contribution and one-run bounds at the
report's family-wise level). The noise self-test is the run's
noise_check.json. Its plot is epsilons.png (`write_plots`).
"""

from __future__ import annotations

import dataclasses
import os
from typing import Any, ClassVar, Optional

import numpy as np

from tff_canary.mechanisms import records as records_lib
from tff_canary.mechanisms import registry
from tff_canary.mechanisms import section as section_lib
from tff_canary.stats import results
from tff_canary.stats.correlated import tree_audit
from tff_canary.stats.correlated import tree_targets

FINAL = "final model: epsilon_final (sum of the rounds' scores)"
SCHEDULED = "all iterates: epsilon_all (scheduled GLS statistic T)"
MAX = "all iterates: epsilon_all (max statistic M, Gaussian fit, paper)"
INDEPENDENT = "all iterates: independent-rounds statistic (contrast)"
MECHANISM = ("all iterates: the mechanism's ε (T's mean gap, claimed noise)")
WORST_CASE = "DP-FTRL rounds, worst-case participant (exact)"
SCHEDULES = "DP-FTRL rounds, this run's canaries (expected)"
# What each estimate targets (`tree_targets`), by name in the headline.
TARGET_NAMES = {FINAL: "final model", SCHEDULED: "this run's canaries"}


@dataclasses.dataclass(frozen=True)
class TreeSection:
  """A DP-FTRL run's estimates, targets and audit, frozen (module
  docstring; a `report` section)."""

  title: ClassVar[str] = " with DP-FTRL"
  plot_files: ClassVar[dict[str, str]] = {
      "epsilons.png": "every estimate and bound against the analytical ε "
                      "and the worst-case rounds' ε"}

  confidence: float
  claimed_epsilon: float
  claim: str
  estimates: tree_audit.FtrlEstimates
  audit: tree_audit.FtrlAudit
  targets: tree_targets.TreeTargets
  num_inserted: int
  num_held_out: int
  # The mechanism's settings lines (`Mechanism.section_settings`).
  noise_settings: tuple[str, ...] = ("tree aggregation restarted every "
                                     "epoch",)
  # The claimed noise's worst case as a formula (`LinearNoise.
  # worst_case_formula`) and where the canaries were placed (`placement`).
  worst_case_formula: str = "√(Σ_e max_t (K_e⁻¹)_tt) / z, one round per epoch"
  placement: str = ""
  worst_case_placement: bool = False

  @property
  def analytical(self) -> dict[str, float]:
    return {name: epsilon for name, epsilon, _ in self.audit.claim.rows()}

  @property
  def bound_confidence(self) -> str:
    """Each bound's confidence, and why it is not the report's."""
    verdict = self.audit.bounds
    n = len(verdict.bounds)
    return (f"{results.format_confidence(verdict.per_bound_confidence)} "
            f"confidence: the audit's {results.format_confidence(self.confidence)}"
            f" split by Bonferroni over its {self.audit.checks} checks and "
            f"{n} bound{'s' if n > 1 else ''}")

  def _contribution_words(self) -> str:
    return f"the contribution {self.audit.contribution_unit}"

  def _spread_text(self) -> str:
    """The held-out T's spread beside epsilon-all, and the mechanism's
    reading when it differs (`tree_audit.FtrlEstimates.mechanism`)."""
    e = self.estimates.scheduled
    text = f"held-out T std {e.null_std:.3g} (the noise alone: 1)"
    mechanism = self.estimates.mechanism
    if mechanism is None or not e.spread_above_noise:
      return text
    return (f"{text}: the attack's ε with this run's spread; the mechanism's "
            f"(mean gap, claimed noise) {results.format_number(mechanism.epsilon)}"
            f" [{mechanism.interval.low:.4g}, {mechanism.interval.high:.4g}]")

  def _estimates(self) -> list[tuple[str, Any]]:
    e = self.estimates
    out = [(FINAL, e.final), (SCHEDULED, e.scheduled)]
    if e.mechanism is not None:
      out.append((MECHANISM, e.mechanism))
    return out + [(MAX, e.max), (INDEPENDENT, e.independent)]

  def headline_parts(self) -> dict[str, Any]:
    """The headline (`headline`), for DP-FTRL: each estimate names the
    epsilon it targets (`tree_targets`)."""
    name, bound = next(iter(self.analytical.items()))
    verdict, t = self.audit.bounds, self.targets
    final, scheduled = (
        section_lib.estimate(row, result, bound, section_lib.Target(
            TARGET_NAMES[row], target)) for row, result, target in (
                (FINAL, self.estimates.final, t.final_epsilon),
                (SCHEDULED, self.estimates.scheduled, t.schedules_epsilon)))
    a, confidence = self.audit, results.format_confidence(self.confidence)
    n = len(verdict.bounds)
    audit_text = (f"consistent with the {self.claim} = "
                  f"{self.claimed_epsilon:.4g} ({self._contribution_words()} "
                  f"and {n} bound{'s' if n > 1 else ''}, {confidence} "
                  "together)")
    if verdict.beyond_reach:  # the bounds tested nothing (`audit`)
      audit_text = ("not refuted by the contribution check; the bounds: "
                    + section_lib.beyond_reach_text(verdict, self.claim))
    if a.refuted:
      audit_text = (f"REFUTED by {', '.join(a.caught_by)} at {confidence} "
                    "confidence")
      if verdict.refuted:
        audit_text += (f": {verdict.strongest} = {verdict.largest_bound:.4g}"
                       f" > {self.claim} = {self.claimed_epsilon:.4g}")
      if "contribution" in a.caught_by:
        audit_text += (f"; contribution {a.contribution:.3g} participations "
                       f"{a.contribution_unit} > "
                       f"{a.contribution_scheduled:.3g} scheduled (more "
                       "participations than scheduled, or updates larger "
                       "than the clip)")
    expected = "expected for this run's canaries" + (
        " (all on the worst-case rounds)" if self.worst_case_placement
        else "")
    return dict(
        analytical_name=name, analytical_epsilon=bound,
        epsilon_final=final, epsilon_all=scheduled,
        epsilon_all_note=self._spread_text(),
        epsilon_all_missing="", strongest_bound_name=verdict.strongest,
        strongest_bound=verdict.largest_bound,
        strongest_bound_confidence=verdict.per_bound_confidence,
        audit_verdict="refuted" if a.refuted else (
            verdict.verdict),  # "beyond reach" when the bounds are
        audit_text=audit_text, audit_reach=verdict.reach_dict(),
        targets=(section_lib.Target(
            "exact, worst-case participant (no attack on the rounds exceeds "
            "it)", t.worst_case_epsilon), section_lib.Target(
                expected, t.schedules_epsilon)))

  def rows(self) -> list[tuple[str, str, float, str]]:
    """(name, kind, epsilon, detail) rows of the report's table."""
    t = self.targets
    out = [(name, "analytical", epsilon, detail)
           for name, epsilon, detail in self.audit.claim.rows()]
    out.append((WORST_CASE, "analytical", t.worst_case_epsilon,
                f"μ = {t.worst_case_mu:.4g} = {self.worst_case_formula}: "
                "what the released rounds show about the participant they "
                "show most; no attack on the rounds can exceed it"))
    placed = ("; every canary on the worst-case rounds, so the worst "
              "case's μ" if self.worst_case_placement else "")
    out.append((SCHEDULES, "expected", t.schedules_epsilon,
                f"μ = {t.schedules_mu:.4g}, the mean of the inserted "
                "canaries' μ_j = √(a_jᵀ K⁻¹ a_j) / z (largest "
                f"{t.largest_schedule_mu:.4g}{placed}): what ε-all by T "
                "estimates; not a ceiling"))
    scheduled = self.estimates.scheduled
    spread = (f"; held-out T std {scheduled.null_std:.3g} (the claimed "
              "noise alone gives 1)")
    if scheduled.spread_above_noise:
      spread += (": the clients' updates spread the canaries' scores beyond "
                 "the noise, so this attack's ε is below the mechanism's "
                 "(next row)")
    details = {
        FINAL: (f"; targets {t.final_epsilon:.4g}, the final model's ε "
                f"(the sum of the rounds, μ = {t.final_mu:.4g})"),
        SCHEDULED: ("; the attack's ε, T's mean gap over the held-out T's "
                    f"std{spread}"),
        MECHANISM: (f"; targets {t.schedules_epsilon:.4g}, the ε expected "
                    "for this run's canaries: T's mean gap in units of the "
                    "claimed noise, the mechanism's ε if the noise is the "
                    "claimed one (the noise self-test checks it)"),
        MAX: ("; a Gaussian fit to maxima (the paper's construction): "
              "targets none of these ε, not the mechanism's ε "
              "(docs/method/estimates.md)"),
        INDEPENDENT: (f"; its N(0, 1) null ignores the {self.audit.noise_kind}"
                      " noise's correlation across rounds: not an estimate "
                      "of ε")}
    confidence = results.format_confidence(self.confidence)
    for name, result in self._estimates():
      out.append((name, "estimate", result.epsilon,
                  f"{confidence} CI [{result.interval.low:.4g}, "
                  f"{result.interval.high:.4g}]" + details[name]))
    for name, result in self.audit.bounds.bounds.items():
      out.append((name, "bound", result.epsilon,
                  f"holds with {self.bound_confidence}"))
    return out

  def notes(self) -> list[str]:
    return [str(self.audit)]

  def write_plots(self, report, directory: str) -> list[str]:
    """epsilons.png (`epsilon_plot.draw`): the estimates with their
    intervals and the bounds, against the analytical epsilons, the
    worst-case rounds' and the one this run's canaries are expected at."""
    from tff_canary.mechanisms import epsilon_plot
    from tff_canary.mechanisms.cosine import plots  # pylint: disable=g-import-not-at-top
    t = self.targets
    lines = {f"analytical ε, {name}": value
             for name, value in self.analytical.items()}
    lines[WORST_CASE] = t.worst_case_epsilon
    lines[SCHEDULES] = t.schedules_epsilon
    rows = [(name, "estimate", result) for name, result in self._estimates()]
    rows += [(name, "bound", result)
             for name, result in self.audit.bounds.bounds.items()]
    os.makedirs(directory, exist_ok=True)
    figure = epsilon_plot.draw(
        rows, lines, confidence=self.confidence,
        title=f"Every epsilon at {report.delta_line()}",
        bound_confidence=self.audit.bounds.per_bound_confidence)
    return [plots.save(figure, os.path.join(directory, "epsilons.png"))]

  def settings(self, config: dict[str, Any]) -> list[str]:
    return [*self.noise_settings,
            f"noise multiplier {config['noise_multiplier']}",
            f"clip {config['clip']}"] + (
                [self.placement] if self.placement else [])

  def markdown(self, report) -> tuple[list[str], list[str]]:
    return [], ["", "```text", *report.notes(), "```", "",
                "The statistics and their null laws: docs/method/dp-ftrl.md. "
                "Estimates are what the canary attack achieves, not bounds; "
                "only the bounds, which hold with their confidence, and the "
                "contribution check decide the audit."]

  def as_dict(self, report) -> dict[str, Any]:
    a = self.audit
    return dict(
        aggregator=report.config["aggregator"],
        estimates={name: result.as_dict()
                   for name, result in self._estimates()},
        targets=self.targets.as_dict(),
        audit=dict(refuted=a.refuted, caught_by=list(a.caught_by),
                   level=a.level, contribution_excess=a.contribution_excess,
                   contribution_spread=a.contribution_spread,
                   contribution_t=a.contribution_t,
                   contribution_p_value=a.contribution_p_value,
                   contribution_scheduled=a.contribution_scheduled,
                   contribution_unit=a.contribution_unit,
                   bounds=a.bounds.as_dict(), text=str(a)),
        placement=self.placement,
        num_inserted=self.num_inserted, num_held_out=self.num_held_out)


def placement_text(placement: str, sampling: Optional[str],
                   worst_case_rounds: Any) -> str:
  """Where the canaries took part, for report.md's first lines."""
  if placement == "worst_case":
    return ("canaries on the accounting's worst-case rounds "
            f"{np.asarray(worst_case_rounds).tolist()}, every candidate in "
            "each (--placement=worst_case)")
  if sampling == "cyclic":
    return ("canaries each in a drawn slot of the clients' fixed order, one "
            "epoch apart (random placement)")
  return ("canaries each in a drawn round of every epoch, as the clients "
          "(random placement)")


def build(records: records_lib.RunRecords, *, delta: float,
          confidence: float, claimed_epsilon: Optional[float]
          ) -> TreeSection:
  """The section of a finished DP-FTRL run from its records (module
  docstring); the arguments are checked by `report.build_report`."""
  config, canaries = records.config, records.canaries
  num_rounds = config["num_rounds"]
  mechanism = registry.of_config(config)
  settings = mechanism.settings_of(config)  # config.json's, frozen
  noise = mechanism.round_noise(settings, num_rounds,
                                records.rounds_per_epoch)
  # The noise's blocks: epochs, or the whole run without restarts (its
  # participation rule, `separation.SeparatedNoise`, is then checked).
  per_epoch = (mechanism.restart_every(settings, records.rounds_per_epoch)
               or num_rounds)
  z = config["noise_multiplier"]
  u, a = records.scores, canaries.schedule_matrix()
  audit = tree_audit.audit_ftrl(
      u, a, canaries.inserted, noise=noise, rounds_per_epoch=per_epoch,
      noise_multiplier=z, delta=delta, level=1.0 - confidence,
      claimed_epsilon=claimed_epsilon,
      participation=noise.participation_rule)
  estimates = tree_audit.ftrl_estimates(
      u, a, canaries.inserted, noise=noise, noise_multiplier=z, delta=delta,
      confidence=confidence)
  targets = tree_targets.tree_targets(
      noise, a, canaries.inserted, rounds_per_epoch=per_epoch,
      noise_multiplier=z, delta=delta)
  placement = config.get("placement", "random")
  return TreeSection(
      worst_case_formula=noise.worst_case_formula(),
      worst_case_placement=placement == "worst_case",
      placement=placement_text(placement, config.get("sampling"),
                               noise.worst_case_rounds()),
      confidence=confidence,
      claimed_epsilon=(audit.claim.epsilon if claimed_epsilon is None
                       else claimed_epsilon),
      claim=("analytical ε (DP-FTRL, exact)" if claimed_epsilon is None
             else "claimed ε"),
      estimates=estimates, audit=audit, targets=targets,
      num_inserted=int(canaries.inserted.sum()),
      num_held_out=int((~canaries.inserted).sum()),
      noise_settings=tuple(mechanism.section_settings(settings)))
