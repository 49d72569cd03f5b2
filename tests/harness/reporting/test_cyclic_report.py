"""The report of a never-restarted matrix run (`--sampling=cyclic`), read as
a user reads it: the rule it is accounted for, each mu's formula, the
contribution over the run, one confidence each, and the placement (issue
34, items 1-6), for banded and BLT DP-FTRL, from simulated runs.

Each run: 4 epochs of 8 rounds in one fixed order (32 rounds, never
restarted), z = 1, 400 candidates, scores u_j = a_j / z + B xi_j with B the
mechanism's own claimed noise (its claim is checked independently in
tests/mechanisms/matrix/test_end_to_end.py and tests/stats/matrix/test_separation.py).
"""

from __future__ import annotations

import re

import numpy as np
import pytest

from tff_canary.harness.config import experiment_config
from tff_canary.harness.reporting import report as report_lib
from tff_canary.mechanisms import registry
import fake_runs

ROUNDS, PER_EPOCH, Z = 32, 8, 1.0
STRATEGIES = {"banded": dict(bands=3),
              "blt": dict(blt_output_scale="0.3,0.15",
                          blt_buf_decay="0.9,0.4")}


def _run(path, aggregator, placement, extra_round=False, seed=0):
  values = dict(
      task="emnist", data="synthetic", seed=seed, canary_seed=7, dim=10_000,
      noise_multiplier=Z, clip=0.1, clients_per_round=4, num_rounds=ROUNDS,
      num_inserted=200, num_held_out=200, sampling="cyclic",
      num_clients=4 * PER_EPOCH, delta=1e-5, presentations=4,
      assignment="coin", directions="orthogonal", aggregator=aggregator,
      placement=placement, **STRATEGIES[aggregator])
  canaries = experiment_config.run_canaries(values)
  noise = registry.get(aggregator).round_noise(values, ROUNDS, PER_EPOCH)
  a = canaries.schedule_matrix() & canaries.inserted[:, None]
  if extra_round:  # each inserted canary once more, the round after its
    took = np.flatnonzero(a.any(axis=1))  # first (twice in an epoch)
    a[took, a[took].argmax(axis=1) + 1] = True
  rng = np.random.default_rng(seed)
  u = a / Z + rng.standard_normal(a.shape) @ noise.released.T
  return report_lib.build_report(
      fake_runs.save_scored_run(path, values, canaries, u).path)


@pytest.mark.parametrize("aggregator", ["banded", "blt"])
@pytest.mark.parametrize("placement", ["random", "worst_case"])
def test_the_report_states_the_rule_formulas_unit_confidence_placement(
    tmp_path, aggregator, placement):
  report = _run(tmp_path / "run", aggregator, placement)
  headline = report.headline().lines()
  markdown = report.to_markdown()
  rows = {name: detail for name, _, _, detail in report.rows()}
  # The rule: at least 8 rounds apart, in the headline and the table.
  rule = "at most 4 participations at least 8 rounds apart"
  assert headline[0].startswith("analytical ε") and rule in headline[0]
  (claim,) = [d for name, d in rows.items() if name.startswith("DP-FTRL, ")]
  worst = report.audit.claim.sensitivity.pattern.nonzero()[0].tolist()
  assert worst == [0, 8, 16, 24]  # C non-increasing: rounds 0, b, 2b, 3b
  assert (f"never restarted, sens = max ‖C a‖ over every a of {rule} in 32 "
          f"rounds (the worst case a*: rounds {worst})") in claim
  assert "one round per epoch" not in claim
  # Each mu's formula is the one whose value is printed.
  worst_row = rows["DP-FTRL rounds, worst-case participant (exact)"]
  t = report.targets
  assert worst_row.startswith(f"μ = {t.worst_case_mu:.4g} = sens / z = ‖C a*‖"
                              " / z")
  assert t.worst_case_mu == pytest.approx(
      report.audit.claim.sensitivity.value / Z, rel=1e-12)
  assert "Σ_e" not in worst_row and "K_e" not in worst_row
  # The contribution over the run's one block, beside its 4 scheduled.
  (contribution,) = [l for l in str(report.audit).splitlines()
                     if l.strip().startswith("contribution:")]
  assert "participations at the clip norm over the run beyond the " \
         "schedules' 4 " in contribution and "per epoch" not in contribution
  # One confidence each, with its digits: the bounds' 97.5% share.
  share = report.audit.bounds.per_bound_confidence
  digits = f"{100 * share:.4g}%"
  assert not re.search(r"\b98%", markdown)
  (bound_line,) = [l for l in headline if l.startswith("lower bound")]
  assert f"(the strongest; {digits}, its share of the audit's 95%)" in (
      bound_line)
  for name in report.audit.bounds.bounds:
    assert rows[name].startswith(f"holds with {digits} confidence: the "
                                 "audit's 95% split by Bonferroni")
  assert f"at {100 * report.audit.bounds.confidence:.4g}% confidence" in (
      str(report.audit.bounds))
  # The placement, in report.md's first lines and the headline's targets.
  first = markdown.split("## The answer")[0]
  if placement == "worst_case":
    assert ("canaries on the accounting's worst-case rounds [0, 8, 16, 24], "
            "every candidate in each (--placement=worst_case)") in first
    assert "expected for this run's canaries (all on the worst-case rounds)" \
        in headline[1]
  else:
    assert "canaries each in a drawn slot of the clients' fixed order" in first
    assert "all on the worst-case rounds" not in headline[1]
  # The strategy's noise is not the tree's.
  assert "tree" not in markdown.replace("tree_scores", "")


def test_a_client_once_more_is_counted_over_the_run(tmp_path):
  # Every inserted canary takes part once more than its schedule: 5 over
  # the run against 4 scheduled, which the headline says in those units.
  report = _run(tmp_path / "run", "blt", "random", extra_round=True)
  assert report.audit.refuted and "contribution" in report.audit.caught_by
  # The excess is one participation at the clip norm, up to the GLS
  # weighting's sampling error (about 0.1 here).
  assert report.audit.contribution == pytest.approx(5.0, abs=0.3)
  (audit_line,) = [l for l in report.headline().lines()
                   if l.startswith("audit:")]
  assert re.search(r"contribution [45]\.\d+ participations over the run > 4 "
                   r"scheduled", audit_line), audit_line
  assert "per epoch" not in audit_line
