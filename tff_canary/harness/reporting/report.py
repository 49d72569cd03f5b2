"""The report of a run: every epsilon beside the analytical one (NumPy only).

`build_report(run_dir)` reads a run directory (`run_dir.RunDir`), recomputes
every estimate of its cosine table at any delta and confidence
(`table_estimates.estimate_table`), the analytical epsilons from its DpEvent
ledger (`ledger.Ledger`), audits the claim (`audit.audit_table`), and
`write_report` writes report.json, report.md and the plots. No TensorFlow
(`python -m tff_canary report RUN_DIR`).

The analytical epsilons (docs/method/accounting.md; `analytical_epsilons`):
one participation (the paper's "analytical epsilon"), the run's largest
participation composed without amplification, and with per-round sampling
the Poisson-sampled rounds (PLD). The claim audited by default is the one
the canaries face (`canary_claim`).

The analytical bound: no attack on a canary can exceed the epsilon of the
rounds it took part in, composed without amplification, if the mechanism is
what its ledger claims (by adaptive composition the other rounds add
nothing). So every estimate or bound above the analytical epsilon of the
run's largest participation is flagged, with its interval: estimator noise,
or the mechanism is not what it claims.

Participation (config.json's `participation`, `client_sampling.describe`):
an allowed mismatch of clients and canaries is shown first.

The table states its delta and where it came from (`delta_line`): the run's
default 1/n^1.1 for n clients, the run's own delta, or one given to the
report. Each bound the audit uses carries, in its row, its value at the
audit's (Bonferroni) level, above the table's.

The insertion mode is in every report, and for canary clients what the
aggregator did with them (`insertion_notes`). The analytical epsilons are
the run's mechanism's claim (`protocol.Mechanism.claim`: the ledger's, or
e.g. the DDP bound); a mechanism scored per round (`round_scores`, DP-FTRL)
has its own report, `tree_report`.
"""

from __future__ import annotations

import dataclasses
import math
import os
from typing import Any, Optional, Union

from tff_canary.stats import atomic_files
from tff_canary.stats.audit import audit
from tff_canary.stats.canaries import client_sampling
from tff_canary.stats import results
from tff_canary.harness.mechanisms import analytical_epsilons
from tff_canary.harness.mechanisms import canary_claim as canary_claim_lib
from tff_canary.harness.mechanisms import protocol
from tff_canary.harness.mechanisms import registry
from tff_canary.harness.reporting import headline as headline_lib
from tff_canary.harness.reporting import insertion_notes
from tff_canary.harness.recording import run_dir as run_dir_lib
from tff_canary.harness.reporting import tree_report
from tff_canary.stats.audit import table_estimates
from tff_canary.stats import validation
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
AUDITED_AS = headline_lib.AUDITED_AS


