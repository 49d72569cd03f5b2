"""Audit mode refutes a planted bug and not a correct run (issue 5).

The bug, of the kind in Tramèr et al. 2022: an aggregator whose Gaussian noise
is smaller than it claims (the claimed standard deviation divided by the
clients per round), while its DpEvent still reports the claimed multiplier.
"""

import warnings

import dp_accounting
import pytest

import small_model

from tff_canary.stats.audit import audit

from tff_canary.stats.accounting import gaussian_accounting

from tff_canary.stats.simulation import gaussian_mechanism


def test_planted_bug_in_the_gaussian_mechanism():
  # bench/validity.py measured detection 1.000 and false refutation 0.008 over
  # 250 trials each. Here 60 seeded trials each: detection must be >= 0.95
  # and false refutations <= 0.10 (a true 5% rate exceeds 0.10 in 60 trials
  # with probability ~5%; the measured 0.8% practically never).
  delta, claimed = 1e-6, 1.0
  z = gaussian_accounting.gaussian_noise_multiplier(claimed, delta)
  rates = []
  for noise in (z / 20, z):
    refuted = 0
    for trial in range(60):
      coin = gaussian_mechanism.simulate_coin(
          dim=1_000_000, num_candidates=2000, noise_std=noise, seed=trial)
      with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        refuted += audit.audit_coin_statistics(
            coin.statistics, coin.inserted_mask, dim=1_000_000,
            claimed_epsilon=claimed, delta=delta).refuted
    rates.append(refuted / 60)
  detection, false_refutation = rates
  assert detection >= 0.95
  assert false_refutation <= 0.10


@pytest.mark.tff
@pytest.mark.slow
def test_planted_bug_in_an_emnist_run(tmp_path, monkeypatch):
  from tff_canary.harness.runner import experiment
  from tff_canary.mechanisms.gaussian import tff as gaussian_tff  # pylint: disable=g-import-not-at-top
  from tff_canary.harness.config import experiment_config
  from tff_canary.federated.insertion import factory
  from tff_canary.federated.insertion import seeded_query

  class UnderNoisedQuery(seeded_query.SeededGaussianSumQuery):
    """Adds stddev / clients_per_round noise but reports the claimed stddev."""

    def __init__(self, clip, noise_multiplier, divisor, noise_seed):
      super().__init__(l2_norm_clip=clip,
                       stddev=clip * noise_multiplier / divisor,
                       noise_seed=noise_seed)
      self._claimed = noise_multiplier

    def get_noised_result(self, sample_state, global_state):
      result, state, _ = super().get_noised_result(sample_state, global_state)
      return result, state, dp_accounting.GaussianDpEvent(self._claimed)

  def buggy(config, canaries, noise_seed, rounds_per_epoch=None):
    # The experiment seeds its noise by default (seeded_noise=True); the
    # restart period is DP-FTRL's only.
    del rounds_per_epoch
    return factory.CanaryDPFactory(
        UnderNoisedQuery(config.clip, config.noise_multiplier,
                         config.clients_per_round, noise_seed),
        canaries, clients_per_round=config.clients_per_round)

  # 3 rounds of tests/small_model.py's CNN (d = 9,030; the bounds do not
  # depend on the model). Measured: the buggy run's largest bound 31.2
  # against the claimed 1.94, the correct run's 0.030 (with TFF's CNN, d =
  # 1.2M: 26.3 and 0.54; at 6 rounds: 15.7 and 1.04 against 2.28).
  def run(name):
    return experiment.run_experiment(experiment_config.ExperimentConfig(
        output_dir=str(tmp_path / name), num_rounds=3, clients_per_round=10,
        examples_per_client=8, clip=1.0, noise_multiplier=1.0,
        num_inserted=40, num_held_out=40, eval_every=0, checkpoint_every=3,
        allow_large_canary_fraction=True),
        progress=False, log=lambda *a: None)

  with warnings.catch_warnings(), small_model.emnist_cnn():
    warnings.simplefilter("ignore", experiment.CanaryFractionWarning)
    correct = run("correct")
    # The user's buggy aggregator in place of DP-FedAvg's (its TFF half).
    monkeypatch.setattr(gaussian_tff.GaussianTff, "canary_aggregator",
                        lambda self, *args, **kwargs: buggy(*args, **kwargs))
    bug = run("bug")
  # Both ledgers claim z = 1, so both audit the same analytical epsilon.
  print("buggy:", bug.verdict)
  print("correct:", correct.verdict)
  assert bug.claimed_epsilon == pytest.approx(correct.claimed_epsilon)
  assert bug.verdict.refuted, str(bug.verdict)
  assert not correct.verdict.refuted, str(correct.verdict)


