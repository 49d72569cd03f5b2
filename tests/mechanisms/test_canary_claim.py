"""The claim a report audits is the one the canaries face
(tff_canary/harness/mechanisms/canary_claim.py), and report.json is strict JSON.

Fake runs (tests/fake_runs.py, seeded; no TensorFlow): each inserted canary
takes part once, with statistics like a Gaussian mechanism's. The real TFF
loop with the same mismatch is in tests/harness/writing/test_run_writer.py.
"""

import json
import math
import os

import numpy as np
import pytest

from fake_runs import make_run
from tff_canary.harness.recording import run_dir
from tff_canary.harness.reporting import headline
from tff_canary.harness.reporting import report
from tff_canary.mechanisms import canary_claim
from tff_canary.stats import atomic_files
from tff_canary.stats.canaries import schedules
from tff_canary.stats.noise import noise_stats

# A loop over this many clients that declares sampling="per_round" (20 per
# round) claims an amplified epsilon of 0.24 over the fake's 40 rounds at
# z = 0.8. (The 342,477 StackOverflow clients claim 0.0023, but the
# PLD accountant takes 12 s at that rate.)
MANY_CLIENTS = 10_000
ROUNDS = 40  # fake_runs.ROUNDS


@pytest.mark.parametrize("schedule", [
    schedules.ShuffledEpochs(500, 500),
    schedules.ShuffledEpochs(25, 7, partial_last_epoch=True),
    schedules.FixedPresentations(40, 3),
    schedules.PerRoundSampling(40, 20 / 342_477)])
def test_a_recorded_schedule_is_read_back(schedule):
  assert canary_claim.schedule_of(repr(schedule)) == schedule


@pytest.mark.parametrize("text", [
    "", None, "not python", "ShuffledEpochs(500, 500)",
    "PerRoundSampling(num_rounds=40, probability=2.0)",
    "print(num_rounds=1)", "__import__('os').system('true')",
    "PerRoundSampling(num_rounds=40, probability=x)"])
def test_anything_else_is_no_schedule(text):
  assert canary_claim.schedule_of(text) is None


def _mismatched_run(path, **kwargs):
  # A correct run: shift 1.25 null standard deviations is the Gaussian
  # mechanism the ledger claims (z = 0.8, one participation), while the loop
  # declares Poisson sampling over many clients.
  return make_run(path, shift=1 / 0.8, noise_multiplier=0.8,
                  sampling="per_round", num_clients=MANY_CLIENTS,
                  schedule=repr(schedules.ShuffledEpochs(ROUNDS, ROUNDS)),
                  **kwargs)


def test_a_correct_run_that_declares_poisson_sampling_is_not_refuted(
    tmp_path):
  r = report.build_report(_mismatched_run(tmp_path / "run"))
  poisson = r.analytical[canary_claim.POISSON]
  # The premise: the clients' amplified epsilon is far below what these
  # canaries show, so testing it (the report did, before) refutes a correct
  # run.
  assert r.verdict.largest_bound > 10 * poisson
  assert not r.verdict.refuted
  assert r.claim == "analytical ε (one participation)"
  assert r.claimed_epsilon == r.analytical["one participation"]
  assert r.verdict.claim_kind == "gaussian"
  assert not r.canary_claim.amplified
  assert set(r.canary_claim.not_audited) == {canary_claim.POISSON}
  # The report says which claim it audited, why, and what it did not test.
  line = r.claim_line()
  assert "tests the analytical ε (one participation)" in line
  assert "at most one round (ShuffledEpochs(" in line
  assert f"Not audited: Poisson sampling (PLD) = {poisson:.4g}" in line
  assert "PerRoundSampling(num_rounds, clients_per_round / num_clients)" in (
      line)
  for text in (r.terminal_text(details=True), r.to_markdown(plots=False)):
    assert line in text
  rows = {name: detail for name, _, _, detail in r.rows()}
  assert "not audited: the clients' claim" in rows[
      "analytical: Poisson sampling (PLD)"]
  data = r.as_dict()
  assert data["canary_claim"]["name"] == "one participation"
  assert data["claim_line"] == line


def test_the_headline_names_one_analytical_epsilon(tmp_path):
  r = report.build_report(_mismatched_run(tmp_path / "run"))
  h = r.headline()
  value = r.analytical["one participation"]
  assert (h.analytical_name, h.analytical_epsilon) == ("one participation",
                                                       value)
  first, audit_line = h.lines()[0], h.lines()[4]
  assert f"{value:.4g}" in first and "one participation" in first
  assert f"analytical ε (one participation) = {value:.4g}" in audit_line
  assert "is not tested: the canaries were not sampled like the clients" in (
      audit_line)
  assert h.estimates_target is None  # the estimates target the same one


