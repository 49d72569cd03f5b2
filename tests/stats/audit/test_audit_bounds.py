"""An audit states its reach (issue 26, item 6).

Each bound can show at most its value on perfectly separated statistics,
which depends only on the canaries' numbers and its confidence. Against a
claim beyond every bound's reach the verdict is "beyond reach", never
"consistent"; a bound of reach 0 takes no Bonferroni share. NumPy only,
seeded; the whole file runs in a few seconds.
"""

import math
import warnings

import numpy as np

from fake_runs import make_run
from tff_canary.harness.reporting import report
from tff_canary.mechanisms.correlated import report as correlated_report
from tff_canary.stats.audit import audit
from tff_canary.stats.audit import audit_bounds
from tff_canary.stats.bounds import lower_bounds
from tff_canary.stats.bounds import tight_one_run
from tff_canary.stats.correlated import (tree_audit, tree_simulation,
                                         tree_targets)

# 512 coin-flipped candidates, as in the TFF sweep; a small tree.
_SETTING = tree_simulation.FtrlSetting(
    epochs=2, rounds_per_epoch=8, noise_multiplier=1.0, num_candidates=512,
    efficient=True, self_test_dim=64)
_CLAIM = 23.35  # the claim, beyond the reach of 512 candidates


def _ftrl_audit(scores, run, claimed):
  return tree_audit.audit_ftrl(
      scores, run.schedule, run.inserted, noise=_SETTING.claimed_noise(),
      rounds_per_epoch=_SETTING.rounds_per_epoch,
      noise_multiplier=_SETTING.noise_multiplier, delta=1e-5,
      self_test_noise=run.self_test_noise, claimed_epsilon=claimed)


def test_512_candidates_cannot_test_a_claim_of_23_35_and_say_so():
  run = tree_simulation.simulate(_SETTING, seed=5)
  result = _ftrl_audit(run.scores, run, _CLAIM)
  verdict = result.bounds
  assert verdict.verdict == "beyond reach" and not verdict.refuted
  # The tight bound's reach is its value on perfectly separated statistics
  # at the audit's share (3 checks, 3 bounds: 1 - 0.05 / 9), computed here
  # directly: 20.0, Steinke et al.'s 2.2 (the issue's figures).
  level = 1 - 0.05 / 9
  assert verdict.per_bound_confidence == level
  mask = run.inserted
  tight = tight_one_run.tight_one_run_bound(
      mask.astype(float), mask, delta=1e-5, confidence=level,
      strategy="bonferroni").epsilon
  steinke = lower_bounds.one_run_bound(mask.astype(float), mask, delta=1e-5,
                                       confidence=level).epsilon
  assert round(tight, 1) == 20.0 and round(steinke, 1) == 2.2
  assert verdict.reach["tight one-run bound (scheduled T)"] == tight
  assert verdict.reach["one-run bound (scheduled T)"] == steinke
  assert verdict.reach_epsilon == tight and verdict.candidates == 512
  # Doubled once, the tight bound reaches the claim.
  doubled = np.tile(mask, 2)
  assert tight_one_run.tight_one_run_bound(
      doubled.astype(float), doubled, delta=1e-5, confidence=level,
      strategy="bonferroni").epsilon > _CLAIM
  assert verdict.candidates_needed == 1024
  text = str(verdict)
  assert "consistent" not in text and "BEYOND REACH" in text
  assert ("these 512 canaries can refute claims up to ε = 20 (tight "
          "one-run bound (scheduled T)); use more canaries (about 1,024 "
          "candidates) to test a claim of 23.35") in text
  assert "consistent" not in str(result).split("\n")[0]
  # No leak of any size makes them refute: the inserted canaries' scores
  # 1000 node-noise units above everything else.
  leaked = run.scores + 1000.0 * run.schedule * run.inserted[:, None]
  big = _ftrl_audit(leaked, run, _CLAIM).bounds
  assert big.beyond_reach and big.largest_bound <= tight
  # A claim within reach is tested: "consistent" then means something.
  within = _ftrl_audit(run.scores, run, 15.0).bounds
  assert within.verdict == "consistent" and not within.beyond_reach
  assert "can refute claims up to ε = 20" in str(within)

  # The headline's audit line and report.json say it too.
  estimates = tree_audit.ftrl_estimates(
      run.scores, run.schedule, run.inserted, noise=_SETTING.claimed_noise(),
      noise_multiplier=1.0, delta=1e-5)
  targets = tree_targets.tree_targets(
      _SETTING.claimed_noise(), run.schedule, run.inserted,
      rounds_per_epoch=_SETTING.rounds_per_epoch,
      noise_multiplier=_SETTING.noise_multiplier, delta=1e-5)
  tree = report.RunReport(
      run_dir="run", config={}, delta=1e-5, confidence=0.95,
      section=correlated_report.TreeSection(
          confidence=0.95, claimed_epsilon=_CLAIM, claim="claimed ε",
          estimates=estimates, audit=result, targets=targets,
          num_inserted=int(mask.sum()), num_held_out=int((~mask).sum())))
  headline = tree.headline()
  (line,) = [l for l in headline.lines() if l.startswith("audit: ")]
  assert "consistent" not in line
  assert ("these 512 canaries can refute claims up to ε = 20" in line
          and "to test a claim of 23.35" in line)
  reach = headline.as_dict()["audit"]["reach"]
  assert reach["beyond"] and reach["candidates"] == 512
  assert reach["epsilon"] == tight and reach["candidates_needed"] == 1024
  assert headline.as_dict()["audit"]["verdict"] == "beyond reach"


