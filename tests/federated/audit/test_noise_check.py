"""The noise self-test on real TFF aggregation processes (`tff_canary.federated.audit.noise_check`).

TFF's own DP factories must pass; TFF's factory around a planted
tensorflow_privacy query (`planted_noise`) must fail in the family that
names its bug. TFF's noise is unseeded, so the passing cases are random: each
fails with probability at most 0.001 (the family level), ~1% for the whole
module. The planted bugs are seeded and give p-values far below any
threshold.
"""

import numpy as np
import pytest
import tensorflow_federated as tff

from tff_canary.federated.insertion import factory

from tff_canary.federated.audit import noise_check
from tff_canary.stats.canaries import canary_config
from tff_canary.stats.canaries import schedules

import planted_noise

pytestmark = pytest.mark.tff

NAMES = ("w1", "b1", "w2", "b2")
VALUE_TYPE = planted_noise.value_type()
DP = tff.aggregators.DifferentiallyPrivateFactory


def check(aggregator, **kwargs):
  kwargs.setdefault("tensor_names", NAMES)
  return noise_check.check_aggregation_noise(aggregator, VALUE_TYPE, **kwargs)


def test_tff_fixed_clipping_passes_with_the_claim_from_the_state():
  result = check(DP.gaussian_fixed(noise_multiplier=1.0, clients_per_round=10.0,
                                   clip=0.5))
  assert result.passed, result.failures
  # z C / denominator = 1 x 0.5 / 10, every round.
  assert result.claimed_std == pytest.approx((0.05,) * 4, rel=1e-6)
  assert "denominator 10 (query state)" in result.claim
  assert result.dim == 101_125 and result.tensor_sizes == (100_352, 128, 640, 5)


def test_tff_adaptive_clipping_uses_each_rounds_clip_before_the_round():
  # Zero values move the clip (every value is "unclipped"), so a claim that
  # took the clip after the round would be off from round 0 on: round 0's
  # clip before the round is the initial one, 0.1.
  aggregator = DP.gaussian_adaptive(noise_multiplier=1.0, clients_per_round=100.0)
  result = check(aggregator)
  assert result.passed, result.failures
  z, _ = tff.aggregators.differential_privacy.adaptive_clip_noise_params(
      1.0, 100.0)
  assert result.claimed_std[0] == pytest.approx(z * 0.1 / 100, rel=1e-6)
  assert len(set(result.claimed_std)) > 1
  assert "C=0.1;" in result.claim


def test_tff_learning_dp_aggregator_with_zeroing_passes():
  # The DP state sits under the zeroing wrapper's inner_agg.
  result = check(tff.learning.dp_aggregator(noise_multiplier=1.0,
                                            clients_per_round=100))
  assert result.passed, result.failures
  assert "query state" in result.claim


@pytest.mark.parametrize("kind, family", [
    ("prefix_reuse", "prefix"), ("prefix_reuse", "reuse"),
    ("std_over_10", "variance"), ("same_every_round", "rounds")])
def test_planted_bugs_fail(kind, family):
  result = check(planted_noise.planted_factory(kind, seed=7))
  assert not result.passed
  assert family in result.rejected_families()


def test_planted_prefix_reuse_names_the_tensors():
  result = check(planted_noise.planted_factory("prefix_reuse", seed=8))
  assert result.test("prefix[w1,b2]").rejected  # the 5-element tensor
  assert result.test("prefix[w1,b1]").statistic == pytest.approx(1.0)


def test_the_planted_control_passes():
  # The harness itself is sound: the same query drawing fresh seeds per
  # tensor and round, with the right std.
  assert check(planted_noise.planted_factory("correct", seed=9)).passed


def test_a_given_process_is_initialized_afresh():
  process = DP.gaussian_fixed(1.0, 10.0, 0.5).create(VALUE_TYPE)
  first = noise_check.check_aggregation_noise(process, num_rounds=2)
  second = noise_check.check_aggregation_noise(process, VALUE_TYPE,
                                               num_rounds=2)
  assert first.passed and second.passed and first.num_rounds == 2


def test_overrides_of_the_claim():
  aggregator = DP.gaussian_fixed(1.0, 10.0, 0.5)
  # The truth is 0.05. A claim 10x too small means 10x more noise than
  # claimed: a note, not a failure (it costs utility, not privacy); a claim
  # 10x too large (less noise than claimed) fails; the right one passes.
  more = check(aggregator, claimed_std=0.005)
  assert more.passed and more.notes[0].startswith("more noise than claimed")
  assert not check(aggregator, claimed_std=0.5).passed
  result = check(aggregator, claimed_std=[0.05] * 4)
  assert result.passed and result.claim == "claimed_std given by the caller"
  wrong = check(aggregator, clients_per_round=1.0)
  assert wrong.claimed_std[0] == pytest.approx(0.5)
  assert "variance" in wrong.rejected_families()
  assert "denominator 1 (given)" in wrong.claim


