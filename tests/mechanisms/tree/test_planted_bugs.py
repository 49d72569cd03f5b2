"""DP-FTRL's planted bugs in real TFF runs, and the tree noise self-test.

`tff_canary.mechanisms.tree.planted_bugs` writes
`tree_simulation`'s bugs as user-side tensorflow_privacy subclasses;
`planted_bug_runs.run` runs one `CanaryDPFactory` tree aggregation per
bug (`tree_planted.TreeBugRunConfig`: 3 epochs x 16 rounds, a restart after
each epoch, 512 fair-coin orthogonal candidates, d = 1024, z = 1, fixed
seeds) with `correlated.noise_check.check_correlated_noise` as the
self-test and judges it with `tree_audit.audit_ftrl` (family-wise level
0.05). Every run and process here has a `noise_seed` and seeded canaries
and data, so every outcome is fixed; the comments say how far each is from
its threshold.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
import tensorflow as tf
import tensorflow_federated as tff
import tensorflow_privacy as tfp

from tff_canary.federated.audit import noise_check
from tff_canary.federated.insertion import factory
from tff_canary.harness.runner import planted_bug_runs as runs
from tff_canary.mechanisms.correlated import noise_check as correlated_check
from tff_canary.mechanisms.correlated import planted as correlated_planted
from tff_canary.mechanisms.tree import aggregation
from tff_canary.mechanisms.tree import planted as tree_planted
from tff_canary.mechanisms.tree import planted_bugs as tree_planted_bugs
from tff_canary.stats.canaries import canary_config
from tff_canary.stats.canaries import schedules
from tff_canary.stats.correlated import linear_noise
from tff_canary.stats.correlated import tree_noise
from tff_canary.stats.correlated import tree_simulation
from tff_canary.stats.noise import noise_stats

pytestmark = pytest.mark.tff

# ------------------------------- the bugs' structure: basis-vector noise

_DIM = 256  # more basis vectors than any case's generator calls


class _BasisGenerator(tfp.tree_aggregation.ValueGenerator):
  """Call k returns e_k: the released noise shows its coefficients (as in
  tests/stats/correlated/test_tree_noise.py)."""

  def initialize(self):
    return tf.constant(0, tf.int32)

  def next(self, state):
    return tf.one_hot(state, _DIM, dtype=tf.float32), state + 1


def _released(query_class, num_rounds, efficient, period, warmup):
  query = query_class(
      record_specs=tf.TensorSpec([_DIM], tf.float32),
      noise_generator=_BasisGenerator(),
      clip_fn=lambda records, clip: records, clip_value=1.0,
      use_efficient=efficient)
  if period is not None:
    query = tfp.RestartQuery(query, tfp.restart_query.
                             PeriodicRoundRestartIndicator(period, warmup))
  state = query.initial_global_state()
  rows = []
  for _ in range(num_rounds):
    sample = query.initial_sample_state(tf.zeros([_DIM]))
    result, state, _ = query.get_noised_result(sample, state)
    rows.append(result.numpy())
  return np.array(rows, dtype=np.float64)


# restart_reuse has no warmup case: with a warmup the first tree is shorter
# than the restarted ones, whose extra calls `planted_noise` cannot map.
@pytest.mark.parametrize("bug, efficient, num_rounds, period, warmup", [
    ("restart_reuse", True, 20, 8, None),
    ("restart_reuse", False, 20, 8, None),
    ("restart_reuse", True, 22, 8, 3),
    ("missing_level", False, 21, 6, 2),
    ("missing_level", True, 20, 8, None),
    ("efficient_scale", True, 21, 6, 2),
])
def test_each_bug_releases_the_simulators_planted_coefficients(
    bug, efficient, num_rounds, period, warmup):
  claimed = tree_noise.tree_noise(num_rounds, efficient=efficient,
                                  restart_period=period, restart_warmup=warmup)
  planted = tree_simulation.planted_noise(claimed, bug).released
  got = _released(tree_planted_bugs.QUERIES[bug], num_rounds, efficient,
                  period, warmup)
  # The released noise is Gaussian with covariance B B^T, so equal
  # covariances are equal laws. (B's columns are generator calls, labelled
  # differently when a longer later tree reuses calls the first tree never
  # drew: compare B B^T, not B.) float32 sums of at most ~10 terms of
  # weights <= 1: 1e-5 on B B^T is a few ulps.
  np.testing.assert_allclose(got @ got.T, planted @ planted.T, atol=1e-5)
  # ... and the bug changes them: far above that tolerance.
  correct = np.zeros_like(got)
  correct[:, :claimed.released.shape[1]] = claimed.released
  assert np.abs(got - correct).max() > 0.1


def test_twice_per_epoch_adds_a_second_round_to_the_told_schedule():
  told = schedules.ShuffledEpochs(48, 16).realize(5, np.arange(40))
  twice = correlated_planted.TwicePerEpoch(48, 16).realize(5, np.arange(40))
  assert twice.num_events == 2 * told.num_events
  for j in range(40):
    once, both = told.rounds_of(j), twice.rounds_of(j)
    assert set(once) <= set(both)
    np.testing.assert_array_equal(np.bincount(both // 16, minlength=3), 2)


def test_planted_aggregation_refuses_what_it_cannot_plant():
  with pytest.raises(ValueError, match="noise_seed"):
    tree_planted_bugs.PlantedTreeAggregation(1.0, 0.5, restart_period=4,
                                             bug="restart_reuse")
  with pytest.raises(ValueError, match="efficient must be True"):
    tree_planted_bugs.PlantedTreeAggregation(1.0, 0.5, efficient=False,
                                             bug="efficient_scale")
  with pytest.raises(ValueError, match="bug"):
    tree_planted_bugs.PlantedTreeAggregation(1.0, 0.5, bug="clip")


# ------------------------------------------------ the tree self-test alone

VALUE = tff.types.to_type(tff.TensorType(np.float32, [512]))
SPECS = tff.types.type_to_tf_tensor_specs(VALUE)


def test_a_generator_std_set_wrong_fails_against_the_claimed_multiplier():
  # TFF's factory built with z = 0.15 where the claim is z = 1.5: the
  # generator's own stddev (0.15 x 0.5) hides the bug; the claimed z finds
  # variance 1/100 of the claim. One process for both checks: each runs it
  # afresh from its initial state (seeded, so both see the same noise).
  process = tff.aggregators.DifferentiallyPrivateFactory.tree_aggregation(
      0.15, 4.0, 0.5, SPECS, noise_seed=23).create(VALUE)
  claimed = tree_noise.tree_noise(16, efficient=True)
  itself = correlated_check.check_correlated_noise(process, VALUE,
                                                   noise=claimed)
  assert itself.passed, itself.check.failures
  against = correlated_check.check_correlated_noise(process, VALUE,
                                                    noise=claimed,
                                                    noise_multiplier=1.5)
  assert not against.passed
  np.testing.assert_allclose(against.node_std, 0.75)
  assert "claimed z = 1.5" in against.check.claim


@pytest.mark.parametrize("efficient", [True, False])
def test_tffs_own_tree_aggregation_passes_and_wrong_claims_fail(efficient):
  # TFF's factory (no restarts): 16 rounds x 512 values at the default
  # level 0.001.
  aggregator = tff.aggregators.DifferentiallyPrivateFactory.tree_aggregation(
      1.5, 4.0, 0.5, SPECS, noise_seed=21, use_efficient=efficient)
  claimed = tree_noise.tree_noise(16, efficient=efficient)
  result = correlated_check.check_correlated_noise(aggregator, VALUE,
                                                   noise=claimed,
                                                   num_clients=2)
  assert result.passed, result.check.failures
  np.testing.assert_allclose(result.node_std, 0.75)  # z C from the state
  assert result.noise.shape == (16, 512)
  # The same noise against the other tree and against independent rounds:
  # the whitened variance per round is off by tens of percent over 512
  # values (p-values far below 1e-10).
  other = tree_noise.tree_noise(16, efficient=not efficient).covariance
  for wrong in (other, np.eye(16)):
    whitened = linear_noise.whiten(result.noise, wrong)
    check = noise_stats.check_noise([[row] for row in whitened], 1.0)
    assert not check.passed
    assert min(t.p_value for t in check.tests) < 1e-10


def test_default_rounds_span_two_restarts_and_refusals():
  assert correlated_check.default_rounds(None) == 16
  assert correlated_check.default_rounds(16) == 33  # restarts after 15, 31
  assert correlated_check.default_rounds(6, 2) == 16  # after 1, 7: 16 anyway
  assert correlated_check.default_rounds(20, 5) == 26  # after 4, 24
  with pytest.raises(TypeError, match="noise"):
    correlated_check.check_correlated_noise(tff.aggregators.SumFactory(),
                                            VALUE)
  no_canaries = canary_config.CanaryConfig(
      seed=1, num_inserted=0, num_held_out=0,
      schedule=schedules.FixedPresentations(8, 0))
  ours = aggregation.tree_aggregation(
      1.0, 4, 0.5, canaries=no_canaries, noise_seed=3, restart_period=4)
  with pytest.raises(ValueError, match="num_rounds=9 differs"):
    correlated_check.check_correlated_noise(
        ours, VALUE, num_rounds=9, noise=ours.described_query.noise(8))
  with pytest.raises(noise_check.NoClaimError, match="node_std"):
    correlated_check.check_correlated_noise(
        tff.aggregators.SumFactory(), VALUE, noise=tree_noise.tree_noise(4))


# Four tensors, as a small dense model's kernels and biases.
LAYERS = tff.types.to_type([(np.float32, [32, 8]), (np.float32, [8]),
                            (np.float32, [8, 4]), (np.float32, [4])])
NAMES = ["w1", "b1", "w2", "b2"]


@pytest.mark.parametrize("bug", ["none", "cross_tensor_reuse"])
def test_the_tree_self_test_is_per_tensor_and_finds_cross_tensor_reuse(bug):
  # 16 rounds (the default, four tree levels) of d = 300 in 4 tensors; the
  # planted generator gives b1, w2 and b2 the first values of w1's node
  # noise: the prefix cosines are 1 (p = 0, against 0.001 / 636 tests),
  # while every coordinate's variance is the claimed one.
  no_canaries = canary_config.CanaryConfig(
      seed=1, num_inserted=0, num_held_out=0,
      schedule=schedules.FixedPresentations(16, 0))
  aggregator = factory.CanaryDPFactory(
      tree_planted_bugs.PlantedTreeAggregation(1.0, 0.5, noise_seed=3,
                                               bug=bug),
      no_canaries, clients_per_round=4)
  result = correlated_check.check_correlated_noise(aggregator, LAYERS,
                                                   tensor_names=NAMES)
  check = result.check
  assert check.tensor_names == tuple(NAMES)
  assert check.tensor_sizes == (256, 8, 32, 4)
  assert "4 tensors" in str(result)
  assert result.noise.shape == (16, 300)
  prefix = [t for t in check.tests if t.family == "prefix"]
  assert len(prefix) == 6  # every pair of the four tensors
  if bug == "none":
    assert result.passed, check.failures
    return
  assert not result.passed
  assert check.failures[0].startswith("prefix[")
  for other in NAMES[1:]:
    test = check.test(f"prefix[w1,{other}]")
    assert test.rejected and test.statistic == pytest.approx(1.0)
  assert not any(t.rejected for t in check.tests if t.family == "variance")


# -------------------------------------------------- one real run per bug

# The check tree_simulation's bench (bench/ftrl_audit.py) expects to fire.
EXPECTED = {"restart_reuse": "self-test", "missing_level": "self-test",
            "efficient_scale": "self-test",
            "double_participation": "contribution"}


@pytest.mark.parametrize("bug, efficient", [
    ("none", True), ("restart_reuse", True), ("double_participation", True),
    ("missing_level", False), ("efficient_scale", True)])
def test_each_bug_is_caught_by_its_check_and_the_correct_tree_passes(
    bug, efficient):
  result = runs.run(tree_planted.TreeBugRunConfig(bug=bug,
                                                  efficient=efficient, seed=7))
  audit = result.verdict
  print(result)  # the p-values, for the report (pytest -s)
  self_test_p = min(t.p_value for t in audit.self_test.tests)
  if bug == "none":
    # All three checks pass at family-wise level 0.05 (each at 0.05 / 3).
    assert not audit.refuted, str(audit)
    assert result.noise_check.passed
    assert not result.detected
    # The generic loop's row and JSON take the tree's verdict.
    assert result.row()["audit"] == audit.bounds.verdict
    as_json = json.loads(json.dumps(result.as_dict()))
    assert as_json["verdict"]["refuted"] is False
    return
  assert EXPECTED[bug] in audit.caught_by, str(audit)
  # Not marginal: the deciding p-value is below 1e-10, against a threshold
  # of 0.05 / 3 (noise bugs: the whitened self-test; the double count: about
  # one extra participation per epoch over ~256 inserted canaries).
  if EXPECTED[bug] == "self-test":
    assert self_test_p < 1e-10
    assert not result.noise_check.passed  # the default level 0.001 too
  else:
    assert audit.contribution_p_value < 1e-10
    assert audit.contribution_excess == pytest.approx(1.0, abs=0.2)
    assert audit.self_test.passed  # the noise is correct


def test_the_gaussian_self_test_points_a_tree_to_the_tree_self_test():
  no_canaries = canary_config.CanaryConfig(
      seed=1, num_inserted=0, num_held_out=0,
      schedule=schedules.FixedPresentations(4, 0))
  ours = aggregation.tree_aggregation(
      1.0, 4, 0.5, canaries=no_canaries, noise_seed=3, restart_period=2)
  with pytest.raises(noise_check.NoClaimError, match="check_correlated_noise"):
    noise_check.check_aggregation_noise(ours, VALUE)


@pytest.mark.parametrize("adaptive", [False, True])
def test_our_restarted_tree_passes_over_its_default_rounds(adaptive):
  no_canaries = canary_config.CanaryConfig(
      seed=1, num_inserted=0, num_held_out=0,
      schedule=schedules.FixedPresentations(16, 0))
  if adaptive:  # zero values: the clip shrinks at every restart
    ours = aggregation.tree_adaptive(
        0.8, 10, initial_l2_norm_clip=2.0, restart_warmup=None,
        restart_period=6, canaries=no_canaries, noise_seed=5)
  else:
    ours = aggregation.tree_aggregation(
        0.7, 3, 2.0, canaries=no_canaries, noise_seed=5, restart_period=6)
  result = correlated_check.check_correlated_noise(ours, VALUE)
  # Restarts after rounds 5 and 11; 16 rounds (DEFAULT_ROUNDS) span both.
  assert result.claimed.num_rounds == 16
  assert "restarts after rounds [5, 11]" in result.check.claim
  assert result.passed, result.check.failures
  # sigma_t = z C_t per tree: z C for the fixed clip; for the adaptive one a
  # new clip (and sigma) in each of the three trees.
  stds = result.node_std
  assert len(set(stds[[0, 6, 12]])) == (3 if adaptive else 1)
  for start in (0, 6, 12):
    assert len(set(stds[start:start + 4])) == 1
  if not adaptive:
    np.testing.assert_allclose(stds, 1.4, rtol=1e-6)


def test_twice_per_epoch_keeps_its_old_path_for_one_release():
  # The family's schedule since the tree and the matrix mechanisms stopped
  # sharing the tree's runs; the tree's planted_bugs still gives it, warning.
  with pytest.warns(DeprecationWarning, match="correlated.planted"):
    old = tree_planted_bugs.TwicePerEpoch
  assert old is correlated_planted.TwicePerEpoch