def test_a_claim_that_is_not_gaussian_gets_bounds_valid_for_any_claim():
  # The f-DP one-run bound tests a claim as a Gaussian mechanism; a Poisson
  # or DDP claim is audited with Steinke et al.'s bound, which holds for any
  # (epsilon, delta) claim, and the verdict says which.
  import numpy as np  # pylint: disable=g-import-not-at-top
  from tff_canary.stats.bounds import lower_bounds  # pylint: disable=g-import-not-at-top
  from tff_canary.stats.canaries.cosine_table import CosineTable  # pylint: disable=g-import-not-at-top
  coin = gaussian_mechanism.simulate_coin(
      dim=100_000, num_candidates=400, noise_std=0.3, seed=3)
  mask = np.asarray(coin.inserted_mask)
  n = mask.size
  table = CosineTable(
      id=np.arange(n), group=np.where(mask, "inserted", "held_out"),
      participation=mask.astype(int), final_cosine=coin.statistics,
      max_cosine=np.full(n, np.nan), max_round=np.full(n, -1), seed=1,
      dim=100_000, num_rounds=1, rounds_recorded=0, assignment="coin")
  gaussian = audit.table_bounds(table, 1e-5)
  general = audit.table_bounds(table, 1e-5, gaussian_claim=False)
  assert set(gaussian) == {"epsilon_lo final", "f-DP one-run bound final"}
  assert set(general) == {"epsilon_lo final", "one-run bound final"}
  assert general["one-run bound final"](0.95).epsilon == (
      lower_bounds.one_run_bound(table.final_cosine, mask, delta=1e-5,
                                 confidence=0.95).epsilon)
  verdict = audit.audit_table(table, claimed_epsilon=1.0, delta=1e-5,
                              gaussian_claim=False)
  assert verdict.claim_kind == "any" and "Steinke" in str(verdict)
  assert "Gaussian-mechanism claim" in str(audit.audit_table(
      table, claimed_epsilon=1.0, delta=1e-5))
  # Orthogonal canaries (independent noise scores): the tight one-run bound
  # (bonferroni) takes the f-DP one's place for a Gaussian claim.
  import dataclasses  # pylint: disable=g-import-not-at-top
  orthogonal = dataclasses.replace(
      table, generator="randomized-hadamard/3-layers/two-windows/float32/v1")
  assert orthogonal.orthogonal and not table.orthogonal
  fns = audit.table_bounds(orthogonal, 1e-5)
  assert set(fns) == {"epsilon_lo final", "tight one-run bound final"}
  assert fns["tight one-run bound final"](0.95).epsilon == (
      audit.tight_bound(table.final_cosine, mask, delta=1e-5,
                        confidence=0.95).epsilon)
  assert set(audit.table_bounds(orthogonal, 1e-5, gaussian_claim=False)) == {
      "epsilon_lo final", "one-run bound final"}
  with pytest.raises(TypeError, match="gaussian_claim"):
    audit.table_bounds(table, 1e-5, gaussian_claim="no")


