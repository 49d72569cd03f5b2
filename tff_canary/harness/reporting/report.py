"""The report of a run: every epsilon beside the analytical one (NumPy only).

`build_report(run_dir)` reads a run directory (`run_dir.RunDir`) into the
records its mechanism declares (`load_records`: `records.RunRecords`) and
asks the run's mechanism for its section:
`protocol.Mechanism.report_section(records, *, delta, confidence,
claimed_epsilon)` (the arguments checked; `claimed_epsilon` None: the
analytical claim), by default a cosine table's
(`tff_canary.mechanisms.cosine.report`), DP-FTRL's per-round scores
(`tff_canary.mechanisms.correlated.report`). The `RunReport` around it is the same for every mechanism
(headline, terminal table, report.json, report.md; docs/guide/report.md);
`write_report` writes them and the section's plots.

A section is frozen and has: `claim` and `claimed_epsilon` (what the audit
tests); `analytical` (name -> epsilon); `num_inserted`, `num_held_out`;
`title` (report.md's words after the task) and `plot_files` (plots/ ->
alt text); `rows()` (the table's (name, kind, epsilon, detail) rows),
`headline_parts()` (the `headline.Headline`'s fields but delta,
confidence and the noise check), `notes()` (the terminal's lines after the
table), `settings(config)` (report.md's first words on the run),
`markdown(report)` (report.md's lines before and after the table),
`as_dict(report)` (its report.json keys) and `write_plots(report,
directory)`. Its attributes are the report's too (`report.estimates`).
"""

from __future__ import annotations

import dataclasses
import os
from typing import Any, Optional

import numpy as np

from tff_canary.harness.config import experiment_config
from tff_canary.harness.recording import run_dir as run_dir_lib
from tff_canary.harness.reporting import flower_notes
from tff_canary.harness.reporting import headline as headline_lib
from tff_canary.harness.reporting import insertion_notes
from tff_canary.mechanisms import analytical_epsilons
from tff_canary.mechanisms import records as records_lib
from tff_canary.mechanisms import registry
from tff_canary.stats import atomic_files
from tff_canary.stats import results
from tff_canary.stats import validation
from tff_canary.stats.canaries import client_sampling