def test_a_process_without_dp_state_needs_a_claim():
  with pytest.raises(noise_check.NoClaimError, match="claimed_std"):
    check(tff.aggregators.SumFactory())
  result = check(tff.aggregators.SumFactory(), claimed_std=0.0)
  assert result.passed and result.degenerate


def _no_canaries(num_rounds=4):
  return canary_config.CanaryConfig(
      seed=1, num_inserted=0, num_held_out=0,
      schedule=schedules.FixedPresentations(num_rounds=num_rounds,
                                            presentations=1))


def test_canary_factory_with_tff_noise_passes():
  aggregator = factory.CanaryDPFactory.gaussian_adaptive(
      1.0, 100.0, canaries=_no_canaries())
  result = check(aggregator)
  assert result.passed, result.failures


def test_canary_factory_with_seeded_noise_passes():
  # Before tff_canary.federated.insertion.seeded_query, factory's seeded noise reused one stream
  # for every tensor and this check failed it (prefix[...] cosine 1).
  aggregator = factory.CanaryDPFactory.gaussian_fixed(
      1.0, 10.0, 0.5, canaries=_no_canaries(), noise_seed=3)
  result = check(aggregator)
  assert result.passed, result.failures


def test_canary_factory_with_seeded_adaptive_noise_passes():
  aggregator = factory.CanaryDPFactory.gaussian_adaptive(
      1.0, 100.0, canaries=_no_canaries(), noise_seed=3)
  result = check(aggregator)
  assert result.passed, result.failures


@pytest.mark.parametrize("args, kwargs, error, match", [
    (("nope", VALUE_TYPE), {}, TypeError, "aggregator must be"),
    ((DP.gaussian_fixed(1.0, 10.0, 0.5),), {}, TypeError,
     "value_type is required"),
    ((DP.gaussian_fixed(1.0, 10.0, 0.5), VALUE_TYPE), dict(num_rounds=0),
     ValueError, "num_rounds must be at least 1, got 0"),
    ((DP.gaussian_fixed(1.0, 10.0, 0.5), VALUE_TYPE), dict(num_clients=1.5),
     TypeError, "num_clients"),
    ((DP.gaussian_fixed(1.0, 10.0, 0.5), VALUE_TYPE),
     dict(clients_per_round=0), ValueError, "clients_per_round"),
    ((DP.gaussian_fixed(1.0, 10.0, 0.5), VALUE_TYPE),
     dict(claimed_std=[1.0, 2.0]), ValueError, r"one value per round \(4\), got 2"),
    ((DP.gaussian_fixed(1.0, 10.0, 0.5), VALUE_TYPE),
     dict(claimed_std=-1.0), ValueError, r"claimed_std\[0\]"),
])
def test_bad_arguments(args, kwargs, error, match):
  with pytest.raises(error, match=match):
    noise_check.check_aggregation_noise(*args, **kwargs)


def test_a_process_of_another_value_type_is_refused():
  process = DP.gaussian_fixed(1.0, 10.0, 0.5).create(VALUE_TYPE)
  with pytest.raises(TypeError, match="differs from the process's"):
    noise_check.check_aggregation_noise(
        process, tff.types.to_type([(np.float32, (3,))]))


def test_reading_the_claim_from_events_and_states():
  import collections  # pylint: disable=g-import-not-at-top
  import dp_accounting  # pylint: disable=g-import-not-at-top
  composed = dp_accounting.ComposedDpEvent(
      [dp_accounting.GaussianDpEvent(2.0), dp_accounting.GaussianDpEvent(9.0)])
  assert noise_check.value_noise_multiplier(composed) == 2.0  # the value's
  with pytest.raises(noise_check.NoClaimError, match="claimed_std"):
    noise_check.value_noise_multiplier(dp_accounting.LaplaceDpEvent(1.0))
  sum_state = collections.namedtuple("S", "l2_norm_clip stddev")(0.3, 0.6)
  adaptive = collections.namedtuple("A", "noise_multiplier sum_state")(2.0,
                                                                       sum_state)
  normalized = collections.namedtuple("N", "numerator_state denominator")
  assert noise_check.clip_and_denominator(normalized(adaptive, 7.0)) == (0.3, 7.0)
  assert noise_check.clip_and_denominator(sum_state) == (0.3, 1.0)  # a sum
  with pytest.raises(noise_check.NoClaimError, match="l2_norm_clip"):
    noise_check.clip_and_denominator(normalized((1.0,), 7.0))
  assert noise_check.find_dp_state({"a": (1, 2), "b": [None]}) is None
