"""The report section of a DP-FTRL run (NumPy only).

A DP-FTRL run (docs/method/dp-ftrl.md) has no ledger and no cosine table:
its canaries' evidence is their score in every round, u_{j,t}
(tree_scores.npy, units of the node noise), whose noise is correlated
across the rounds of a tree. `build` (the tree's
`protocol.Mechanism.report_section`) computes from the scores, the
candidates' schedules (`experiment_config.run_canaries`) and the claimed
tree (`tree_noise.tree_noise` restarted every epoch) the `TreeSection`:
the analytical epsilons (`tree_accounting.tree_epsilons`), the epsilons
each estimate targets (`tree_targets`; docs/method/dp-ftrl.md, "Three ε"),
the estimates (`tree_audit.ftrl_estimates`) and the audit
(`tree_audit.audit_ftrl`: contribution per epoch and one-run bounds at the
report's family-wise level). The noise self-test is the run's
noise_check.json. It draws no plots.
"""

from __future__ import annotations

import dataclasses
from typing import Any, ClassVar, Optional

import numpy as np

from tff_canary.harness.config import experiment_config
from tff_canary.harness.mechanisms import registry
from tff_canary.harness.reporting import headline as headline_lib
from tff_canary.harness.recording import run_dir as run_dir_lib
from tff_canary.stats.correlated import tree_audit
from tff_canary.stats.correlated import tree_targets

FINAL = "final model: epsilon_final (sum of the rounds' scores)"
SCHEDULED = "all iterates: epsilon_all (scheduled GLS statistic T)"
MAX = "all iterates: epsilon_all (max statistic M, Gaussian fit, paper)"
INDEPENDENT = "all iterates: independent-rounds statistic (contrast)"
WORST_CASE = "DP-FTRL rounds, worst-case participant (exact)"
SCHEDULES = "DP-FTRL rounds, this run's canaries (expected)"
# What each estimate targets (`tree_targets`), by name in the headline.
TARGET_NAMES = {FINAL: "final model", SCHEDULED: "this run's canaries"}