@dataclasses.dataclass(frozen=True)
class RunReport:
  """Everything the report shows, frozen; `as_dict()` is report.json."""

  draws_plots = True  # write_report draws plots/ (`PLOT_FILES`)

  run_dir: str
  config: dict[str, Any]
  delta: float
  confidence: float
  estimates: table_estimates.TableEstimates
  analytical: dict[str, float]
  claimed_epsilon: float
  claim: str
  verdict: audit.AuditVerdict
  accuracy: Optional[float]
  loss: Optional[float]
  max_participation: int
  table: CosineTable = dataclasses.field(repr=False, compare=False)
  # noise_check.json (`noise_stats.NoiseCheck.as_dict`), None if not run.
  noise_check: Optional[dict[str, Any]] = None
  participation: Optional[dict[str, Any]] = None
  # Where delta came from, e.g. "from the run's default 1/n^1.1 for n =
  # 1,000 clients" (`delta_source`).
  delta_source: str = "given"
  insertion: insertion_notes.InsertionNotes = insertion_notes.InsertionNotes(
      "server")
  # The mechanism's claim behind `analytical` (`protocol.AnalyticalClaim`).
  analytical_claim: Optional[protocol.AnalyticalClaim] = None
  canary_claim: Optional[canary_claim_lib.CanaryClaim] = None  # `choose`

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
      if kind == "nominal bound" or name in PAPER_ESTIMATES:
        continue
      if kind == "estimate" and not interval.low > bound:
        continue
      if kind == "bound" and not result.epsilon > bound:
        continue
      out.append(dict(
          name=name, kind=kind, epsilon=result.epsilon,
          interval=None if interval is None else [interval.low,
                                                  interval.high],
          analytical=bound_name, analytical_epsilon=bound))
    return out

  def _flag(self, item: dict[str, Any]) -> str:
    interval = ("" if item["interval"] is None else
                f" ({self.confidence:.0%} CI [{item['interval'][0]:.4g}, "
                f"{item['interval'][1]:.4g}])")
    what = ("its whole interval is above" if item["kind"] == "estimate"
            else "a bound that holds with its confidence is above")
    return (f"{item['name']} = {item['epsilon']:.4g}{interval}: {what} the "
            f"analytical ε for {item['analytical']} = "
            f"{item['analytical_epsilon']:.4g}, so the mechanism is likely "
            "not what it claims (check the clip, the noise and the "
            "accounting)")

  def canary_counts(self) -> str:
    """How many canaries were inserted and held out, and why under coins
    these differ from config.json's num_inserted / num_held_out."""
    inserted, held_out = (self.estimates.num_inserted,
                          self.estimates.num_held_out)
    if self.config.get("assignment") == "coin":
      return (f"{inserted + held_out} canary candidates, each inserted by a "
              f"fair coin: {inserted} inserted and {held_out} held out")
    return f"{inserted} inserted and {held_out} held-out canaries"

  def participation_line(self) -> Optional[str]:
    """Client and canary participation in one line (None if not recorded)."""
    if self.participation is None:
      return None
    return client_sampling.describe(self.participation)

  def known_canaries_line(self) -> str:
    """Which statistics had the other inserted canaries removed."""
    if self.table.known_canaries_removed == "final_and_all_iterates":
      return ("other inserted canaries: their projections removed from every "
              "round's aggregate and from the final model, exactly "
              "(orthogonal canaries)")
    line = self.insertion.known_canaries_line(self.table.known_canaries_removed)
    if line is not None:
      return line
    if self.table.known_canaries_removed == "all_iterates":  # older tables
      return ("other inserted canaries: removed from each round's aggregate "
              "for the all-iterates cosines; not from the final model (its "
              "known part cannot be subtracted in training)")
    return ("other inserted canaries: not removed (gaussian canaries, the "
            "paper's construction); they add noise to every statistic")

  def noise_check_line(self) -> Optional[str]:
    """One line with the noise self-test's verdict (None if not run)."""
    if self.noise_check is None:
      return None
    return self.noise_check.get("summary", "noise check: no summary")

  def delta_line(self) -> str:
    """The table's delta and where it came from, e.g. "δ = 1.09e-4, from
    the run's default 1/n^1.1 for n = 4,500 clients"."""
    return (f"δ = {analytical_epsilons.format_delta(self.delta)}, "
            f"{self.delta_source}")

  def _audit_detail(self, name: str) -> str:
    """How the audit uses the bound of row `name`, at its own level."""
    audited = self.verdict.bounds.get(AUDITED_AS.get(name))
    if AUDITED_AS.get(name) in self.verdict.powerless:
      return audit.POWERLESS_DETAIL
    if audited is None:
      return "; not in the audit"
    level = self.verdict.per_bound_confidence
    if math.isclose(level, self.confidence):
      return "; the audit uses it at this level"
    return (f"; in the audit: {results.format_number(audited.epsilon)} at "
            f"{level:.2%}, not {self.confidence:.0%} (Bonferroni over "
            f"{len(self.verdict.bounds)} bounds)")

  def rows(self) -> list[tuple[str, str, float, str]]:
    """(name, kind, epsilon, detail) rows of the report's table."""
    out = []
    for name, value in self.analytical.items():
      row = (self.analytical_claim or protocol.AnalyticalClaim(
          self.analytical, self.max_participation)).row(name)
      out.append(row[:3] + (row[3] + self.canary_claim.row_note(name),))
    above = {item["name"] for item in self.above_analytical_bound()}
    bound = self.analytical_bound[1]
    for name, kind, result in self.estimates.rows():
      if kind == "estimate":
        detail = (f"{self.confidence:.0%} CI [{result.interval.low:.4g}, "
                  f"{result.interval.high:.4g}]")
        if name in PAPER_ESTIMATES:
          detail += ("; the paper's construction, which overshoots over many "
                     "rounds (docs/method/which-epsilon.md); never flagged")
        elif name not in above and result.interval.low <= bound <= (
            result.interval.high):
          detail += "; consistent with the analytical ε"
      elif kind == "nominal bound":
        detail = (f"paper's construction; {self.confidence:.0%} is nominal "
                  "only; not in the audit")
      else:
        detail = (f"holds with {self.confidence:.0%} confidence"
                  + self._audit_detail(name))
      if kind != "estimate" and getattr(result, "saturated", False):
        detail = f"saturated (ceiling {result.ceiling:.4g}); {detail}"
      if name in above:
        detail += "; ABOVE THE ANALYTICAL ε (see the flag below)"
      out.append((name, kind, result.epsilon, detail))
    return out

  def headline(self) -> headline_lib.Headline:
    """The answer in at most 8 lines (`headline` module docstring)."""
    return headline_lib.of_report(self)

  def terminal_text(self, details: bool = False) -> str:
    """The headline, then the full table with `details` (else a pointer)."""
    return headline_lib.terminal_text(self, details)

  def table_text(self) -> str:
    """A fixed-width table of every epsilon, for the terminal."""
    lines = headline_lib.table_lines(self.delta_line(), self.rows(), 14)
    lines.append(f"audit ({self.claim}): {self.verdict}")
    lines.append(f"claim: {self.claim_line()}")
    lines += [f"flag: {self._flag(item)}"
              for item in self.above_analytical_bound()]
    lines.append(self.known_canaries_line())
    lines += self.insertion.lines(insertion_notes.TERMINAL_FINDINGS)
    participation = self.participation_line()
    if participation is not None and self.participation.get("mismatch"):
      lines.insert(0, participation)
    elif participation is not None:
      lines.append(f"participation: {participation}")
    if self.noise_check is not None:
      lines.append(self.noise_check_line())
    if self.accuracy is not None:
      lines.append(f"final model accuracy: {self.accuracy:.4f}")
    return "\n".join(lines)

  def as_dict(self) -> dict[str, Any]:
    return dict(
        run_dir=self.run_dir, delta=self.delta,
        delta_source=self.delta_source, confidence=self.confidence,
        analytical=self.analytical, claimed_epsilon=self.claimed_epsilon,
        claim=self.claim, verdict=self.verdict.as_dict(),
        accuracy=self.accuracy, loss=self.loss,
        max_participation=self.max_participation,
        headline=self.headline().as_dict(),
        analytical_bound=dict(zip(("name", "epsilon"),
                                  self.analytical_bound)),
        canary_claim=self.canary_claim.as_dict(),
        claim_line=self.claim_line(),
        above_analytical_bound=self.above_analytical_bound(),
        participation=self.participation,
        participation_line=self.participation_line(),
        participation_mismatch=bool(self.participation
                                    and self.participation.get("mismatch")),
        noise_check=self.noise_check,
        known_canaries_removed=self.table.known_canaries_removed,
        known_canaries_line=self.known_canaries_line(),
        insertion=self.insertion.as_dict(),
        ddp_bound=(None if self.analytical_claim is None
                   or self.analytical_claim.detail is None
                   else self.analytical_claim.detail.as_dict()),
        estimates=self.estimates.as_dict(),
        config={k: self.config[k] for k in sorted(self.config)})

  def to_markdown(self, plots: bool = True) -> str:
    """report.md; `plots`: embed the figures of plots/ (which
    `write_report` draws at this report's settings)."""
    c = self.config
    lines = [
        f"# tff-canary report: {c['task']} ({c.get('data', '?')} data)", "",
        f"Run directory `{self.run_dir}`; noise multiplier "
        f"{c['noise_multiplier']}, {c['clients_per_round']} clients per round, "
        f"{c['num_rounds']} rounds, "
        + ("" if c["num_clients"] is None  # unknown to a RunWriter's loop
           else f"{c['num_clients']} clients, ")
        + self.canary_counts() + f" (d = {c['dim']}, canary seed "
        f"{c['canary_seed']}).", ""]
    lines += ["## The answer", "", "```text", self.headline().text(), "```",
              "", "## Details", ""]
    line = self.participation_line()
    if line is not None and self.participation.get("mismatch"):
      lines += [f"**{line}**", ""]
    elif line is not None:
      lines += [f"Participation: {line}.", ""]
    known = self.known_canaries_line()
    lines += [known[0].upper() + known[1:] + ".", ""]
    mode, *findings = self.insertion.lines()
    lines += [mode[0].upper() + mode[1:] + ".", ""]
    lines += [f"- **{f[0].upper() + f[1:]}**." for f in findings]
    lines += [""] if findings else []
    lines += [f"Every epsilon at {self.delta_line()}.", "",
              "| epsilon | kind | value | detail |", "|---|---|---:|---|"]
    for name, kind, value, detail in self.rows():
      lines.append(f"| {name} | {kind} | {results.format_number(value)} | {detail} |")
    lines += ["", f"**Audit** of the {self.claim}: {self.verdict}.", "",
              f"Claim: {self.claim_line()}.", ""]
    if self.noise_check is not None:
      lines += [f"**{self.noise_check_line()}**", ""]
    for item in self.above_analytical_bound():
      lines += [f"**Flag**: {self._flag(item)}.", ""]
    lines += [
        "Point estimates (ε-final, ε-all) are estimates of what the canary "
        "attack achieves, not bounds. Only the bounds that hold with their "
        "confidence decide the audit; ε_lo saturates with the number of "
        "canaries, which is why the point estimates exist. The paper's ε_lo "
        f"is shown for comparison; its {self.confidence:.0%} is nominal "
        "only."]
    if self.accuracy is not None:
      lines += ["", f"Final model: accuracy {self.accuracy:.4f}, loss "
                f"{self.loss:.4f}."]
    if self.estimates.warnings:
      lines += ["", "Warnings:"] + [f"- {w}" for w in self.estimates.warnings]
    if plots:
      lines += [""] + [f"![{alt}](plots/{name})"
                       for name, alt in PLOT_FILES.items()]
    lines.append("")
    return "\n".join(lines)