@dataclasses.dataclass(frozen=True)
class RunReport:
  """Everything the report shows, frozen; `as_dict()` is report.json. The
  section's attributes are the report's too (`report.verdict`, ...)."""

  run_dir: str
  config: dict[str, Any]
  delta: float
  confidence: float
  section: Any  # the mechanism's (module docstring)
  accuracy: Optional[float] = None
  loss: Optional[float] = None
  # noise_check.json (`noise_stats.NoiseCheck.as_dict`), None if not run.
  noise_check: Optional[dict[str, Any]] = None
  participation: Optional[dict[str, Any]] = None
  delta_source: str = "given"  # where delta came from (`delta_line`)
  insertion: insertion_notes.InsertionNotes = insertion_notes.InsertionNotes(
      "server")
  # A Flower run's flower_accountant.json (`flower_notes`); None otherwise.
  flower_accountant: Optional[dict[str, Any]] = None

  def __getattr__(self, name: str) -> Any:
    if name.startswith("__") or name == "section":  # copy, pickle
      raise AttributeError(name)
    return getattr(self.section, name)

  def canary_counts(self) -> str:
    """How many canaries were inserted and held out, and why under coins
    these differ from config.json's num_inserted / num_held_out."""
    inserted, held_out = self.section.num_inserted, self.section.num_held_out
    if self.config.get("assignment") == "coin":
      return (f"{inserted + held_out} canary candidates, each inserted by a "
              f"fair coin: {inserted} inserted and {held_out} held out")
    return f"{inserted} inserted and {held_out} held-out canaries"

  def participation_line(self) -> Optional[str]:
    """Client and canary participation in one line (None if not recorded)."""
    if self.participation is None:
      return None
    return client_sampling.describe(self.participation)

  @property
  def participation_mismatch(self) -> bool:
    return bool(self.participation and self.participation.get("mismatch"))

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

  def headline(self) -> headline_lib.Headline:
    """The answer in at most 8 lines (`headline` module docstring)."""
    noise_verdict, noise_text = headline_lib.noise_check_verdict(
        self.noise_check, **(
            dict(not_run=flower_notes.NOISE_CHECK_NOT_RUN)
            if self.config.get("writer") == flower_notes.WRITER else {}))
    return headline_lib.Headline(
        delta=self.delta, confidence=self.confidence,
        noise_check_verdict=noise_verdict, noise_check_text=noise_text,
        **self.section.headline_parts())

  def terminal_text(self, details: bool = False) -> str:
    """The headline, then with `details` the full table (`table_text`),
    else a pointer to it."""
    text = self.headline().text()
    if details:
      return text + "\n\n" + self.table_text()
    return (text + "\n(every epsilon, bound and note: report.md, or "
            "`python -m tff_canary report RUN_DIR --details`)")

  def notes(self) -> list[str]:
    """The terminal's lines after the table: the section's, the insertion
    mode's, participation, the noise self-test, the accuracy."""
    lines = self.section.notes() + self.insertion.lines(
        insertion_notes.TERMINAL_FINDINGS)
    if self.participation is not None and not self.participation_mismatch:
      lines.append(f"participation: {self.participation_line()}")
    if self.noise_check is not None:
      lines.append(self.noise_check_line())
    if self.flower_accountant is not None:
      lines.append(flower_notes.line(self.flower_accountant))
    if self.accuracy is not None:
      lines.append(f"final model accuracy: {self.accuracy:.4f}")
    return lines

  def table_text(self) -> str:
    """A fixed-width table of every epsilon, for the terminal: its delta,
    a header, one line per row (`rows`), then the `notes`."""
    rows = self.rows()
    width = max([46] + [len(name) for name, _, _, _ in rows])
    kinds = max(len(kind) for _, kind, _, _ in rows) + 1
    header = f"{'epsilon':{width}s} {'kind':{kinds}s} {'value':>10s}  detail"
    lines = [self.participation_line()] if self.participation_mismatch else []
    lines += [f"every epsilon at {self.delta_line()}", header,
              "-" * (len(header) + 30)] + [
                  f"{name:{width}s} {kind:{kinds}s} "
                  f"{results.format_number(value):>10s}  {detail}"
                  for name, kind, value, detail in rows]
    return "\n".join(lines + self.notes())

  def as_dict(self) -> dict[str, Any]:
    flower = ({} if self.flower_accountant is None
              else dict(flower_accountant=self.flower_accountant))
    return dict(
        run_dir=self.run_dir, delta=self.delta,
        delta_source=self.delta_source, confidence=self.confidence,
        analytical=self.analytical, claimed_epsilon=self.claimed_epsilon,
        claim=self.claim, accuracy=self.accuracy, loss=self.loss,
        headline=self.headline().as_dict(), participation=self.participation,
        noise_check=self.noise_check, insertion=self.insertion.as_dict(),
        **self.section.as_dict(self), **flower,
        config={k: self.config[k] for k in sorted(self.config)})

  def to_markdown(self, plots: bool = True) -> str:
    """report.md; `plots`: embed the section's figures of plots/ (which
    `write_report` draws at this report's settings)."""
    c = self.config
    run = self.section.settings(c) + [
        f"{c['clients_per_round']} clients per round",
        f"{c['num_rounds']} rounds"] + (
            [] if c["num_clients"] is None  # unknown to a RunWriter's loop
            else [f"{c['num_clients']} clients"])
    before, after = self.section.markdown(self)
    lines = [
        f"# tff-canary report: {c['task']}{self.section.title} "
        f"({c.get('data', '?')} data)", "",
        f"Run directory `{self.run_dir}`; {', '.join(run)}, "
        f"{self.canary_counts()} (d = {c['dim']}, canary seed "
        f"{c['canary_seed']}).", "",
        "## The answer", "", "```text", self.headline().text(), "```", "",
        "## Details", "", *before, f"Every epsilon at {self.delta_line()}.",
        "", "| epsilon | kind | value | detail |", "|---|---|---:|---|"]
    lines += [f"| {name} | {kind} | {results.format_number(value)} | "
              f"{detail} |" for name, kind, value, detail in self.rows()]
    lines += after
    if self.flower_accountant is not None:
      lines += ["", flower_notes.line(self.flower_accountant) + "."]
    if plots and self.section.plot_files:
      lines += [""] + [f"![{alt}](plots/{name})"
                       for name, alt in self.section.plot_files.items()]
    return "\n".join(lines + [""])


# The former union of the two report classes (harness/writing names it).
Report = RunReport


