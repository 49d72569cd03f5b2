"""The report of a DP-FTRL run (`aggregator="tree"`; NumPy only).

A DP-FTRL run (docs/method/dp-ftrl.md) has no per-round ledger and no cosine
table: its privacy is per tree, and its canaries' evidence is their score in
every round, u_{j,t} (tree_scores.npy, units of the node noise), whose noise
is correlated across the rounds of a tree. `build_tree_report` reads the run
directory and computes, from the scores, the schedules (every candidate's,
rebuilt from config.json's seeds, inserted or held out) and the claimed tree
(`tree_noise.tree_noise` restarted every epoch):

  * the analytical epsilon (`tree_accounting.tree_epsilons`): the exact
    epsilon of the node release (Gaussian DP, the claim audited) and
    dp-accounting's RDP epsilon of `SingleEpochTreeAggregationDpEvent`;
  * below it (`tree_targets`): the exact epsilon of what the released
    rounds show about the worst-case participant (no attack on the rounds
    can exceed it; equal to the node release's for the plain tree), and the
    epsilon expected for this run's inserted canaries' schedules (what
    epsilon-all by T estimates; one canary can exceed it);
  * the estimates (`tree_audit.ftrl_estimates`), each with its interval and
    the epsilon it targets: epsilon-final (the final model's score, sum over
    rounds, against the held-out canaries; the final model's epsilon),
    epsilon-all of the scheduled GLS statistic T (the strongest attack, the
    headline's epsilon-all; this run's canaries), of the max statistic M (a
    Gaussian fit to maxima, the paper's construction: it targets none of
    these, docs/method/estimates.md), and of the statistic that wrongly
    assumes independent rounds (contrast);
  * the audit (`tree_audit.audit_ftrl`): the canaries' contribution per
    epoch (participations times the norm that entered) and the one-run
    bounds, at the report's family-wise level. The noise self-test is
    the run's noise_check.json (`tree_noise_check`, before training).

The insertion mode (`insertion_notes`: server-side canaries, or canary
clients through TFF's own factory over the tree) is among the notes.

`TreeRunReport` has the interface of `report.RunReport` that the scripts and
`python -m tff_canary report` use: `headline()`, `terminal_text()`,
`as_dict()` (report.json) and `to_markdown()` (report.md). It draws no plots.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Optional

import numpy as np

from tff_canary.harness.mechanisms import analytical_epsilons
from tff_canary.harness.reporting import headline as headline_lib
from tff_canary.harness.reporting import insertion_notes
from tff_canary.harness.recording import run_dir as run_dir_lib
from tff_canary.stats import results
from tff_canary.stats import validation
from tff_canary.stats.canaries import canary_config
from tff_canary.stats.canaries import client_sampling
from tff_canary.stats.canaries import schedules
from tff_canary.stats.correlated import tree_audit
from tff_canary.stats.correlated import tree_noise
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
class TreeRunReport:
  """Everything a DP-FTRL run's report shows, frozen (module docstring)."""

  draws_plots = False  # no figures (module docstring)

  run_dir: str
  config: dict[str, Any]
  delta: float
  confidence: float
  delta_source: str
  claimed_epsilon: float
  claim: str
  estimates: tree_audit.FtrlEstimates
  audit: tree_audit.FtrlAudit
  targets: tree_targets.TreeTargets
  num_inserted: int
  num_held_out: int
  accuracy: Optional[float] = None
  loss: Optional[float] = None
  noise_check: Optional[dict[str, Any]] = None
  participation: Optional[dict[str, Any]] = None
  insertion: insertion_notes.InsertionNotes = insertion_notes.InsertionNotes(
      "server")

  @property
  def analytical(self) -> dict[str, float]:
    trees = len(self.audit.claim.rounds_per_tree)
    return {f"DP-FTRL, {trees} tree{'s' if trees > 1 else ''} (exact, node "
            "release)": self.audit.claim.epsilon,
            "DP-FTRL (RDP, dp-accounting)": self.audit.claim.rdp_epsilon}

  def _estimates(self) -> list[tuple[str, Any]]:
    e = self.estimates
    return [(FINAL, e.final), (SCHEDULED, e.scheduled), (MAX, e.max),
            (INDEPENDENT, e.independent)]

  def _target(self, name: str) -> Optional[headline_lib.Target]:
    """The epsilon the estimate `name` targets (`tree_targets`), or None."""
    value = {FINAL: self.targets.final_epsilon,
             SCHEDULED: self.targets.schedules_epsilon}.get(name)
    if value is None:
      return None
    return headline_lib.Target(TARGET_NAMES[name], value)

  def _headline_targets(self) -> tuple[headline_lib.Target, ...]:
    t = self.targets
    return (headline_lib.Target("exact, worst-case participant (no attack "
                                "on the rounds exceeds it)",
                                t.worst_case_epsilon),
            headline_lib.Target("expected for this run's canaries",
                                t.schedules_epsilon))

  def headline(self) -> headline_lib.Headline:
    """The answer in at most 8 lines (`headline`), for DP-FTRL."""
    name, bound = next(iter(self.analytical.items()))
    verdict = self.audit.bounds
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
    noise_verdict, noise_text = headline_lib.noise_check_verdict(
        self.noise_check)
    return headline_lib.Headline(
        delta=self.delta, confidence=self.confidence, analytical_name=name,
        analytical_epsilon=bound,
        epsilon_final=headline_lib.estimate(
            FINAL, self.estimates.final, bound, self._target(FINAL)),
        epsilon_all=headline_lib.estimate(
            SCHEDULED, self.estimates.scheduled, bound,
            self._target(SCHEDULED)),
        epsilon_all_missing="", strongest_bound_name=verdict.strongest,
        strongest_bound=verdict.largest_bound,
        audit_verdict="refuted" if self.audit.refuted else (
            verdict.verdict),  # "beyond reach" when the bounds are
        audit_text=audit_text, noise_check_verdict=noise_verdict,
        noise_check_text=noise_text, audit_reach=verdict.reach_dict(),
        targets=self._headline_targets())

  def rows(self) -> list[tuple[str, str, float, str]]:
    """(name, kind, epsilon, detail) rows of the report's table."""
    t = self.targets
    (node, node_epsilon), (rdp, rdp_epsilon) = self.analytical.items()
    out = [(node, "analytical", node_epsilon, "what the accounting "
            "guarantees: the release of every node of the trees"),
           (rdp, "analytical", rdp_epsilon, "what the accounting guarantees "
            "(Rényi DP of the same release, looser)")]
    out.append((WORST_CASE, "analytical", t.worst_case_epsilon,
                f"μ = {t.worst_case_mu:.4g} = √(Σ_e max_t (K_e⁻¹)_tt) / z: "
                "what the released rounds show about the participant they "
                "show most; no attack on the rounds can exceed it"))
    out.append((SCHEDULES, "expected", t.schedules_epsilon,
                f"μ = {t.schedules_mu:.4g}, the mean of the inserted "
                "canaries' μ_j = √(a_jᵀ K⁻¹ a_j) / z (largest "
                f"{t.largest_schedule_mu:.4g}): what ε-all by T estimates; "
                "not a ceiling"))
    for name, result in self._estimates():
      detail = (f"{self.confidence:.0%} CI [{result.interval.low:.4g}, "
                f"{result.interval.high:.4g}]")
      if name == FINAL:
        detail += (f"; targets {t.final_epsilon:.4g}, the final model's ε "
                   f"(the sum of the rounds, μ = {t.final_mu:.4g})")
      elif name == SCHEDULED:
        detail += (f"; targets {t.schedules_epsilon:.4g}, the ε expected "
                   "for this run's canaries")
      elif name == MAX:
        detail += ("; a Gaussian fit to maxima (the paper's construction): "
                   "targets none of these ε, not the mechanism's ε "
                   "(docs/method/estimates.md)")
      elif name == INDEPENDENT:
        detail += ("; its N(0, 1) null ignores the tree's correlated noise:"
                   " not an estimate of ε")
      out.append((name, "estimate", result.epsilon, detail))
    level = self.audit.bounds.per_bound_confidence
    for name, result in self.audit.bounds.bounds.items():
      out.append((name, "bound", result.epsilon,
                  f"holds with {level:.2%} confidence (Bonferroni over the "
                  "audit's checks and bounds)"))
    return out

  def canary_counts(self) -> str:
    return (f"{self.num_inserted + self.num_held_out} canary candidates, "
            f"each inserted by a fair coin: {self.num_inserted} inserted and "
            f"{self.num_held_out} held out")

  def delta_line(self) -> str:
    return (f"δ = {analytical_epsilons.format_delta(self.delta)}, "
            f"{self.delta_source}")

  def _notes(self) -> list[str]:
    lines = [str(self.audit)] + self.insertion.lines(
        insertion_notes.TERMINAL_FINDINGS)
    if self.participation is not None:
      lines.append("participation: "
                   + client_sampling.describe(self.participation))
    if self.noise_check is not None:
      lines.append(self.noise_check.get("summary", "noise check: no summary"))
    if self.accuracy is not None:
      lines.append(f"final model accuracy: {self.accuracy:.4f}")
    return lines

  def table_text(self) -> str:
    """A fixed-width table of every epsilon, for the terminal."""
    lines = headline_lib.table_lines(self.delta_line(), self.rows(), 11)
    return "\n".join(lines + self._notes())

  def terminal_text(self, details: bool = False) -> str:
    """The headline, then the full table with `details` (else a pointer)."""
    return headline_lib.terminal_text(self, details)

  def as_dict(self) -> dict[str, Any]:
    return dict(
        run_dir=self.run_dir, aggregator=self.config["aggregator"],
        delta=self.delta,
        delta_source=self.delta_source, confidence=self.confidence,
        analytical=self.analytical, claimed_epsilon=self.claimed_epsilon,
        claim=self.claim, headline=self.headline().as_dict(),
        estimates={name: result.as_dict()
                   for name, result in self._estimates()},
        targets=self.targets.as_dict(),
        audit=dict(refuted=self.audit.refuted,
                   caught_by=list(self.audit.caught_by),
                   level=self.audit.level,
                   contribution_excess=self.audit.contribution_excess,
                   contribution_spread=self.audit.contribution_spread,
                   contribution_t=self.audit.contribution_t,
                   contribution_p_value=self.audit.contribution_p_value,
                   bounds=self.audit.bounds.as_dict(), text=str(self.audit)),
        accuracy=self.accuracy, loss=self.loss,
        num_inserted=self.num_inserted, num_held_out=self.num_held_out,
        participation=self.participation, noise_check=self.noise_check,
        insertion=self.insertion.as_dict(),
        config={k: self.config[k] for k in sorted(self.config)})

  def to_markdown(self, plots: bool = True) -> str:
    """report.md (`plots` is accepted for `report.write_report`; a DP-FTRL
    report has no figures)."""
    del plots
    c = self.config
    lines = [f"# tff-canary report: {c['task']} with DP-FTRL "
             f"({c.get('data', '?')} data)", "",
             f"Run directory `{self.run_dir}`; tree aggregation restarted "
             f"every epoch, noise multiplier {c['noise_multiplier']}, clip "
             f"{c['clip']}, {c['clients_per_round']} clients per round, "
             f"{c['num_rounds']} rounds, {c['num_clients']} clients, "
             f"{self.canary_counts()} (d = {c['dim']}, canary seed "
             f"{c['canary_seed']}).", "",
             "## The answer", "", "```text", self.headline().text(), "```",
             "", "## Details", "", f"Every epsilon at {self.delta_line()}.",
             "", "| epsilon | kind | value | detail |", "|---|---|---:|---|"]
    lines += [f"| {name} | {kind} | {results.format_number(value)} | "
              f"{detail} |" for name, kind, value, detail in self.rows()]
    lines += [""] + ["```text", *self._notes(), "```", "",
                     "The statistics and their null laws: "
                     "docs/method/dp-ftrl.md. Estimates are what the canary "
                     "attack achieves, not bounds; only the bounds, which "
                     "hold with their confidence, and the contribution "
                     "check decide the audit.", ""]
    return "\n".join(lines)