# A run's report: mechanisms scored per round have their own (`tree_report`).
Report = Union[RunReport, tree_report.TreeRunReport]


def build_report(path: str | os.PathLike, *, delta: Optional[float] = None,
                 confidence: float = 0.95,
                 claimed_epsilon: Optional[float] = None) -> Report:
  """Recomputes every estimate of a finished run (see module docstring); a
  DP-FTRL run's report is a `tree_report.TreeRunReport`.

  Args:
    path: the run directory.
    delta: delta for every epsilon; default the run's (config.json).
    confidence: confidence of intervals, bounds and the audit verdict.
    claimed_epsilon: the claim to audit; default the run's analytical epsilon
      for its participation.
  """
  rd = run_dir_lib.RunDir(path)
  config = rd.load_config()
  source = analytical_epsilons.delta_source(config, None if delta is None else
                        validation.as_open_unit(delta, "delta"))
  delta = validation.as_open_unit(config["delta"] if delta is None else delta,
                                  "delta")
  confidence = validation.as_open_unit(confidence, "confidence")
  if registry.of_config(config).round_scores:  # e.g. DP-FTRL
    return tree_report.build_tree_report(
        rd, config, delta=delta, confidence=confidence, delta_source=source,
        claimed_epsilon=claimed_epsilon)
  table = rd.load_table(config)
  events = rd.load_participation()
  estimates = table_estimates.estimate_table(table, delta=delta,
                                             confidence=confidence)
  analytical_claim, faced = analytical_epsilons.of_run(
      rd, config, table.schedule, events, delta)
  if claimed_epsilon is None:
    claim_name, claimed_epsilon = faced.name, faced.epsilon
    claim = f"{analytical_claim.label} ({claim_name})"
  else:
    claimed_epsilon = validation.as_nonnegative(claimed_epsilon,
                                                "claimed_epsilon")
    claim = "claimed ε"
  # Poisson and DDP claims are not Gaussian: Steinke et al.'s bound (`audit`).
  gaussian_claim = analytical_claim.gaussian and not faced.amplified
  verdict = audit.audit_table(table, claimed_epsilon=claimed_epsilon,
                              delta=delta, confidence=confidence,
                              gaussian_claim=gaussian_claim)
  accuracy, loss = rd.final_evaluation()
  return RunReport(
      run_dir=rd.path, config=config, delta=delta, confidence=confidence,
      estimates=estimates, analytical=analytical_claim.epsilons,
      claimed_epsilon=claimed_epsilon, claim=claim, verdict=verdict,
      accuracy=accuracy, loss=loss, table=table, delta_source=source,
      max_participation=analytical_claim.max_participation,
      participation=config.get("participation"), noise_check=rd.load_noise_check(),
      insertion=insertion_notes.load(rd, config),
      analytical_claim=analytical_claim, canary_claim=faced)