def test_a_bound_of_reach_0_takes_no_bonferroni_share():
  # Steinke et al.'s bound with 2 + 2 guesses from 40 candidates cannot
  # reject even epsilon = 0 at 95% (all 4 right has probability 1/16 >
  # 0.05 under pure guessing), so it is powerless: the tight bound takes
  # the whole level, and the verdict lists the other as powerless.
  rng = np.random.default_rng(0)
  mask = rng.random(40) < 0.5
  scores = mask * 3.0 + rng.standard_normal(40)
  assert lower_bounds.one_run_bound(mask.astype(float), mask, delta=1e-5,
                                    confidence=0.95).epsilon == 0
  fns = {"one-run bound": audit_bounds.coin_bound(lower_bounds.one_run_bound, scores,
                                           mask, delta=1e-5),
         "tight one-run bound": audit_bounds.coin_bound(audit.tight_bound, scores,
                                                 mask, delta=1e-5)}
  verdict = audit.audit(fns, claimed_epsilon=1.0, delta=1e-5)
  assert verdict.powerless == ("one-run bound",)
  assert set(verdict.bounds) == {"tight one-run bound"}
  assert verdict.per_bound_confidence == 0.95  # the whole level, no split
  assert verdict.reach["one-run bound"] == 0.0
  assert "powerless" in str(verdict) and "1 bound, at 95%" in str(
      verdict)
  # With a share, the tight bound would be weaker: the drop is worth it.
  split = fns["tight one-run bound"](1 - 0.05 / 2).epsilon
  assert verdict.bounds["tight one-run bound"].epsilon >= split


def test_gaussian_report_reach_and_fixed_assignment_text(tmp_path):
  # The Gaussian audit's epsilon_lo with the exact null has no limit (its
  # false-positive rate has no sampling error), so its report is never
  # beyond reach; report.json's headline holds the reach. With fixed
  # assignment (no coin) the verdict names no one-run bound.
  r = report.build_report(make_run(tmp_path / "coin"), claimed_epsilon=500.0)
  assert r.verdict.verdict == "consistent"
  reach = r.headline().as_dict()["audit"]["reach"]
  assert math.isinf(reach["epsilon"]) and not reach["beyond"]
  assert reach["bounds"]["epsilon_lo final"] == math.inf
  assert reach["bounds"]["epsilon_lo all"] == r.verdict.bounds[
      "epsilon_lo all"].ceiling  # the held-out null's ceiling
  with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    fixed = report.build_report(make_run(tmp_path / "fixed",
                                         assignment="fixed"))
  assert set(fixed.verdict.bounds) == {"epsilon_lo final", "epsilon_lo all"}
  assert "one-run" not in str(fixed.verdict)
  assert "one-run" in str(r.verdict)


def test_a_claim_of_inf_is_vacuous_not_beyond_reach():
  # epsilon_lo with the exact null reaches inf, so inf used to be "beyond
  # reach" of 40 canaries, with "2^20 candidates would not be enough".
  rng = np.random.default_rng(1)
  x = (2.0 + rng.standard_normal(40)) / 100.0
  fns = {"epsilon_lo": audit_bounds.epsilon_lo_bound(x, dim=10_000,
                                                     delta=1e-5)}
  verdict = audit.audit(fns, claimed_epsilon=math.inf, delta=1e-5)
  assert verdict.verdict == "vacuous" and verdict.vacuous
  assert not verdict.beyond_reach and not verdict.refuted
  assert verdict.candidates_needed is None and verdict.reach_text() == ""
  assert str(verdict).startswith("NOT NEEDED: a claim of ε = inf promises "
                                 "no privacy, so no run can refute it")
  assert verdict.bounds["epsilon_lo"].epsilon > 0  # still computed
  assert "vacuous" in audit.VERDICTS
