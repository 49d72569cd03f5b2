"""The report's headline: the answer in at most 8 lines, flags that mean
something, and the report command's --details / --output_dir / --no_plots.

Fake runs (tests/fake_runs.py, seeded) are Gaussian-mechanism-like cosine
tables, so no TensorFlow is needed.
"""

import json
import os
import subprocess
import sys
import types

import repo_paths
from fake_runs import make_run
from tff_canary.harness.reporting import headline
from tff_canary.harness.reporting import report
from tff_canary.mechanisms.cosine import report as cosine_report
from tff_canary.stats import results


def test_headline_answers_in_at_most_8_lines_and_in_report_json(tmp_path):
  r = report.build_report(make_run(tmp_path / "run"))
  lines = r.headline().lines()
  assert len(lines) <= 8
  assert r.terminal_text().count("\n") + 1 <= 8  # with its pointer line
  report.write_report(r, plots=False)
  data = json.load(open(tmp_path / "run" / "report.json"))["headline"]
  assert data["analytical_epsilon"]["value"] == r.analytical_bound[1]
  for key, result in (("epsilon_final", r.estimates.final_mean_only),
                      ("epsilon_all", r.estimates.all_iterates)):
    assert data[key]["value"] == result.epsilon
    assert data[key]["ci"] == [result.interval.low, result.interval.high]
  assert data["strongest_bound"]["value"] == r.verdict.largest_bound
  assert data["strongest_bound"]["name"] in dict(cosine_report.AUDITED_AS)
  assert data["audit"]["verdict"] == r.verdict.verdict
  assert data["noise_check"]["verdict"] == "not run"
  md = open(tmp_path / "run" / "report.md").read()
  assert md.index("## The answer") < md.index("| epsilon | kind |")
  assert lines[1] in md and lines[2] in md


def test_a_point_above_the_analytical_epsilon_inside_its_interval_is_no_flag(
    tmp_path):
  # Seeded fake run (shift 0.3 null sds, claim z = 0.8): epsilon-all's point
  # estimate lies above the analytical epsilon of one participation while its
  # 95% interval holds it, as in the main job's epsilon-all = 88.9 against
  # 86.12 with [80.18, 98.46]. That is no evidence: no flag anywhere.
  r = report.build_report(make_run(tmp_path / "run", shift=0.3))
  bound = r.analytical_bound[1]
  est = r.estimates.all_iterates
  assert est.epsilon > bound and est.interval.low <= bound  # the premise
  assert r.above_analytical_bound() == []
  text = r.terminal_text(details=True) + r.to_markdown()
  assert "ABOVE" not in text and "flag:" not in text and "**Flag**" not in text
  assert "consistent with the analytical ε" in r.headline().lines()[2]
  assert not r.headline().as_dict()["epsilon_all"]["above_analytical"]


def test_an_interval_entirely_above_is_flagged_in_the_headline(tmp_path):
  # Shift 4 null sds is a Gaussian mechanism with z = 0.25 while the ledger
  # claims z = 0.8: the whole interval is above the claim's epsilon.
  r = report.build_report(make_run(tmp_path / "run", shift=4.0))
  h = r.headline()
  assert h.epsilon_final.above_analytical and h.epsilon_all.above_analytical
  assert "ABOVE the analytical ε" in h.lines()[1]
  assert h.audit_verdict == "refuted" and h.lines()[4].startswith(
      "audit: REFUTED")


def test_a_claim_of_inf_needs_no_audit_in_one_line(tmp_path):
  # z = 0 claims epsilon = inf (issue 34, item 18): no reach or candidates
  # needed, one line in the headline, "vacuous" in report.json's headline
  # (its keys unchanged) and "NOT NEEDED" in report.md's audit paragraph;
  # the bounds are still computed for the table. Coin and fixed assignment
  # (fixed used to add "no one-run bounds without ...").
  for assignment in ("coin", "fixed"):
    path = make_run(tmp_path / assignment, noise_multiplier=0.0, n=40,
                    assignment=assignment)
    r = report.build_report(path)
    assert r.verdict.vacuous and not r.verdict.beyond_reach
    assert not r.verdict.refuted and r.verdict.bounds
    (line,) = [l for l in r.headline().lines() if l.startswith("audit: ")]
    assert line == ("audit: not needed: the analytical ε (one participation) "
                    "= inf promises no privacy, so no run can refute it")
    report.write_report(r, plots=False)
    data = json.load(open(path / "report.json"))["headline"]["audit"]
    assert data["verdict"] == "vacuous" and data["text"] == line[7:]
    assert set(data) == {"verdict", "text", "reach"}
    md = open(path / "report.md").read()
    assert ("**Audit** of the analytical ε (one participation): NOT NEEDED: "
            "a claim of ε = inf promises no privacy") in md
    assert "BEYOND REACH" not in md and "2^20" not in md
    assert "the audit tests" not in r.claim_line()
    assert r.claim_line().startswith(
        "the analytical ε (one participation) = inf promises no privacy: "
        "there is no claim for the audit to test")
  # A finite claim on the same run is audited as before (the fake's shift
  # of 2.5 null sds is far above a claim of 1).
  assert report.build_report(path, claimed_epsilon=1.0).verdict.refuted


