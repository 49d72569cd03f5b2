"""Participation k times at least b apart with no restart: the rule, its
claim, the cyclic sampler, the simulated run and its audit.

The claim's sensitivity is checked against the enumeration of every allowed
pattern (an independent method); the audit's "participation" check against
schedules built by hand. Simulated runs use fixed seeds; each tolerance says
why it is what it is.
"""

import numpy as np
import pytest

from tff_canary.stats.correlated import gls_statistics, tree_audit
from tff_canary.stats.matrix import (analytical, blt, separated_simulation,
                                     separation, sensitivity, toeplitz)

RULE = separation.MinSeparation(rounds=12, participations=3, separation=4)


def test_violations_are_too_many_rounds_or_two_too_close():
  a = np.zeros((5, 12), dtype=bool)
  a[0, [0, 4, 8]] = True        # allowed: 3 rounds, 4 apart
  a[1, [1, 5]] = True           # allowed
  a[2, [0, 3]] = True           # 3 apart
  a[3, [0, 4, 8, 11]] = True    # 4 rounds (and 8, 11 are 3 apart)
  a[4, [2, 11]] = True          # allowed
  np.testing.assert_array_equal(RULE.violations(a),
                                [False, False, True, True, False])
  with pytest.raises(ValueError, match=r"schedule must be a \[candidates, "
                     r"12\] Boolean array"):
    RULE.violations(a[:, :10])
  with pytest.raises(ValueError, match="separation"):
    separation.MinSeparation(rounds=12, participations=3, separation=0)


def test_the_cyclic_sampler_is_exactly_period_apart():
  rng = np.random.default_rng(0)
  a = separation.cyclic_schedule(12, 4, 200, rng)
  assert a.shape == (200, 12) and a.sum(axis=1).tolist() == [3] * 200
  assert not RULE.violations(a).any()
  first = a.argmax(axis=1)
  assert set(first.tolist()) == {0, 1, 2, 3}  # every group drawn
  # Every 2 rounds: 6 participations, 2 apart, breaking the rule.
  assert RULE.violations(separation.cyclic_schedule(12, 2, 5, rng)).all()
  with pytest.raises(ValueError, match="period must be at most rounds = 12"):
    separation.cyclic_schedule(12, 13, 5, rng)


@pytest.mark.parametrize("coefficients", [
    toeplitz.square_root_coefficients(3),
    toeplitz.square_root_coefficients(12),
    blt.blt([0.3, 0.2], [0.9, 0.5]).coefficients(12)])
def test_the_claim_is_the_enumerated_worst_case(coefficients):
  claim = RULE.claim(coefficients, noise_multiplier=2.0, delta=1e-5)
  enumerated = sensitivity.enumerated_sensitivity(
      toeplitz.strategy_matrix(coefficients, 12), participations=3,
      separation=4)
  assert claim.sensitivity.value == pytest.approx(enumerated.value,
                                                  rel=1e-12)
  assert claim.mu == pytest.approx(enumerated.value / 2.0, rel=1e-12)
  assert claim.epsilon == analytical.matrix_epsilon(
      enumerated, noise_multiplier=2.0, delta=1e-5).epsilon


def _audit(run, rule=RULE):
  return tree_audit.audit_ftrl(
      run.scores, run.schedule, run.inserted, noise=run.noise,
      rounds_per_epoch=rule.rounds, noise_multiplier=1.0, delta=1e-5,
      self_test_noise=run.self_test_noise, claim=run.claim,
      participation=rule)


def test_worst_case_canaries_face_the_claimed_mu_and_pass():
  c = blt.blt([0.3, 0.2], [0.9, 0.5]).coefficients(12)
  run = separated_simulation.simulate(
      c, RULE, noise_multiplier=1.0, delta=1e-5, num_candidates=2000,
      self_test_dim=200, seed=3)
  t = gls_statistics.scheduled_statistic(run.scores, run.schedule, run.noise)
  # ~1000 inserted T ~ N(mu, 1): the mean's SE is 0.032; 4 SE.
  assert t[run.inserted].mean() == pytest.approx(run.claim.mu, abs=0.13)
  assert t[~run.inserted].mean() == pytest.approx(0.0, abs=0.13)
  audit = _audit(run)
  assert not audit.refuted, str(audit)
  assert ("participation: every candidate's schedule within the claimed at "
          "most 3 participations at least 4 rounds apart in 12 rounds"
          ) in str(audit)