def test_poisson_canaries_at_the_clients_rate_get_the_amplified_claim(
    tmp_path):
  rate = 20 / 1000  # fake_runs: clients_per_round / num_clients
  path = make_run(tmp_path / "run", shift=1 / 0.8, sampling="per_round",
                  schedule=repr(schedules.PerRoundSampling(ROUNDS, rate)))
  r = report.build_report(path)
  assert r.claim == "analytical ε (Poisson sampling (PLD))"
  assert r.canary_claim.amplified and not r.canary_claim.not_audited
  assert "Poisson-sampled at rate 0.02" in r.claim_line()
  # Not a Gaussian mechanism's trade-off curve: bounds valid for any claim.
  assert r.verdict.claim_kind == "any"
  h = r.headline()
  poisson = r.analytical[canary_claim.POISSON]
  assert h.analytical_epsilon == poisson
  assert f"= {poisson:.4g}" in h.lines()[4]
  # The estimates target the canaries' rounds without amplification (the
  # max model uses their participation counts), and say so.
  assert h.estimates_target == ("one participation",
                                r.analytical["one participation"])
  assert "the ε of the canaries' rounds unamplified (one participation" in (
      h.lines()[1])


def test_poisson_canaries_at_another_rate_get_the_claim_at_theirs(tmp_path):
  path = make_run(tmp_path / "run", sampling="per_round",
                  schedule=repr(schedules.PerRoundSampling(ROUNDS, 0.5)))
  r = report.build_report(path)
  ours = r.analytical[canary_claim.POISSON_AT_CANARY_RATE]
  assert r.claimed_epsilon == ours
  assert ours > r.analytical[canary_claim.POISSON]  # rate 0.5 > 0.02
  assert set(r.canary_claim.not_audited) == {canary_claim.POISSON}
  # Without declared sampling, canaries' Poisson sampling still counts.
  path = make_run(tmp_path / "undeclared",
                  schedule=repr(schedules.PerRoundSampling(ROUNDS, 0.5)))
  r = report.build_report(path)
  assert r.claimed_epsilon == pytest.approx(ours)
  assert canary_claim.POISSON not in r.analytical


def test_an_unrecorded_schedule_gets_the_claim_that_holds_for_any(tmp_path):
  # No schedule in the table nor in config.json (older runs): the epsilon of
  # the canaries' realized rounds holds whatever the schedule.
  r = report.build_report(make_run(tmp_path / "run", sampling="per_round"))
  assert r.claim == "analytical ε (one participation)"
  assert "(not recorded)" in r.claim_line()


def test_a_given_claim_is_named_as_given(tmp_path):
  r = report.build_report(_mismatched_run(tmp_path / "run"),
                          claimed_epsilon=8.0)
  assert r.claim_line().startswith(
      "the audit tests the claimed ε = 8 given to the report; the canaries "
      "face the analytical ε (one participation)")


def _refuse(name):
  raise ValueError(f"bare {name} in strict JSON")


def test_report_json_is_strict_json_with_an_infinite_epsilon(tmp_path):
  # z = 0 claims no privacy: every analytical epsilon is infinite.
  path = make_run(tmp_path / "run", noise_multiplier=0.0)
  r = report.build_report(path)
  assert math.isinf(r.analytical["one participation"])
  report.write_report(r, plots=False)
  text = open(os.path.join(path, run_dir.REPORT_JSON)).read()
  data = json.loads(text, parse_constant=_refuse)  # a strict parser's view
  assert data["analytical"]["one participation"] == "Infinity"
  assert data["headline"]["analytical_epsilon"]["value"] == "Infinity"
  back = run_dir.RunDir(path).load_report()
  assert back["analytical"]["one participation"] == math.inf
  assert back["claimed_epsilon"] == math.inf


def test_strict_json_round_trips_every_non_finite_float(tmp_path):
  value = {"a": [math.inf, -math.inf, 1.5, "text"],
           "b": np.array([np.nan, 2.0], np.float32), "c": np.float64(-np.inf),
           "d": (1, None)}
  path = tmp_path / "x.json"
  atomic_files.write_json(path, value)
  json.loads(path.read_text(), parse_constant=_refuse)
  back = atomic_files.read_json(path)
  assert back["a"] == [math.inf, -math.inf, 1.5, "text"]
  assert math.isnan(back["b"][0]) and back["b"][1] == 2.0
  assert back["c"] == -math.inf and back["d"] == [1, None]
  # Older files with bare Infinity are still read.
  path.write_text('{"e": Infinity}')
  assert atomic_files.read_json(path) == {"e": math.inf}


def test_zero_claimed_noise_is_degenerate_in_the_headline(tmp_path):
  # noise_check.json of z = 0 (`noise_stats.check_noise` on exactly zero
  # output, claimed std 0), as a run writes it and its report reads it.
  zeros = [[np.zeros(30), np.zeros(20)] for _ in range(3)]
  check = noise_stats.check_noise(zeros, 0.0)
  assert check.degenerate and check.passed  # the premise
  path = make_run(tmp_path / "run", noise_multiplier=0.0)
  atomic_files.write_json(os.path.join(path, run_dir.NOISE_CHECK),
                          check.as_dict())
  h = report.build_report(path).headline()
  assert h.noise_check_verdict == "degenerate"
  assert h.lines()[5].startswith(
      "noise self-test: degenerate (no noise claimed)")
  assert "passed" not in h.lines()[5]
  # A nonzero output with zero claimed noise stays a failure.
  zeros[1][0][3] = 1e-3
  failed = noise_stats.check_noise(zeros, 0.0).as_dict()
  assert headline.noise_check_verdict(failed)[0] == "failed"