def test_the_papers_gaussian_fit_is_in_the_details_and_never_flagged(
    tmp_path):
  r = report.build_report(make_run(tmp_path / "run", shift=4.0))
  (name,) = cosine_report.PAPER_ESTIMATES
  fit = dict((n, d) for n, _, _, d in r.rows())[name]
  assert "paper's construction" in fit and "ABOVE" not in fit
  assert name not in {i["name"] for i in r.above_analytical_bound()}
  assert "Gaussian fit" not in r.headline().text()


def test_estimate_flags_only_an_interval_entirely_above():
  def est(low, high):  # what headline.estimate reads of an EpsilonEstimate
    return types.SimpleNamespace(
        epsilon=(low + high) / 2,
        interval=results.ConfidenceInterval(low, high))
  assert not headline.estimate("x", est(4.0, 6.0), 5.0).above_analytical
  assert not headline.estimate("x", est(5.0, 6.0), 5.0).above_analytical
  assert headline.estimate("x", est(5.01, 6.0), 5.0).above_analytical


def test_noise_check_verdicts():
  assert headline.noise_check_verdict(None)[0] == "not run"
  assert "canary_noise_check.check_noise" in headline.noise_check_verdict(None)[1]
  assert headline.noise_check_verdict(
      {"passed": True, "summary": "s"}) == ("passed", "passed")
  assert headline.noise_check_verdict(
      {"passed": False, "summary": "variance 0.5"}) == (
          "failed", "failed (variance 0.5)")
  assert headline.noise_check_verdict(
      {"passed": True, "verdict": "passed", "notes": ["more noise"]}) == (
          "passed", "passed (more noise)")


def _report_cli(*args):
  return subprocess.run([sys.executable, "-m", "tff_canary", "report", *args],
                        capture_output=True, text=True, timeout=300)


def test_report_command_details_and_output_dir(tmp_path):
  path = make_run(tmp_path / "run")
  before = sorted(os.listdir(path))
  out = tmp_path / "elsewhere"
  proc = _report_cli(str(path), "--details", "--no_plots", "--output_dir",
                     str(out))
  assert proc.returncode == 0, proc.stderr
  assert "epsilon_final (fitted variance)" in proc.stdout  # the details
  assert sorted(os.listdir(path)) == before  # the run is untouched
  assert {"report.json", "report.md"} <= set(os.listdir(out))


def test_no_plots_removes_the_plots_a_previous_report_drew(tmp_path):
  # report.md at new settings must never embed a figure drawn at old ones.
  path = make_run(tmp_path / "run")
  assert _report_cli(str(path), "--delta", "1e-6").returncode == 0
  plots = os.path.join(path, "plots")
  assert set(cosine_report.PLOT_FILES) <= set(os.listdir(plots))
  assert "plots/epsilons.png" in open(os.path.join(path, "report.md")).read()
  assert _report_cli(str(path), "--no_plots").returncode == 0
  assert not set(cosine_report.PLOT_FILES) & set(os.listdir(plots))
  assert "plots/" not in open(os.path.join(path, "report.md")).read()


def test_the_readme_and_docs_show_the_current_headline_format(tmp_path):
  # The README's and the docs' example headline is a real run's, pasted; a
  # change of the headline's format must be pasted again (numbers may differ
  # by machine, the format may not).
  r = report.build_report(make_run(tmp_path / "run", shift=0.3))
  labels = [line[:16] for line in r.headline().lines()]
  root = str(repo_paths.REPO)
  # Each in a fenced block (the docs' `text {.headline}`), not indented.
  for page, indent in (("README.md", ""), ("docs/index.md", ""),
                       ("docs/getting-started.md", "")):
    lines = open(os.path.join(root, page), encoding="utf-8").read().split(
        "\n")
    start = lines.index(next(l for l in lines
                             if l.startswith(indent + "analytical ε ")))
    shown = [l[len(indent):] for l in lines[start:start + len(labels)]]
    assert [l[:16] for l in shown] == labels, page
    assert shown[-1] == headline.MEANING, page
