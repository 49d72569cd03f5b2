"""Cyclic sampling (`--sampling=cyclic`): every client exactly one epoch
apart, the rule of production BLT DP-FTRL, under which banded and BLT run
without restarts and are accounted for k participations b apart
(client_sampling, schedules.CyclicRounds, separation.SeparatedNoise,
mechanisms.matrix). NumPy only; the report of a simulated cyclic run and
the TFF run are in test_matrix_mechanisms.py.
"""

from __future__ import annotations

import numpy as np
import pytest

from tff_canary.harness.config import experiment_config
from tff_canary.mechanisms import canary_claim
from tff_canary.mechanisms import registry
from tff_canary.stats.accounting import gaussian_accounting
from tff_canary.stats.canaries import client_sampling, schedules
from tff_canary.stats.canaries.client_sampling import ClientSampler
from tff_canary.stats.correlated import gls_statistics
from tff_canary.stats.matrix import blt, sensitivity, separation, toeplitz


def test_a_cyclic_client_takes_part_exactly_one_epoch_apart():
  # 53 clients, 5 a round: epochs of 10 rounds, 3 clients sit out; 34
  # rounds are 3 epochs and 4 rounds of a fourth.
  sampler = ClientSampler(53, 5, "cyclic", seed=3)
  shuffle = ClientSampler(53, 5, "shuffle", seed=3)
  rounds = {}
  for r in range(34):
    for client in sampler.clients(r).tolist():
      rounds.setdefault(client, []).append(r)
    # Epoch 0 is the shuffled sampler's; later epochs repeat it.
    np.testing.assert_array_equal(sampler.clients(r), shuffle.clients(r % 10))
  assert len(rounds) == 50
  for taken in rounds.values():
    assert np.all(np.diff(taken) == 10) and taken[0] < 10
  counts = sampler.counts(34)
  assert sorted(set(counts.tolist())) == [0, 3, 4]
  assert (counts == 4).sum() == 20   # the 4 rounds of the fourth epoch


def test_cyclic_canaries_take_part_as_cyclic_clients():
  sampler = ClientSampler(53, 5, "cyclic", seed=3)
  schedule = client_sampling.canary_schedule(sampler, 34)
  assert schedule == schedules.CyclicRounds(34, 10)
  assert schedule.expected_participation() == pytest.approx(3.4)
  assert client_sampling.canary_schedule(sampler, 34, 3) == schedule
  with pytest.raises(ValueError, match=r"presentations = 2 contradicts.*3 "
                     r"whole epochs"):
    client_sampling.canary_schedule(sampler, 34, 2)
  part = schedule.realize(0, np.arange(2000))
  a = np.zeros((2000, 34), bool)
  a[part.events[:, 1], part.events[:, 0]] = True
  # Each canary in one slot g of [0, 10): rounds g, g + 10, ...
  first = a.argmax(axis=1)
  np.testing.assert_array_equal(a, np.arange(34)[None] % 10 == first[:, None])
  rule = separation.MinSeparation(rounds=34, participations=4, separation=10)
  assert not rule.violations(a).any()
  # 4 of the 10 slots have a fourth round: Binomial(2000, 0.4) / 2000 has
  # sd 0.011; 0.05 is 4.5 sd (fixed seed).
  assert abs((a.sum(axis=1) == 4).mean() - 0.4) < 0.05
  # The schedule's repr is read back from config.json, as the others are.
  assert canary_claim.schedule_of(repr(schedule)) == schedule
  summary = client_sampling.participation_summary(
      sampler, 34, part.counts(2000), schedule)
  assert summary["epochs"] == pytest.approx(3.4)
  assert client_sampling.describe(summary).startswith(
      "clients took part 0-4 times (mean ")
  assert "epochs of 10 rounds in one fixed order), canaries 3-4 times" in (
      client_sampling.describe(summary))
  with pytest.raises(ValueError, match="period"):
    schedules.CyclicRounds(10, 0)


_BLT = blt.blt([0.3, 0.1], [0.5, 0.95])


@pytest.mark.parametrize("coefficients", [
    toeplitz.square_root_coefficients(3), toeplitz.square_root_coefficients(16),
    _BLT.coefficients(16)], ids=["banded 3", "square root", "blt"])