@dataclasses.dataclass(frozen=True)
class TreeSection:
  """A DP-FTRL run's estimates, targets and audit, frozen (module
  docstring; a `report` section)."""

  title: ClassVar[str] = " with DP-FTRL"
  plot_files: ClassVar[dict[str, str]] = {}  # no figures

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

  @property
  def analytical(self) -> dict[str, float]:
    claim = self.audit.claim
    if hasattr(claim, "sensitivity"):  # k participations b apart, no restart
      k, b = claim.sensitivity.participations, claim.sensitivity.separation
      return {f"DP-FTRL, at most {k} participation{'s' if k > 1 else ''} "
              f"{b} round{'s' if b > 1 else ''} apart (exact GDP, μ = sens / "
              "z)": claim.epsilon}
    if not hasattr(claim, "rdp_epsilon"):  # a matrix mechanism's rounds
      epochs = len(claim.rounds_per_block)
      return {f"DP-FTRL, {epochs} epoch{'s' if epochs > 1 else ''} (exact "
              "GDP, μ = sens / z)": claim.epsilon}
    trees = len(claim.rounds_per_tree)
    return {f"DP-FTRL, {trees} tree{'s' if trees > 1 else ''} (exact, node "
            "release)": claim.epsilon,
            "DP-FTRL (RDP, dp-accounting)": claim.rdp_epsilon}

  def _estimates(self) -> list[tuple[str, Any]]:
    e = self.estimates
    return [(FINAL, e.final), (SCHEDULED, e.scheduled), (MAX, e.max),
            (INDEPENDENT, e.independent)]

  def headline_parts(self) -> dict[str, Any]:
    """The headline (`headline`), for DP-FTRL: each estimate names the
    epsilon it targets (`tree_targets`)."""
    name, bound = next(iter(self.analytical.items()))
    verdict, t = self.audit.bounds, self.targets
    final, scheduled = (
        headline_lib.estimate(row, result, bound, headline_lib.Target(
            TARGET_NAMES[row], target)) for row, result, target in (
                (FINAL, self.estimates.final, t.final_epsilon),
                (SCHEDULED, self.estimates.scheduled, t.schedules_epsilon)))
    audit_text = (f"consistent with the {self.claim} = "
                  f"{self.claimed_epsilon:.4g} (contribution per epoch and "
                  f"{len(verdict.bounds)} bounds, {self.confidence:.0%} "
                  "together)")
    if verdict.beyond_reach:  # the bounds tested nothing (`audit`)
      audit_text = ("not refuted by the contribution check; the bounds: "
                    + headline_lib.beyond_reach_text(verdict, self.claim))
    if self.audit.refuted:
      audit_text = (f"REFUTED by {', '.join(self.audit.caught_by)} at "
                    f"{self.confidence:.0%} confidence")
      if verdict.refuted:
        audit_text += (f": {verdict.strongest} = {verdict.largest_bound:.4g}"
                       f" > {self.claim} = {self.claimed_epsilon:.4g}")
      if "contribution" in self.audit.caught_by:
        contribution = 1 + self.audit.contribution_excess
        audit_text += (f"; contribution {contribution:.3g} per epoch > 1 "
                       "(more participations than scheduled, or updates "
                       "larger than the clip)")
    return dict(
        analytical_name=name, analytical_epsilon=bound,
        epsilon_final=final, epsilon_all=scheduled,
        epsilon_all_missing="", strongest_bound_name=verdict.strongest,
        strongest_bound=verdict.largest_bound,
        audit_verdict="refuted" if self.audit.refuted else (
            verdict.verdict),  # "beyond reach" when the bounds are
        audit_text=audit_text, audit_reach=verdict.reach_dict(),
        targets=(headline_lib.Target(
            "exact, worst-case participant (no attack on the rounds exceeds "
            "it)", t.worst_case_epsilon), headline_lib.Target(
                "expected for this run's canaries", t.schedules_epsilon)))

  def rows(self) -> list[tuple[str, str, float, str]]:
    """(name, kind, epsilon, detail) rows of the report's table."""
    t = self.targets
    details = ["what the accounting guarantees: the release of every node "
               "of the trees", "what the accounting guarantees (Rényi DP of "
               "the same release, looser)"]
    if len(self.analytical) == 1:  # a matrix mechanism's
      details = ["what the accounting guarantees: the rounds released as "
                 "C x + ξ, sens = max over one round per epoch of ‖C a‖"]
    out = [(name, "analytical", epsilon, detail) for (name, epsilon), detail
           in zip(self.analytical.items(), details)]
    out.append((WORST_CASE, "analytical", t.worst_case_epsilon,
                f"μ = {t.worst_case_mu:.4g} = √(Σ_e max_t (K_e⁻¹)_tt) / z: "
                "what the released rounds show about the participant they "
                "show most; no attack on the rounds can exceed it"))
    out.append((SCHEDULES, "expected", t.schedules_epsilon,
                f"μ = {t.schedules_mu:.4g}, the mean of the inserted "
                "canaries' μ_j = √(a_jᵀ K⁻¹ a_j) / z (largest "
                f"{t.largest_schedule_mu:.4g}): what ε-all by T estimates; "
                "not a ceiling"))
    details = {
        FINAL: (f"; targets {t.final_epsilon:.4g}, the final model's ε "
                f"(the sum of the rounds, μ = {t.final_mu:.4g})"),
        SCHEDULED: (f"; targets {t.schedules_epsilon:.4g}, the ε expected "
                    "for this run's canaries"),
        MAX: ("; a Gaussian fit to maxima (the paper's construction): "
              "targets none of these ε, not the mechanism's ε "
              "(docs/method/estimates.md)"),
        INDEPENDENT: ("; its N(0, 1) null ignores the tree's correlated "
                      "noise: not an estimate of ε")}
    for name, result in self._estimates():
      out.append((name, "estimate", result.epsilon,
                  f"{self.confidence:.0%} CI [{result.interval.low:.4g}, "
                  f"{result.interval.high:.4g}]" + details[name]))
    level = self.audit.bounds.per_bound_confidence
    for name, result in self.audit.bounds.bounds.items():
      out.append((name, "bound", result.epsilon,
                  f"holds with {level:.2%} confidence (Bonferroni over the "
                  "audit's checks and bounds)"))
    return out

  def notes(self) -> list[str]:
    return [str(self.audit)]

  def settings(self, config: dict[str, Any]) -> list[str]:
    return [*self.noise_settings,
            f"noise multiplier {config['noise_multiplier']}",
            f"clip {config['clip']}"]

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
                   bounds=a.bounds.as_dict(), text=str(a)),
        num_inserted=self.num_inserted, num_held_out=self.num_held_out)


