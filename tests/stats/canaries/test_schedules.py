"""Tests of tff_canary.stats.canaries.schedules and tff_canary.stats.canaries.canary_config.

NumPy only. Statistical checks use fixed seeds; each says why its tolerance is what
it is.
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest
from scipy import stats

from tff_canary.stats.canaries import canary_config
from tff_canary.stats.canaries import schedules


def _ids(n):
  return np.arange(n)


# ------------------------------------------------------------ ShuffledEpochs


def test_shuffled_epochs_once_per_epoch_within_the_epoch():
  schedule = schedules.ShuffledEpochs(num_rounds=23, rounds_per_epoch=5)
  part = schedule.realize(seed=1, canary_ids=_ids(40))
  assert schedule.num_epochs == 4
  np.testing.assert_array_equal(part.counts(40), np.full(40, 4))
  for cid in range(40):
    rounds = part.rounds_of(cid)
    np.testing.assert_array_equal(rounds // 5, np.arange(4))
  # The remainder (rounds 20, 21, 22) is no epoch: no canary there.
  assert part.per_round()[20:].sum() == 0
  assert part.per_round().sum() == 160


def test_shuffled_epochs_round_within_epoch_is_uniform():
  # 20000 canaries, one epoch of 10 rounds: the per-round counts are
  # multinomial(20000, 1/10). A chi-square test at level 1e-3 (fixed seed)
  # fails only if the rounds are far from uniform.
  part = schedules.ShuffledEpochs(10, 10).realize(5, _ids(20000))
  counts = part.per_round()
  assert counts.sum() == 20000
  assert stats.chisquare(counts).pvalue > 1e-3


def test_shuffled_epochs_one_presentation_of_a_long_run():
  # The paper's setting: each canary once in a 500-round run.
  part = schedules.ShuffledEpochs(500, 500).realize(0, _ids(1000))
  np.testing.assert_array_equal(part.counts(1000), np.ones(1000))
  assert part.per_round().mean() == 2.0


@pytest.mark.parametrize("kwargs, error, match", [
    (dict(num_rounds=10, rounds_per_epoch=11), ValueError, "longer than"),
    (dict(num_rounds=0, rounds_per_epoch=1), ValueError, "num_rounds"),
    (dict(num_rounds=10, rounds_per_epoch=0), ValueError, "rounds_per_epoch"),
    (dict(num_rounds=10.0, rounds_per_epoch=2), TypeError, "num_rounds"),
    (dict(num_rounds=True, rounds_per_epoch=1), TypeError, "num_rounds"),
])
def test_shuffled_epochs_bad_arguments(kwargs, error, match):
  with pytest.raises(error, match=match):
    schedules.ShuffledEpochs(**kwargs)


# -------------------------------------------------------- FixedPresentations


def test_fixed_presentations_exactly_r_distinct_rounds():
  part = schedules.FixedPresentations(12, 5).realize(3, _ids(300))
  np.testing.assert_array_equal(part.counts(300), np.full(300, 5))
  for cid in range(300):
    rounds = part.rounds_of(cid)
    assert len(np.unique(rounds)) == 5
    assert rounds.min() >= 0 and rounds.max() < 12


def test_fixed_presentations_rounds_are_uniform():
  # 3000 canaries x 4 presentations over 20 rounds: each round is hit
  # 600 times in expectation; chi-square at level 1e-3 (fixed seed). The
  # counts are slightly under-dispersed (rounds of one canary are distinct),
  # which only makes the test more lenient.
  part = schedules.FixedPresentations(20, 4).realize(11, _ids(3000))
  assert stats.chisquare(part.per_round()).pvalue > 1e-3


def test_fixed_presentations_all_rounds_and_none():
  part = schedules.FixedPresentations(6, 6).realize(0, _ids(3))
  for cid in range(3):
    np.testing.assert_array_equal(part.rounds_of(cid), np.arange(6))
  assert schedules.FixedPresentations(6, 0).realize(0, _ids(3)).num_events == 0


def test_fixed_presentations_more_than_rounds_is_an_error():
  with pytest.raises(ValueError, match="presentations = 7 exceeds"):
    schedules.FixedPresentations(6, 7)
  with pytest.raises(ValueError, match="presentations"):
    schedules.FixedPresentations(6, -1)


# ---------------------------------------------------------- PerRoundSampling


def test_per_round_sampling_rate():
  # 2000 canaries x 50 rounds at q = 0.1: the total is Binomial(100000, 0.1),
  # mean 10000, sd 94.9. A 5 sd band (fixed seed) cannot fail by chance in
  # practice and would catch a rate off by 5%.
  part = schedules.PerRoundSampling(50, 0.1).realize(2, _ids(2000))
  assert abs(part.num_events - 10000) < 5 * np.sqrt(100000 * 0.1 * 0.9)
  # Independence across canaries: the per-canary counts are Binomial(50, .1),
  # variance 4.5; the sample variance of 2000 of them has sd ~0.2.
  assert abs(part.counts(2000).var() - 4.5) < 1.0


def test_per_round_sampling_ends():
  assert schedules.PerRoundSampling(5, 0.0).realize(0, _ids(4)).num_events == 0
  part = schedules.PerRoundSampling(5, 1.0).realize(0, _ids(4))
  np.testing.assert_array_equal(part.counts(4), np.full(4, 5))


@pytest.mark.parametrize("probability", [-0.1, 1.5])
def test_per_round_sampling_bad_probability(probability):
  with pytest.raises(ValueError, match="probability"):
    schedules.PerRoundSampling(5, probability)


def test_per_round_sampling_nan_probability():
  with pytest.raises(ValueError, match="probability"):
    schedules.PerRoundSampling(5, float("nan"))


# ------------------------------------------------------------ Participation


@pytest.mark.parametrize("schedule", [
    schedules.ShuffledEpochs(30, 10),
    schedules.FixedPresentations(30, 3),
    schedules.PerRoundSampling(30, 0.2),
])
def test_realize_is_deterministic_and_seed_dependent(schedule):
  a = schedule.realize(7, _ids(50))
  b = schedule.realize(7, _ids(50))
  c = schedule.realize(8, _ids(50))
  np.testing.assert_array_equal(a.events, b.events)
  assert not np.array_equal(a.events, c.events)
  assert a.events.dtype == np.int32
  assert not a.events.flags.writeable


def test_participation_views_agree():
  part = schedules.PerRoundSampling(15, 0.3).realize(4, np.array([2, 5, 9]))
  events = part.events
  # Sorted by round then id.
  assert np.all(np.lexsort((events[:, 1], events[:, 0])) ==
                np.arange(len(events)))
  counts = part.counts(10)
  assert counts[[0, 1, 3, 4, 6, 7, 8]].sum() == 0
  for cid in (2, 5, 9):
    assert len(part.rounds_of(cid)) == counts[cid]
  per_round = part.per_round()
  for r in range(15):
    assert len(part.canaries_in(r)) == per_round[r]
  assert per_round.sum() == counts.sum() == part.num_events


def test_participation_validation():
  with pytest.raises(ValueError, match="twice"):
    schedules.Participation(3, np.array([[0, 1], [0, 1]]))
  with pytest.raises(ValueError, match="rounds in"):
    schedules.Participation(3, np.array([[3, 1]]))
  with pytest.raises(ValueError, match="shape"):
    schedules.Participation(3, np.array([[0, 1, 2]]))
  with pytest.raises(ValueError, match="too small"):
    schedules.Participation(3, np.array([[0, 4]])).counts(3)


def test_realize_bad_ids_and_seed():
  schedule = schedules.FixedPresentations(3, 1)
  with pytest.raises(ValueError, match="distinct"):
    schedule.realize(0, np.array([1, 1]))
  with pytest.raises(TypeError, match="seed"):
    schedule.realize(1.5, _ids(2))
  with pytest.raises(ValueError, match="seed"):
    schedule.realize(-1, _ids(2))


# ------------------------------------------------------------- CanaryConfig


def _config(**kwargs):
  # The paper's construction (fixed ids, gaussian directions), not the
  # defaults: these tests read the fixed membership.
  base = dict(seed=3, num_inserted=10, num_held_out=5,
              schedule=schedules.FixedPresentations(8, 2),
              assignment="fixed", directions="gaussian")
  base.update(kwargs)
  return canary_config.CanaryConfig(**base)


def test_config_fixed_membership_and_participation():
  config = _config()
  np.testing.assert_array_equal(config.inserted, np.arange(15) < 10)
  np.testing.assert_array_equal(config.inserted_ids, np.arange(10))
  np.testing.assert_array_equal(config.held_out_ids, np.arange(10, 15))
  np.testing.assert_array_equal(config.counts(),
                                np.r_[np.full(10, 2), np.zeros(5)])
  assert config == _config()
  assert config != _config(seed=4)
  assert hash(config) == hash(_config())


def test_config_coin_assignment():
  # 2000 fair coins: the inserted count is Binomial(2000, 1/2), sd 22.4; a
  # 5 sd band (fixed seed) catches a biased coin.
  config = _config(num_inserted=1000, num_held_out=1000, assignment="coin",
                   schedule=schedules.FixedPresentations(8, 1))
  k = int(config.inserted.sum())
  assert abs(k - 1000) < 5 * np.sqrt(2000 * 0.25)
  # Only inserted canaries take part; held-out ones never.
  counts = config.counts()
  np.testing.assert_array_equal(counts[config.inserted], 1)
  np.testing.assert_array_equal(counts[~config.inserted], 0)
  # Deterministic from the seed, different for another seed.
  again = _config(num_inserted=1000, num_held_out=1000, assignment="coin",
                  schedule=schedules.FixedPresentations(8, 1))
  np.testing.assert_array_equal(config.inserted, again.inserted)
  other = _config(seed=4, num_inserted=1000, num_held_out=1000,
                  assignment="coin",
                  schedule=schedules.FixedPresentations(8, 1))
  assert not np.array_equal(config.inserted, other.inserted)


def test_config_defaults_are_the_recommended_design():
  # README.md's recommendation: coin assignment, orthogonal directions, which
  # record no aggregate; the paper's construction is one argument away.
  config = canary_config.CanaryConfig(
      seed=3, num_inserted=10, num_held_out=5,
      schedule=schedules.FixedPresentations(8, 2))
  assert (config.assignment, config.directions) == ("coin", "orthogonal")
  assert config.record_aggregates is False
  assert config == _config(assignment="coin", directions="orthogonal")
  paper = _config()
  assert (paper.assignment, paper.directions) == ("fixed", "gaussian")
  assert paper.record_aggregates is True


@pytest.mark.parametrize("kwargs, error, match", [
    (dict(num_inserted=-1), ValueError, "num_inserted"),
    (dict(num_held_out=-2), ValueError, "num_held_out"),
    (dict(num_inserted=2.0), TypeError, "num_inserted"),
    (dict(seed=1.5), TypeError, "seed"),
    (dict(seed="7"), TypeError, "seed"),
    (dict(seed=-3), ValueError, "seed"),
    (dict(seed=2**64), ValueError, "seed"),
    (dict(schedule=None), TypeError, "schedule"),
    (dict(schedule=[(0, 1)]), TypeError, "schedule"),
    (dict(assignment="random"), ValueError, "assignment"),
    (dict(record_aggregates="yes"), TypeError, "record_aggregates"),
])
def test_config_bad_arguments(kwargs, error, match):
  with pytest.raises(error, match=match):
    _config(**kwargs)


def test_config_is_frozen():
  config = _config()
  with pytest.raises(Exception):
    config.seed = 5
  with pytest.raises(ValueError):
    config.inserted[0] = False


def test_orthogonality_warning_threshold():
  with pytest.warns(canary_config.TooManyCanariesWarning, match="dim / 100"):
    assert canary_config.check_orthogonality(11, 1000)
  with warnings.catch_warnings():
    warnings.simplefilter("error")
    assert not canary_config.check_orthogonality(10, 1000)


def test_shuffled_epochs_partial_last_epoch():
  # 23 rounds of epochs of 5: rounds 20-22 start a fourth epoch. Each canary
  # draws a round of it uniformly from 20..24 and keeps it if < 23: a 4th
  # participation with probability 3/5, never outside the run.
  schedule = schedules.ShuffledEpochs(23, 5, partial_last_epoch=True)
  part = schedule.realize(seed=1, canary_ids=_ids(4000))
  assert schedule.expected_participation() == pytest.approx(23 / 5)
  extra = np.bincount(part.events[:, 1], minlength=4000) - 4
  assert set(extra) <= {0, 1}
  # Binomial(4000, 0.6) / 4000 has sd 0.0077; 0.04 is 5 sd (fixed seed).
  assert abs(extra.mean() - 0.6) < 0.04
  late = part.events[part.events[:, 0] >= 20, 0]
  assert late.max() <= 22
  # With no remainder the flag draws exactly what it drew without it.
  np.testing.assert_array_equal(
      schedules.ShuffledEpochs(20, 5, partial_last_epoch=True).realize(
          1, _ids(50)).events,
      schedules.ShuffledEpochs(20, 5).realize(1, _ids(50)).events)


def test_shuffled_epochs_longer_than_the_run_with_a_partial_epoch():
  part = schedules.ShuffledEpochs(3, 10, partial_last_epoch=True).realize(
      0, _ids(4000))
  counts = part.counts(4000)
  # Binomial(4000, 0.3) / 4000 has sd 0.0072; 0.04 is 5.5 sd (fixed seed).
  assert counts.max() == 1 and abs(counts.mean() - 0.3) < 0.04
  with pytest.raises(TypeError, match="partial_last_epoch"):
    schedules.ShuffledEpochs(3, 1, partial_last_epoch="yes")