@pytest.mark.parametrize("k,b", [(4, 4), (3, 5), (2, 7)])
def test_separated_noise_worst_case_is_the_enumerated_one(coefficients, k, b):
  rule = separation.MinSeparation(rounds=16, participations=k, separation=b)
  noise = separation.separated_noise(coefficients, rule)
  exact = sensitivity.enumerated_sensitivity(
      toeplitz.strategy_matrix(coefficients, 16), participations=k,
      separation=b)
  assert noise.rounds_per_block == (16,)
  assert noise.worst_case_mu(2.0) == pytest.approx(exact.value / 2.0,
                                                   rel=1e-9)
  a = np.zeros((1, 16), bool)
  a[0, noise.worst_case_rounds()] = True
  # A canary on a* faces the claim's mu (GLS with K = C^-1 C^-T).
  assert gls_statistics.schedule_mu(a, noise, noise_multiplier=2.0)[0] == (
      pytest.approx(noise.release_mu(2.0), rel=1e-9))
  claim = noise.claim(2.0, delta=1e-5)
  assert claim.epsilon == pytest.approx(
      gaussian_accounting.gaussian_epsilon_of_mu(exact.value / 2.0, 1e-5),
      rel=1e-9)
  with pytest.raises(TypeError, match="rule must be a separation."
                     "MinSeparation"):
    separation.separated_noise(coefficients, (16, k, b))


def test_the_tree_refuses_cyclic_sampling_and_the_matrix_mechanisms_take_it():
  with pytest.raises(ValueError, match=r"add --sampling=shuffle\b.*once per "
                     "tree"):
    experiment_config.ExperimentConfig(aggregator="tree", clip=0.1,
                                       sampling="cyclic")
  with pytest.raises(ValueError, match=r"add --sampling=shuffle or "
                     r"--sampling=cyclic.*never restarted"):
    experiment_config.ExperimentConfig(aggregator="blt", clip=0.1,
                                       sampling="per_round")
  for name in ("banded", "blt"):
    config = experiment_config.ExperimentConfig(
        aggregator=name, clip=0.1, sampling="cyclic", epochs=4,
        num_rounds=None, clients_per_round=2)
    mechanism = registry.get(name)
    assert mechanism.restart_every(config, 8) is None
    assert mechanism.restart_every(
        experiment_config.ExperimentConfig(aggregator=name, clip=0.1), 8) == 8
    noise = mechanism.round_noise(config, 32, 8)
    assert isinstance(noise, separation.SeparatedNoise)
    assert noise.rule == separation.MinSeparation(32, 4, 8)
    assert "never restarted (cyclic sampling" in (
        mechanism.section_settings(config.as_dict())[0])


def test_the_blt_is_fitted_to_the_run_s_participation():
  blt_mechanism = registry.get("blt")
  cyclic = dict(sampling="cyclic", num_rounds=24, blt_buffers=2,
                blt_output_scale=None, blt_buf_decay=None)
  shuffle = dict(cyclic, sampling="shuffle")
  fitted = blt_mechanism.strategy(cyclic, 8)
  # The fit minimizes the error under the rule it is given: each BLT's loss
  # under its own rule is at most the other's (a local search: 1e-9 slack).
  from tff_canary.stats.matrix import blt_fit  # pylint: disable=g-import-not-at-top
  per_epoch = blt_mechanism.strategy(shuffle, 8)
  assert not np.allclose(fitted.buf_decay, per_epoch.buf_decay)
  loss = lambda s: blt_fit.max_loss(s.coefficients(24), rounds=24,
                                    participations=3, separation=8)
  assert loss(fitted) <= loss(per_epoch) * (1 + 1e-9)
  assert blt_mechanism.coefficients(cyclic, 8).size == 24
  assert blt_mechanism.coefficients(shuffle, 8).size == 8
  assert "fitted to the run's participation, never restarted" in (
      blt_mechanism.section_settings(cyclic)[0])


def test_worst_case_placement_under_cyclic_sampling_is_the_rule_s_a_star():
  config = experiment_config.ExperimentConfig(
      aggregator="banded", bands=3, clip=0.1, placement="worst_case",
      sampling="cyclic", num_rounds=12, clients_per_round=2)
  resolved = experiment_config.resolve(config, 8, 100)  # epochs of 4 rounds
  # Nonincreasing C: a* is rounds 0, b, 2b (Kalinin & Lampert 2024, Thm 2).
  assert resolved.canary_schedule == schedules.SharedRounds(12, (0, 4, 8))
  assert resolved.values["presentations"] == 3
  random = experiment_config.resolve(
      experiment_config.ExperimentConfig(
          aggregator="banded", clip=0.1, sampling="cyclic", num_rounds=12,
          clients_per_round=2), 8, 100)
  assert random.canary_schedule == schedules.CyclicRounds(12, 4)