def test_one_release_audits_the_final_statistic_once():
  # With one recorded round whose statistics are the final cosines (one
  # release of FedAvg), the "all" bounds would repeat the final ones: the
  # audit leaves them out and each of the two bounds gets 97.5%, not 98.75%.
  # A round whose statistics differ (here by one ulp, as a server optimizer
  # that is not a scaling would make them) keeps all four, in their order.
  import numpy as np  # pylint: disable=g-import-not-at-top
  from tff_canary.stats.canaries.cosine_table import CosineTable  # pylint: disable=g-import-not-at-top
  coin = gaussian_mechanism.simulate_coin(
      dim=100_000, num_candidates=400, noise_std=0.3, seed=3)
  mask = np.asarray(coin.inserted_mask)
  n = mask.size
  stats = np.asarray(coin.statistics, np.float64)
  table = CosineTable(
      id=np.arange(n), group=np.where(mask, "inserted", "held_out"),
      participation=mask.astype(int), final_cosine=stats,
      max_cosine=stats.copy(), max_round=np.zeros(n, int), seed=1,
      dim=100_000, num_rounds=1, rounds_recorded=1, assignment="coin")
  assert audit.repeats_final(table)
  assert list(audit.table_bounds(table, 1e-5)) == [
      "epsilon_lo final", "f-DP one-run bound final"]
  verdict = audit.audit_table(table, claimed_epsilon=1.0, delta=1e-5)
  assert verdict.per_bound_confidence == pytest.approx(0.975)
  nudged = stats.copy()
  nudged[0] = np.nextafter(nudged[0], 2.0)
  import dataclasses  # pylint: disable=g-import-not-at-top
  other = dataclasses.replace(table, max_cosine=nudged)
  assert not audit.repeats_final(other)
  assert list(audit.table_bounds(other, 1e-5)) == [
      "epsilon_lo final", "epsilon_lo all", "f-DP one-run bound final",
      "f-DP one-run bound all"]
  assert audit.audit_table(other, claimed_epsilon=1.0, delta=1e-5
                           ).per_bound_confidence == pytest.approx(0.9875)
  # The bounds left out are the final ones again: the same one-run bound.
  both = audit.statistic_bounds(table, 1e-5, "all")
  assert both["f-DP one-run bound all"](0.95).epsilon == audit.table_bounds(
      table, 1e-5)["f-DP one-run bound final"](0.95).epsilon
  with pytest.raises(ValueError, match="statistic"):
    audit.statistic_bounds(table, 1e-5, "last")


def _removal_table(cosines, dim):
  """The table of a run whose inserted canaries' projections were removed
  from the final model (orthogonal canaries; inserted canaries only)."""
  import numpy as np  # pylint: disable=g-import-not-at-top
  from tff_canary.stats.canaries.cosine_table import CosineTable  # pylint: disable=g-import-not-at-top
  n = cosines.size
  return CosineTable(
      id=np.arange(n), group=np.full(n, "inserted"),
      participation=np.ones(n, np.int64), final_cosine=cosines,
      max_cosine=np.full(n, np.nan), max_round=np.full(n, -1), seed=0,
      dim=dim, num_rounds=1, rounds_recorded=0,
      known_canaries_removed="final_and_all_iterates")


def test_final_epsilon_lo_uses_the_null_of_removal_cosines():
  # Orthogonal canaries at 25% of d whose projections the audit removes,
  # drowned in noise (sigma = 1e9: true epsilon 0). The removal cosines'
  # null is that of d - |I| + 1 dimensions (`audit.final_dim`); with the
  # null of d the audit's epsilon_lo final was positive in 177 of these 200
  # seeded runs (issue 26: 88% at 25% of d), with the right one in 7. At a
  # 5% level the count is at most Binomial(200, 0.05), above 20 with
  # probability 0.0015, so 20 is the tolerance; the d-null's count is
  # checked too, so the test shows it can tell them apart. ~1.5 s.
  from tff_canary.stats.bounds import lower_bounds  # pylint: disable=g-import-not-at-top
  from tff_canary.stats.simulation import orthogonal_mechanism  # pylint: disable=g-import-not-at-top
  dim, inserted = 4000, 1000
  exceeded = exceeded_with_d = 0
  for seed in range(200):
    run = orthogonal_mechanism.simulate(
        dim=dim, num_inserted=inserted, num_held_out=0, noise_std=1e9,
        seed=seed)
    table = _removal_table(run.inserted, dim)
    assert audit.final_dim(table) == dim - inserted + 1
    final = audit.table_bounds(table, 1e-6)["epsilon_lo final"]
    exceeded += final(0.95).epsilon > 0
    exceeded_with_d += lower_bounds.epsilon_lo(
        run.inserted, dim=dim, delta=1e-6, confidence=0.95,
        correction="simultaneous").epsilon > 0
  assert exceeded <= 20, exceeded
  assert exceeded_with_d >= 100, exceeded_with_d