def _canaries(config: dict[str, Any]) -> canary_config.CanaryConfig:
  """The run's canaries, rebuilt from config.json (as the experiment)."""
  sampler = client_sampling.ClientSampler(
      config["num_clients"], config["clients_per_round"], config["sampling"],
      config["seed"])
  schedule = schedules.ShuffledEpochs(config["num_rounds"],
                                      sampler.rounds_per_epoch,
                                      partial_last_epoch=True)
  return canary_config.CanaryConfig(
      seed=config["canary_seed"], num_inserted=config["num_inserted"],
      num_held_out=config["num_held_out"], schedule=schedule,
      assignment=config["assignment"], directions=config["directions"])


def build_tree_report(rd: run_dir_lib.RunDir, config: dict[str, Any], *,
                      delta: float, confidence: float, delta_source: str,
                      claimed_epsilon: Optional[float] = None
                      ) -> TreeRunReport:
  """The report of a finished DP-FTRL run (module docstring); `delta` and
  `confidence` are checked by the caller (`report.build_report`)."""
  if config.get("assignment") != "coin":
    raise run_dir_lib.RunDirError(
        f"{rd.file(run_dir_lib.CONFIG)} has assignment="
        f"{config.get('assignment')!r}: the DP-FTRL report's one-run bounds "
        "need candidates inserted by fair coins (assignment='coin').")
  canaries = _canaries(config)
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
  per_epoch = canaries.schedule.rounds_per_epoch
  noise = tree_noise.tree_noise(num_rounds, efficient=True,
                                restart_period=per_epoch)
  z = config["noise_multiplier"]
  u, a = scores.T, canaries.schedule_matrix()
  level = 1.0 - confidence
  audit = tree_audit.audit_ftrl(
      u, a, canaries.inserted, noise=noise, rounds_per_epoch=per_epoch,
      noise_multiplier=z, delta=delta, level=level,
      claimed_epsilon=claimed_epsilon)
  estimates = tree_audit.ftrl_estimates(
      u, a, canaries.inserted, noise=noise, noise_multiplier=z, delta=delta,
      confidence=confidence)
  targets = tree_targets.tree_targets(
      noise, a, canaries.inserted, rounds_per_epoch=per_epoch,
      noise_multiplier=z, delta=delta)
  claim = "analytical ε (DP-FTRL, exact)"
  if claimed_epsilon is not None:
    claimed_epsilon = validation.as_nonnegative(claimed_epsilon,
                                                "claimed_epsilon")
    claim = "claimed ε"
  accuracy, loss = rd.final_evaluation()
  return TreeRunReport(
      run_dir=rd.path, config=config, delta=delta, confidence=confidence,
      delta_source=delta_source,
      claimed_epsilon=(audit.claim.epsilon if claimed_epsilon is None
                       else claimed_epsilon),
      claim=claim, estimates=estimates, audit=audit, targets=targets,
      num_inserted=int(canaries.inserted.sum()),
      num_held_out=int((~canaries.inserted).sum()), accuracy=accuracy,
      loss=loss, noise_check=rd.load_noise_check(),
      participation=config.get("participation"),
      insertion=insertion_notes.load(rd, config))


__all__ = ["TreeRunReport", "build_tree_report"]
