"""A canary aggregator's own noise self-test (`tff_canary.mechanisms.canary_noise_check`).

The factory remembers its constructor and arguments and builds itself again
without canaries (`CanaryDPFactory.without_canaries`); `check_noise` is then
the check README.md's loop used to build by hand with a second config. The
noise is seeded, so the two give the same statistics exactly.
"""

import numpy as np
import pytest

from tff_canary.federated.audit import noise_check
from tff_canary.federated.insertion import factory
from tff_canary.mechanisms import canary_noise_check
from tff_canary.mechanisms.correlated import noise_check as correlated_check
from tff_canary.mechanisms.tree import aggregation
from tff_canary.stats.canaries import canary_config
from tff_canary.stats.canaries import schedules

pytestmark = pytest.mark.tff

VALUE_TYPE = [(np.float32, (300,)), (np.float32, (20,))]
DP = factory.CanaryDPFactory
TAG = factory.NOISE_CHECK_SEED_TAG


def _canaries(rounds=6):
  return canary_config.CanaryConfig(
      seed=4, num_inserted=3, num_held_out=3,
      schedule=schedules.FixedPresentations(rounds, 1))


def _no_canaries():
  # What README.md's loop built by hand before `check_noise`.
  return canary_config.CanaryConfig(
      seed=4, num_inserted=0, num_held_out=0,
      schedule=schedules.FixedPresentations(
          num_rounds=noise_check.DEFAULT_ROUNDS, presentations=0),
      record_aggregates=False)


def _p_values(result):
  return [(t.name, t.statistic, t.p_value) for t in result.tests]


def test_self_test_is_the_check_of_the_hand_built_aggregator():
  aggregator = DP.gaussian_adaptive(1.0, 50.0, initial_l2_norm_clip=0.3,
                                    canaries=_canaries(), noise_seed=5)
  result = canary_noise_check.check_noise(aggregator, VALUE_TYPE)
  assert result.passed, result.failures
  by_hand = noise_check.check_aggregation_noise(
      DP.gaussian_adaptive(1.0, 50.0, initial_l2_norm_clip=0.3,
                           canaries=_no_canaries(), noise_seed=5 + TAG),
      VALUE_TYPE)
  assert _p_values(result) == _p_values(by_hand)
  assert result.claimed_std == by_hand.claimed_std
  # Its own noise stream, never the run's (noise_seed 5).
  run_seed = noise_check.check_aggregation_noise(
      DP.gaussian_adaptive(1.0, 50.0, initial_l2_norm_clip=0.3,
                           canaries=_no_canaries(), noise_seed=5), VALUE_TYPE)
  assert _p_values(result) != _p_values(run_seed)


def test_a_tree_aggregator_runs_the_tree_check():
  aggregator = aggregation.tree_aggregation(
      1.0, 10.0, 0.5, canaries=_canaries(), noise_seed=7, restart_period=3)
  result = canary_noise_check.check_noise(aggregator, VALUE_TYPE)
  assert isinstance(result, correlated_check.CorrelatedNoiseCheck)
  assert result.passed, result.check.failures
  # Two restarts of the run's tree (restart_period 3), as the harness's.
  assert result.claimed.restart_period == 3
  assert result.check.num_rounds == correlated_check.default_rounds(3)


@pytest.mark.parametrize("build, constructor", [
    (lambda c: DP.gaussian_fixed(0.7, 10, 0.5, canaries=c, noise_seed=3),
     "gaussian_fixed"),
    (lambda c: DP.gaussian_adaptive(0.7, 10, target_unclipped_quantile=0.8,
                                    canaries=c), "gaussian_adaptive"),
    (lambda c: factory.canary_dp_aggregator(0.7, 10, c, zeroing=False,
                                            noise_seed=3),
     "gaussian_adaptive"),
    (lambda c: aggregation.tree_adaptive(0.7, 10, restart_warmup=4,
                                         restart_period=8, canaries=c,
                                         noise_seed=3), "tree_adaptive"),
    (lambda c: DP(_sum_query(), c, clients_per_round=10), None),
])
def test_without_canaries_keeps_the_constructor_and_arguments(build,
                                                              constructor):
  aggregator = build(_canaries())
  without = aggregator.without_canaries(4)
  assert aggregator.construction.constructor == constructor
  assert without.construction.constructor == constructor
  expected = dict(aggregator.construction.arguments)
  if expected.get("noise_seed") is not None:
    expected["noise_seed"] += TAG
  assert dict(without.construction.arguments) == expected
  assert "canaries" not in expected
  assert without.canaries.num_canaries == 0
  assert without.canaries.num_rounds == 4
  assert without.canaries.seed == aggregator.canaries.seed
  assert type(without.described_query) is type(aggregator.described_query)


def _sum_query():
  import tensorflow_privacy as tfp  # pylint: disable=g-import-not-at-top
  return tfp.GaussianSumQuery(l2_norm_clip=0.5, stddev=0.35)


def test_a_zeroed_aggregator_is_checked_as_the_experiments_check_theirs():
  # What canary_dp_aggregator(zeroing=True) returns is accepted, and the
  # check of its inner factory is the check of the whole zeroed aggregator:
  # the zeroing wrapper around the same factory without canaries, run by the
  # general check as the experiments run theirs, gives the same statistics
  # (seeded noise: equal, not close).
  zeroed = factory.canary_dp_aggregator(0.7, 10, _canaries(), zeroing=True,
                                        noise_seed=3)
  assert isinstance(zeroed, factory.ZeroedFactory)
  result = canary_noise_check.check_noise(zeroed, VALUE_TYPE)
  assert result.passed, result.failures
  whole = noise_check.check_aggregation_noise(
      factory.with_zeroing(zeroed.inner_factory.without_canaries(
          noise_check.DEFAULT_ROUNDS)), VALUE_TYPE)
  assert _p_values(result) == _p_values(whole)
  assert result.claimed_std == whole.claimed_std


def test_an_aggregator_without_a_canary_factory_is_refused_by_name():
  import tensorflow_federated as tff  # pylint: disable=g-import-not-at-top
  theirs = factory.with_zeroing(
      tff.aggregators.DifferentiallyPrivateFactory.gaussian_fixed(
          0.7, 10.0, 0.5))
  with pytest.raises(TypeError, match=r"aggregator must be a .*CanaryDPFactory"
                     r", or one under factory.with_zeroing .*, got "
                     r"<tensorflow_federated\.python\.aggregators\.differential"
                     r".*noise_check.check_aggregation_noise"):
    canary_noise_check.check_noise(theirs, VALUE_TYPE)
  with pytest.raises(TypeError, match=r"inner_factory must be a "
                     r"tff.aggregators.UnweightedAggregationFactory, got 3"):
    factory.with_zeroing(3)