def write_report(report: Report, plots: bool = True,
                 output_dir: Optional[str | os.PathLike] = None) -> list[str]:
  """Writes report.json, report.md (and the plots) atomically; returns paths.

  Args:
    report: the report.
    plots: draw the figures into plots/ and embed them; without, the
      figures a previous report drew there (at other settings) are removed,
      so report.md never shows a stale figure.
    output_dir: where to write (created if missing); default the run
      directory itself.
  """
  out = os.fspath(report.run_dir if output_dir is None else output_dir)
  os.makedirs(out, exist_ok=True)
  plot_dir = os.path.join(out, run_dir_lib.PLOTS)
  written = []
  plots = plots and report.draws_plots  # tree_report: none, nor old ones
  if plots:
    from tff_canary.harness.reporting import plots as plots_lib  # pylint: disable=g-import-not-at-top
    written += plots_lib.write_report_plots(report, report.table, plot_dir)
  else:
    for name in PLOT_FILES:
      if os.path.exists(os.path.join(plot_dir, name)):
        os.remove(os.path.join(plot_dir, name))
  json_path = os.path.join(out, run_dir_lib.REPORT_JSON)
  md_path = os.path.join(out, run_dir_lib.REPORT_MD)
  atomic_files.write_json(json_path, report.as_dict())
  atomic_files.write_text(md_path, report.to_markdown(plots=plots))
  return written + [json_path, md_path]
