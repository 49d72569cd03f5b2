"""The TF-free report: run directory loading, audit verdict, the CLI."""

import json
import os
import subprocess
import sys

import pytest

from tff_canary import atomic_files, audit, report, run_dir

from fake_runs import make_run


def test_report_recomputes_at_any_delta(tmp_path):
  path = make_run(tmp_path / "run")
  r5 = report.build_report(path)
  r7 = report.build_report(path, delta=1e-7)
  assert r5.delta == 1e-5 and r7.delta == 1e-7
  assert r7.estimates.final_mean_only.epsilon > r5.estimates.final_mean_only.epsilon
  assert r5.analytical["one participation"] < r7.analytical["one participation"]
  assert r5.accuracy == pytest.approx(0.61) and r5.loss == pytest.approx(1.1)


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
                                     "one-run bound final", "one-run bound all"}


def test_poisson_claim_with_per_round_sampling(tmp_path):
  path = make_run(tmp_path / "run", sampling="per_round")
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
  assert "| epsilon_final (mean-only) | estimate |" in md
  assert not [f for f in os.listdir(path) if f.startswith(".tmp")]


def test_cli_prints_the_table_and_rewrites(tmp_path):
  path = make_run(tmp_path / "run")
  proc = subprocess.run(
      [sys.executable, "-m", "tff_canary", "report", str(path), "--delta",
       "1e-6", "--no_plots"], capture_output=True, text=True, timeout=120)
  assert proc.returncode == 0, proc.stderr
  assert "epsilon_final (mean-only)" in proc.stdout and "audit" in proc.stdout
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
