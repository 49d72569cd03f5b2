"""The TF-free report: run directory loading, audit verdict, the CLI."""

import dataclasses
import json
import os
import pickle
import subprocess
import sys

import pytest

from tff_canary.mechanisms import registry
from tff_canary.stats import atomic_files

from tff_canary.stats.audit import audit

from tff_canary.harness.recording import run_dir
from tff_canary.harness.reporting import report
from tff_canary.mechanisms.cosine import report as cosine_report
from tff_canary.stats import results
from tff_canary.stats.canaries import schedules

from fake_runs import make_run


def test_report_recomputes_at_any_delta(tmp_path):
  path = make_run(tmp_path / "run")
  r5 = report.build_report(path)
  r7 = report.build_report(path, delta=1e-7)
  assert r5.delta == 1e-5 and r7.delta == 1e-7
  assert r7.estimates.final_mean_only.epsilon > r5.estimates.final_mean_only.epsilon
  assert r5.analytical["one participation"] < r7.analytical["one participation"]
  assert r5.accuracy == pytest.approx(0.61) and r5.loss == pytest.approx(1.1)


def test_the_report_is_built_around_the_mechanisms_section(tmp_path,
                                                           monkeypatch):
  # build_report asks the run's mechanism for its section
  # (protocol.Mechanism.report_section, here the default cosine table's); the section's attributes are the report's, and the
  # forwarding leaves copying and pickling alone.
  path = make_run(tmp_path / "run")
  r = report.build_report(path)
  assert type(r.section) is cosine_report.CosineSection  # pylint: disable=unidiomatic-typecheck
  assert r.verdict is r.section.verdict and r.table is r.section.table
  assert pickle.loads(pickle.dumps(r)).as_dict() == r.as_dict()
  with pytest.raises(AttributeError, match="no_such_attribute"):
    r.no_such_attribute  # pylint: disable=pointless-statement

  class Titled(cosine_report.CosineSection):
    title = " with a test section"

  def build(*args, **kwargs):
    section = cosine_report.build(*args, **kwargs)
    return Titled(**{f.name: getattr(section, f.name)
                     for f in dataclasses.fields(section)})

  monkeypatch.setattr(type(registry.get("gaussian")), "report_section",
                      lambda self, records, **kwargs: build(records, **kwargs))
  titled = report.build_report(path)
  assert type(titled.section) is Titled  # pylint: disable=unidiomatic-typecheck
  first = titled.to_markdown().splitlines()[0]
  assert first.endswith(" with a test section (synthetic data)"), first


def test_audit_refutes_a_claim_far_below_the_truth(tmp_path):
  # shift 4 (in null std units) is a Gaussian mechanism with z = 0.25:
  # epsilon ~ 19 at delta 1e-5. A claim of 1 must be refuted, 100 must not.
  path = make_run(tmp_path / "run", shift=4.0)
  low = report.build_report(path, claimed_epsilon=1.0)
  high = report.build_report(path, claimed_epsilon=100.0)
  assert low.verdict.refuted and not high.verdict.refuted
  assert "REFUTED" in str(low.verdict) and "consistent" in str(high.verdict)
  assert low.verdict.per_bound_confidence == pytest.approx(1 - 0.05 / 4)
  # The verdict rests on bounds only.
  assert set(low.verdict.bounds) == {"epsilon_lo final", "epsilon_lo all",
                                     "f-DP one-run bound final",
                                     "f-DP one-run bound all"}


def test_poisson_claim_with_per_round_sampling(tmp_path):
  # Canaries Poisson-sampled at the clients' rate 20 / 1000 (the experiments'
  # --sampling=per_round); other canaries: tests/mechanisms/test_canary_claim.py.
  path = make_run(tmp_path / "run", sampling="per_round",
                  schedule=repr(schedules.PerRoundSampling(40, 20 / 1000)))
  r = report.build_report(path)
  assert r.claim == "analytical ε (Poisson sampling (PLD))"
  assert r.analytical["Poisson sampling (PLD)"] < r.analytical["one participation"]