def build_report(path: str | os.PathLike, *, delta: Optional[float] = None,
                 confidence: float = 0.95,
                 claimed_epsilon: Optional[float] = None) -> RunReport:
  """Recomputes every estimate of a finished run (see module docstring).

  Args:
    path: the run directory.
    delta: delta for every epsilon; default the run's (config.json).
    confidence: confidence of intervals, bounds and the audit verdict.
    claimed_epsilon: the claim to audit; default the run's analytical epsilon
      for its participation.
  """
  rd = run_dir_lib.RunDir(path)
  config = rd.load_config()
  given = delta
  delta, confidence = validation.as_levels(
      config["delta"] if given is None else given, confidence)
  source = analytical_epsilons.delta_source(
      config, None if given is None else delta)
  if claimed_epsilon is not None:
    claimed_epsilon = validation.as_nonnegative(claimed_epsilon,
                                                "claimed_epsilon")
  mechanism = registry.of_config(config)
  section = mechanism.report_section(
      load_records(rd, config, mechanism), delta=delta,
      confidence=confidence, claimed_epsilon=claimed_epsilon)
  accuracy, loss = rd.final_evaluation()
  return RunReport(
      run_dir=rd.path, config=config, delta=delta, confidence=confidence,
      section=section, accuracy=accuracy, loss=loss,
      noise_check=rd.load_noise_check(),
      participation=config.get("participation"), delta_source=source,
      insertion=insertion_notes.load(rd, config),
      flower_accountant=flower_notes.load(rd))


def load_records(rd: run_dir_lib.RunDir, config: dict[str, Any],
                 mechanism: Any) -> records_lib.RunRecords:
  """The records of run directory `rd` (config.json `config`) that its
  `mechanism` declares (`records_ledger`, `round_scores`), each file checked
  (`run_dir.RunDir`) and the scores against the canaries that config.json's
  seeds give."""
  if not mechanism.round_scores:
    table = rd.load_table(config)
    events = rd.load_participation()
    return records_lib.RunRecords(
        source=rd.path, config=config, events=events, table=table,
        ledger=rd.load_ledger() if mechanism.records_ledger else None,
        insertion=experiment_config.insertion_of(config))
  if config.get("assignment") != "coin":  # before its config is read
    raise run_dir_lib.RunDirError(
        f"{rd.file(run_dir_lib.CONFIG)} has assignment="
        f"{config.get('assignment')!r}: the DP-FTRL report's one-run bounds "
        "need candidates inserted by fair coins (assignment='coin').")
  # The epochs are the client sampler's (the canaries' schedule may be a
  # worst-case placement, `SharedRounds`, which has none).
  resolved = experiment_config.resolve(
      experiment_config.ExperimentConfig.from_json(config),
      config["num_clients"], config["dim"])
  canaries = resolved.canaries
  events = rd.load_participation()
  if not np.array_equal(events, canaries.participation.events):
    raise run_dir_lib.RunDirError(
        f"{rd.file(run_dir_lib.PARTICIPATION)} does not hold the inserted "
        f"canaries that {rd.file(run_dir_lib.CONFIG)}'s seeds give: the "
        "files are from different runs.")
  scores = rd.load_tree_scores(canaries.num_canaries)
  if scores.shape[0] != config["num_rounds"]:
    raise run_dir_lib.RunDirError(
        f"{rd.file(run_dir_lib.TREE_SCORES)} has {scores.shape[0]} rounds "
        f"of the run's {config['num_rounds']}: the run has not finished "
        "(--resume).")
  return records_lib.RunRecords(
      source=rd.path, config=config, events=events, scores=scores.T,
      canaries=canaries, rounds_per_epoch=resolved.sampler.rounds_per_epoch,
      ledger=rd.load_ledger() if mechanism.records_ledger else None,
      insertion=experiment_config.insertion_of(config))


def write_report(report: RunReport, plots: bool = True,
                 output_dir: Optional[str | os.PathLike] = None) -> list[str]:
  """Writes report.json, report.md (and the plots) atomically; returns paths.

  Args:
    plots: draw the section's figures into plots/ and embed them; without,
      the figures a previous report drew there (at other settings) are
      removed, so report.md never shows a stale figure.
    output_dir: where to write (created if missing); default the run
      directory itself.
  """
  out = os.fspath(report.run_dir if output_dir is None else output_dir)
  os.makedirs(out, exist_ok=True)
  plot_dir = os.path.join(out, run_dir_lib.PLOTS)
  written = []
  if plots and report.section.plot_files:
    written += report.section.write_plots(report, plot_dir)
  else:
    for name in report.section.plot_files:
      if os.path.exists(os.path.join(plot_dir, name)):
        os.remove(os.path.join(plot_dir, name))
  json_path = os.path.join(out, run_dir_lib.REPORT_JSON)
  md_path = os.path.join(out, run_dir_lib.REPORT_MD)
  atomic_files.write_json(json_path, report.as_dict())
  atomic_files.write_text(md_path, report.to_markdown(plots=plots))
  return written + [json_path, md_path]