def test_the_simulated_run_s_noise_carries_the_rule():
  # n = 80 rounds, 4 participations 20 apart, z = 1: the rule's mu (2.77
  # for this BLT) is twice the one-participation mu of the same C (1.32),
  # which a plain StrategyNoise over the run claims; the run's noise must
  # give the rule's, so that the targets and an audit without claim= face
  # the claim the run is accounted for.
  from tff_canary.stats.matrix import strategy_noise  # pylint: disable=g-import-not-at-top
  from tff_canary.stats.correlated import tree_targets  # pylint: disable=g-import-not-at-top
  rule = separation.MinSeparation(rounds=80, participations=4,
                                  separation=20)
  c = blt.blt([0.3, 0.2], [0.9, 0.5]).coefficients(80)
  run = separated_simulation.simulate(
      c, rule, noise_multiplier=1.0, delta=1e-5, num_candidates=400,
      self_test_dim=20, seed=1)
  assert isinstance(run.noise, separation.SeparatedNoise)
  assert run.noise.rule == rule
  expected = rule.claim(c, noise_multiplier=1.0, delta=1e-5)
  assert run.claim.epsilon == expected.epsilon and run.claim.mu == expected.mu
  one = separation.MinSeparation(rounds=80, participations=1, separation=80)
  plain = strategy_noise.strategy_noise(c, 80).claim(1.0, delta=1e-5)
  assert plain.mu == pytest.approx(
      one.claim(c, noise_multiplier=1.0, delta=1e-5).mu, rel=1e-12)
  assert run.claim.mu > 2 * plain.mu
  targets = tree_targets.tree_targets(
      run.noise, run.schedule, run.inserted, rounds_per_epoch=80,
      noise_multiplier=1.0, delta=1e-5)
  assert targets.node_epsilon == pytest.approx(run.claim.epsilon, rel=1e-12)
  assert targets.worst_case_mu == pytest.approx(run.claim.mu, rel=1e-12)
  # Worst-case canaries of a correct mechanism: an audit with the noise's
  # own claim does not refute it (seed 1; a chance alarm has probability
  # at most the level, 0.05).
  audit = tree_audit.audit_ftrl(
      run.scores, run.schedule, run.inserted, noise=run.noise,
      rounds_per_epoch=80, noise_multiplier=1.0, delta=1e-5,
      self_test_noise=run.self_test_noise, participation=rule)
  assert audit.claim.epsilon == run.claim.epsilon
  assert not audit.refuted, str(audit)


def test_a_claim_of_a_larger_separation_is_refuted_by_the_schedules():
  # A correct run is refuted with probability at most the level, 0.05
  # (seed 5's correct run is such a chance alarm, by the contribution check
  # at p = 0.016 against 0.05 / 3); seed 6's is not.
  c = toeplitz.square_root_coefficients(3)
  correct = separated_simulation.simulate(
      c, RULE, noise_multiplier=1.0, delta=1e-5, num_candidates=400,
      self_test_dim=200, placement="clients", seed=6)
  assert not _audit(correct).refuted, str(_audit(correct))
  wrong = separated_simulation.simulate(
      c, RULE, noise_multiplier=1.0, delta=1e-5, num_candidates=400,
      self_test_dim=200, placement="clients", client_period=2, seed=6)
  audit = _audit(wrong)
  assert audit.refuted and "participation" in audit.caught_by
  assert "400 of 400 candidates' schedules break the claimed" in str(audit)
  # The noise is correct: the self-test passes.
  assert "self-test" not in audit.caught_by


def test_without_a_rule_there_is_no_participation_check():
  c = toeplitz.square_root_coefficients(3)
  run = separated_simulation.simulate(
      c, RULE, noise_multiplier=1.0, delta=1e-5, num_candidates=400,
      self_test_dim=200, placement="clients", client_period=2, seed=6)
  audit = tree_audit.audit_ftrl(
      run.scores, run.schedule, run.inserted, noise=run.noise,
      rounds_per_epoch=12, noise_multiplier=1.0, delta=1e-5,
      claim=run.claim)
  assert audit.participation is None
  assert "\n  participation:" not in str(audit)
  with pytest.raises(TypeError, match="rule must be a separation"):
    separated_simulation.simulate(c, 4, noise_multiplier=1.0, delta=1e-5,
                                  num_candidates=10, self_test_dim=2)