def test_write_report_files_and_markdown(tmp_path):
  path = make_run(tmp_path / "run")
  r = report.build_report(path)
  written = report.write_report(r)
  for name in ("report.json", "report.md", "plots/cosines.png",
               "plots/max_cosine_by_round.png", "plots/epsilons.png"):
    assert os.path.join(str(path), name) in written
  with open(os.path.join(path, "plots", "epsilons.png"), "rb") as f:
    assert f.read(8) == b"\x89PNG\r\n\x1a\n"
  data = json.load(open(os.path.join(path, "report.json")))
  assert data["delta"] == 1e-5 and data["verdict"]["verdict"] in audit.VERDICTS
  md = open(os.path.join(path, "report.md")).read()
  assert "| final model: epsilon_final (mean-only) | estimate |" in md
  assert not [f for f in os.listdir(path) if f.startswith(".tmp")]


def test_cli_prints_the_table_and_rewrites(tmp_path):
  path = make_run(tmp_path / "run")
  proc = subprocess.run(
      [sys.executable, "-m", "tff_canary", "report", str(path), "--delta",
       "1e-6", "--no_plots"], capture_output=True, text=True, timeout=120)
  assert proc.returncode == 0, proc.stderr
  # The headline only, with a pointer to the details.
  assert proc.stdout.splitlines()[1].startswith("ε-final ")
  assert "audit: " in proc.stdout and "--details" in proc.stdout
  assert "epsilon_final (fitted variance)" not in proc.stdout
  assert json.load(open(os.path.join(path, "report.json")))["delta"] == 1e-6


@pytest.mark.parametrize("damage, match", [
    (lambda p: os.remove(os.path.join(p, "config.json")), "config.json is missing"),
    (lambda p: open(os.path.join(p, "config.json"), "w").write("{not json"),
     "not valid JSON"),
    (lambda p: atomic_files.write_json(os.path.join(p, "config.json"), [1, 2]),
     "JSON object"),
    (lambda p: os.remove(os.path.join(p, "ledger.json")), "ledger.json is missing"),
    (lambda p: open(os.path.join(p, "ledger.json"), "w").write('{"x": 1}'),
     "not a valid DpEvent ledger"),
    (lambda p: open(os.path.join(p, "cosines.npz"), "wb").write(b"garbage"),
     "not a valid cosine table"),
    (lambda p: (os.remove(os.path.join(p, "cosines.npz")),
                os.remove(os.path.join(p, "cosines.csv"))), "cosines.csv is missing"),
    (lambda p: os.remove(os.path.join(p, "participation.npz")),
     "participation.npz is missing"),
])
def test_cli_damaged_run_directory(tmp_path, damage, match):
  path = make_run(tmp_path / "run")
  damage(str(path))
  proc = subprocess.run([sys.executable, "-m", "tff_canary", "report", str(path)],
                        capture_output=True, text=True, timeout=120)
  assert proc.returncode == 2
  assert match in proc.stderr and "Traceback" not in proc.stderr
  assert not os.path.exists(os.path.join(path, "report.json"))