def build(rd: run_dir_lib.RunDir, config: dict[str, Any], *, delta: float,
          confidence: float, claimed_epsilon: Optional[float]
          ) -> TreeSection:
  """The section of a finished DP-FTRL run (module docstring); the
  arguments are checked by `report.build_report`."""
  if config.get("assignment") != "coin":
    raise run_dir_lib.RunDirError(
        f"{rd.file(run_dir_lib.CONFIG)} has assignment="
        f"{config.get('assignment')!r}: the DP-FTRL report's one-run bounds "
        "need candidates inserted by fair coins (assignment='coin').")
  # The epochs are the client sampler's (the canaries' schedule may be a
  # worst-case placement, `SharedRounds`, which has none).
  resolved = experiment_config.resolve(
      experiment_config.ExperimentConfig.from_json(config),
      config["num_clients"], config["dim"])
  canaries = experiment_config.run_canaries(resolved.values,
                                            resolved.canary_schedule)
  recorded = rd.load_participation()
  if not np.array_equal(recorded, canaries.participation.events):
    raise run_dir_lib.RunDirError(
        f"{rd.file(run_dir_lib.PARTICIPATION)} does not hold the inserted "
        f"canaries that {rd.file(run_dir_lib.CONFIG)}'s seeds give: the "
        "files are from different runs.")
  scores = rd.load_tree_scores(canaries.num_canaries)
  num_rounds = config["num_rounds"]
  if scores.shape[0] != num_rounds:
    raise run_dir_lib.RunDirError(
        f"{rd.file(run_dir_lib.TREE_SCORES)} has {scores.shape[0]} rounds "
        f"of the run's {num_rounds}: the run has not finished (--resume).")
  mechanism = registry.of_config(config)
  noise = mechanism.round_noise(config, num_rounds,
                                resolved.sampler.rounds_per_epoch)
  # The noise's blocks: epochs, or the whole run without restarts (its
  # participation rule, `separation.SeparatedNoise`, is then checked).
  per_epoch = (mechanism.restart_every(config,
                                       resolved.sampler.rounds_per_epoch)
               or num_rounds)
  z = config["noise_multiplier"]
  u, a = scores.T, canaries.schedule_matrix()
  audit = tree_audit.audit_ftrl(
      u, a, canaries.inserted, noise=noise, rounds_per_epoch=per_epoch,
      noise_multiplier=z, delta=delta, level=1.0 - confidence,
      claimed_epsilon=claimed_epsilon,
      participation=getattr(noise, "rule", None))
  estimates = tree_audit.ftrl_estimates(
      u, a, canaries.inserted, noise=noise, noise_multiplier=z, delta=delta,
      confidence=confidence)
  targets = tree_targets.tree_targets(
      noise, a, canaries.inserted, rounds_per_epoch=per_epoch,
      noise_multiplier=z, delta=delta)
  return TreeSection(
      confidence=confidence,
      claimed_epsilon=(audit.claim.epsilon if claimed_epsilon is None
                       else claimed_epsilon),
      claim=("analytical ε (DP-FTRL, exact)" if claimed_epsilon is None
             else "claimed ε"),
      estimates=estimates, audit=audit, targets=targets,
      num_inserted=int(canaries.inserted.sum()),
      num_held_out=int((~canaries.inserted).sum()),
      noise_settings=tuple(mechanism.section_settings(config)))