def test_a_truncated_cosine_table_is_named_once(tmp_path):
  # The table's own error names the file; the run directory used to wrap it
  # in the same words again ("cosines.npz is not a valid cosine table:
  # .../cosines.npz is not a valid cosine table: corrupt NPZ file").
  path = make_run(tmp_path / "run")
  npz = os.path.join(path, "cosines.npz")
  with open(npz, "rb") as f:
    data = f.read()
  with open(npz, "wb") as f:
    f.write(data[:len(data) // 2])  # a copy cut short
  proc = subprocess.run(
      [sys.executable, "-m", "tff_canary", "report", str(path)],
      capture_output=True, text=True, timeout=120)
  assert proc.returncode == 2
  assert proc.stderr.strip() == (
      f"error: {npz} is not a valid cosine table: corrupt NPZ file (File is "
      "not a zip file)")
  with pytest.raises(run_dir.RunDirError) as raised:
    run_dir.RunDir(path).load_table()
  assert str(raised.value).count("is not a valid cosine table") == 1


def test_an_unreadable_cosine_table_is_named_once(tmp_path, monkeypatch):
  # An OSError names the file too ("[Errno 13] Permission denied: '...'");
  # this runs as root here, so the refusal to read is simulated.
  path = make_run(tmp_path / "run")
  npz = os.path.join(path, "cosines.npz")

  def refuse(p, dim=None):
    raise PermissionError(13, "Permission denied", p)

  monkeypatch.setattr(run_dir.CosineTable, "load", refuse)
  with pytest.raises(run_dir.RunDirError) as raised:
    run_dir.RunDir(path).load_table()
  assert str(raised.value) == f"{npz} cannot be read: Permission denied."


def test_table_from_another_run_is_refused(tmp_path):
  path = make_run(tmp_path / "run")
  config = json.load(open(os.path.join(path, "config.json")))
  config["dim"] = 12345
  atomic_files.write_json(os.path.join(path, "config.json"), config)
  with pytest.raises(run_dir.RunDirError, match="dim=100000.*dim=12345"):
    report.build_report(path)


@pytest.mark.parametrize("kwargs, match", [
    (dict(delta=2.0), "delta"), (dict(confidence=0.0), "confidence"),
    (dict(claimed_epsilon=-1.0), "claimed_epsilon")])
def test_report_bad_arguments(tmp_path, kwargs, match):
  path = make_run(tmp_path / "run")
  with pytest.raises(ValueError, match=match):
    report.build_report(path, **kwargs)


def test_missing_run_directory(tmp_path):
  with pytest.raises(run_dir.RunDirError, match="does not exist"):
    report.build_report(tmp_path / "nope")


def _set_config(path, **changes):
  config = json.load(open(os.path.join(path, "config.json")))
  config.update(changes)
  atomic_files.write_json(os.path.join(path, "config.json"), config)


def test_an_estimate_above_the_analytical_bound_is_flagged(tmp_path):
  # Each fake canary takes part once, so the analytical epsilon of one
  # participation bounds every attack on a correct mechanism. Shift 4 in null
  # std units is a Gaussian mechanism with z = 0.25 (epsilon ~ 19 at delta
  # 1e-5) while the ledger claims z = 0.8 (epsilon ~ 5.6): a mechanism that
  # is not what it claims. Without the flag the report showed the estimate
  # like any other.
  path = make_run(tmp_path / "run", shift=4.0, noise_multiplier=0.8)
  r = report.build_report(path)
  assert r.max_participation == 1
  name, bound = r.analytical_bound
  assert name == "one participation" and bound == r.analytical[name]
  above = {item["name"]: item for item in r.above_analytical_bound()}
  final = above["final model: epsilon_final (mean-only)"]
  assert final["epsilon"] > bound and final["analytical_epsilon"] == bound
  assert final["interval"] == [r.estimates.final_mean_only.interval.low,
                               r.estimates.final_mean_only.interval.high]
  detail = dict((n, d) for n, _, _, d in r.rows())[
      "final model: epsilon_final (mean-only)"]
  assert "95% CI [" in detail and "ABOVE THE ANALYTICAL ε" in detail
  flag = ("its whole interval is above the analytical ε for one "
          f"participation = {bound:.4g}, so the mechanism is likely not what "
          "it claims")
  assert flag in r.table_text() and flag in r.to_markdown()
  assert "final model: epsilon_final (mean-only) = " in r.table_text()
  # The table's columns line up, whatever the longest row name (the paper's
  # Gaussian fit to maxima, 55 characters, pushed its row out of line).
  lines = r.table_text().splitlines()
  start = lines.index(next(l for l in lines if l.startswith("epsilon ")))
  table = lines[start + 2:start + 2 + len(r.rows())]
  assert max(len(n) for n, _, _, _ in r.rows()) > 46
  kinds = {line.index(kind, len(name)) for line, (name, kind, _, _)
           in zip(table, r.rows())}
  assert kinds == {lines[start].index("kind")}, table
  assert json.loads(json.dumps(r.as_dict()))["above_analytical_bound"]
  # A mechanism weaker than its claim (shift 0.25, z = 4) flags nothing.
  quiet = report.build_report(make_run(tmp_path / "quiet", shift=0.25,
                                       noise_multiplier=0.8))
  assert quiet.above_analytical_bound() == []
  assert "ABOVE" not in quiet.to_markdown() and "flag:" not in quiet.table_text()


def test_participation_is_reported_side_by_side(tmp_path):
  path = make_run(tmp_path / "run")
  summary = dict(sampling="shuffle", num_rounds=40, rate=0.02,
                 rounds_per_epoch=50, epochs=0.8,
                 clients=dict(count=1000, min=0, max=1, mean=0.8),
                 canaries=dict(count=300, min=1, max=1, mean=1.0,
                               schedule="ShuffledEpochs(...)"),
                 mismatch=None)
  _set_config(path, participation=summary)
  r = report.build_report(path)
  line = ("clients took part 0-1 times (mean 0.8; 0.8 epochs of 50 rounds), "
          "canaries 1 time each (once per epoch)")
  assert r.participation_line() == line
  assert f"Participation: {line}." in r.to_markdown()
  assert f"participation: {line}" in r.table_text()
  data = r.as_dict()
  assert data["participation"] == summary and not data["participation_mismatch"]
  # An allowed mismatch comes first, in bold, and in report.json.
  _set_config(path, participation=dict(summary, mismatch="presentations = 3 "
                                       "contradicts the client sampler."))
  r = report.build_report(path)
  assert r.table_text().startswith("PARTICIPATION MISMATCH (allowed by "
                                   "--allow_participation_mismatch)")
  md = r.to_markdown()
  assert "**PARTICIPATION MISMATCH" in md
  assert md.index("PARTICIPATION MISMATCH") < md.index("| epsilon |")
  assert r.as_dict()["participation_mismatch"] is True
  # Runs from before the participation was recorded still report.
  _set_config(path, participation=None)
  assert report.build_report(path).participation_line() is None


def test_a_poisson_rate_above_one_is_a_clear_error(tmp_path):
  # Before the check the error named dp-accounting's sampling_probability,
  # not the config's values (and the experiment met it only after training).
  path = make_run(tmp_path / "run", sampling="per_round")
  _set_config(path, num_clients=10)
  with pytest.raises(run_dir.RunDirError, match=r"clients_per_round = 20 and "
                     r"num_clients = 10: the Poisson sampling rate .* = 2 is "
                     r"not in \(0, 1\]"):
    report.build_report(path)


def test_the_table_states_delta_and_where_it_came_from(tmp_path):
  # Before, the terminal table did not state delta at all, and report.md gave
  # "δ = 1e-05" in its opening sentence without its origin.
  path = make_run(tmp_path / "run")  # config: delta 1e-5, 1000 clients
  r = report.build_report(path)
  line = "δ = 1e-5, from the run's config.json (set for the run)"
  assert r.delta_line() == line
  assert r.table_text().splitlines()[0] == f"every epsilon at {line}"
  md = r.to_markdown()
  assert f"Every epsilon at {line}." in md
  assert md.index(line) < md.index("| epsilon |")
  assert r.as_dict()["delta_source"] == "from the run's config.json (set for the run)"
  # The experiment's default, num_clients^-1.1, is named as such.
  _set_config(path, delta=1000 ** -1.1)
  r = report.build_report(path)
  assert r.delta_line() == ("δ = 5.01e-4, from the run's default 1/n^1.1 for "
                            "n = 1,000 clients")
  # A delta given to the report, and the run's beside it.
  r = report.build_report(path, delta=1e-7)
  assert r.delta_line() == "δ = 1e-7, given to this report (the run's: 5.01e-4)"
  assert "every epsilon at δ = 1e-7, given" in r.table_text()
  # Giving the run's own delta is not an override.
  same = report.build_report(path, delta=1000 ** -1.1)
  assert "default 1/n^1.1" in same.delta_line()
  # A run whose loop did not say how many clients it has (RunWriter without
  # num_clients): its delta was set for the run (this raised a TypeError).
  _set_config(path, delta=1e-5, num_clients=None)
  assert report.build_report(path).delta_line() == line


def test_a_bound_row_states_the_audits_level_and_value(tmp_path):
  # The audit computes each of its m bounds at 1 - 0.05 / m (98.75% for 4),
  # the table at 95%; before, only the audit line's parenthesis said so and
  # the table's bound values did not match the audit's.
  r = report.build_report(make_run(tmp_path / "run"))
  verdict = r.verdict
  assert len(verdict.bounds) == 4 and verdict.per_bound_confidence == 0.9875
  details = {name: detail for name, kind, _, detail in r.rows()
             if kind == "bound" and cosine_report.AUDITED_AS.get(name)
             in verdict.bounds}
  assert {cosine_report.AUDITED_AS[name] for name in details} == set(verdict.bounds)
  assert verdict.claim_kind == "gaussian"
  # Steinke et al.'s one-run bound is shown, valid, but the audit of a
  # Gaussian claim uses the stronger f-DP one-run bound in its place.
  for name, kind, _, detail in r.rows():
    if kind == "bound" and name not in details:
      assert name.endswith(": one-run bound") and "not in the audit" in detail
  for name, detail in details.items():
    audited = verdict.bounds[cosine_report.AUDITED_AS[name]]
    assert (f"in the audit: {results.format_number(audited.epsilon)} at "
            "98.75%, not 95% (Bonferroni over 4 bounds)") in detail
  # Estimates and the paper's nominal bounds are not in the audit; the
  # analytical rows say which claim is audited, at no bound's level.
  for name, kind, _, detail in r.rows():
    if kind == "nominal bound":
      assert "not in the audit" in detail
    elif kind == "estimate":
      assert "audit" not in detail
    elif kind == "analytical":
      assert "in the audit" not in detail
  # The level follows --confidence.
  r90 = report.build_report(make_run(tmp_path / "run"), confidence=0.9)
  assert any("at 97.5%, not 90%" in d for _, _, _, d in r90.rows())
  assert any("90% is nominal only" in d for _, _, _, d in r90.rows())


def test_table_rows_name_their_statistic(tmp_path):
  r = report.build_report(make_run(tmp_path / "run"))
  names = [name for name, kind, _, _ in r.rows() if kind != "analytical"]
  assert all(n.startswith(("final model: ", "all iterates: ")) for n in names)
  assert [n.split(":")[0] for n in names] == (["final model"] * 6
                                              + ["all iterates"] * 6)


def test_the_report_says_whether_the_other_canaries_were_removed(tmp_path):
  r = report.build_report(make_run(tmp_path / "run"))
  assert r.table.known_canaries_removed == "none"
  for text in (r.table_text(), r.to_markdown()):
    assert ("ther inserted canaries: not removed (gaussian canaries, the "
            "paper's construction)") in text
  assert r.as_dict()["known_canaries_removed"] == "none"
  removed = dataclasses.replace(r, section=dataclasses.replace(
      r.section, table=dataclasses.replace(
          r.table, known_canaries_removed="all_iterates")))
  for text in (removed.table_text(), removed.to_markdown()):
    assert ("ther inserted canaries: removed from each round's aggregate "
            "for the all-iterates cosines; not from the final model") in text
  assert removed.as_dict()["known_canaries_removed"] == "all_iterates"

