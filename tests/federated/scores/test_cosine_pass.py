"""Tests of tff_canary.federated.scores.cosine_pass and state_check.

No TFF computation runs here (importing cosine_pass installs the worker
guard); the real training runs are in test_factory.py. The cosines are checked
against an independent float64 computation.
"""

from __future__ import annotations

import collections
import os
import warnings

import numpy as np
import pytest
import tensorflow as tf

import repo_paths
from tff_canary.federated.scores import aggregate_recorder
from tff_canary.federated.insertion import canary_directions
from tff_canary.federated.scores import cosine_pass
from tff_canary.federated.insertion import state_check
from tff_canary.stats.canaries import canary_config
from tff_canary.stats.canaries import cosine_table
from tff_canary.stats.canaries import schedules


def _config(num_inserted=4, num_held_out=3, seed=3, rounds=10, r=2,
            **kwargs):
  return canary_config.CanaryConfig(
      seed=seed, num_inserted=num_inserted, num_held_out=num_held_out,
      schedule=schedules.FixedPresentations(rounds, r),
      **(dict(assignment="fixed", directions="gaussian") | kwargs))


def _brute_force(seed, m, theta0, theta_t, aggregates):
  """Cosines in float64 from the canaries' definition, no blocking."""
  dim = theta0.size
  rows = []
  for j in range(m):
    g = tf.random.stateless_normal([dim], seed=[seed, j], dtype=tf.float32,
                                   alg="philox").numpy().astype(np.float64)
    rows.append(g / np.linalg.norm(g))
  c = np.stack(rows)
  u = theta0 - theta_t
  final = c @ u / np.linalg.norm(u)
  a = np.asarray(aggregates, np.float64)
  cos = (c @ a.T) / np.linalg.norm(a, axis=1)
  return final, cos.max(axis=1), cos.argmax(axis=1)


# ------------------------------------------------------------ cosines


@pytest.fixture(name="run")
def _run(tmp_path):
  """A synthetic run: weights, aggregates (canary 2 planted in round 4)."""
  dim, rounds = 1500, 9
  config = _config(rounds=rounds)
  rng = np.random.default_rng(1)
  theta0 = rng.normal(size=dim)
  theta_t = rng.normal(size=dim)
  aggregates = rng.normal(size=(rounds, dim)).astype(np.float32)
  aggregates[4] = 3.0 * canary_directions.canary_block(config.seed, [2], dim)[0]
  path = str(tmp_path / "agg.npy")
  recorder = aggregate_recorder.AggregateRecorder(path, dim, rounds + 3)
  for r in range(rounds):
    recorder.write(r, aggregates[r])
  return config, theta0, theta_t, aggregates, recorder


def test_cosines_agree_with_float64_brute_force(run):
  config, theta0, theta_t, aggregates, recorder = run
  final, best, arg = _brute_force(config.seed, 7, theta0, theta_t, aggregates)
  # float32 products of unit vectors: errors ~1e-7 (cosine_pass docstring); 1e-6
  # leaves a margin and is 25000x below the null sd 1/sqrt(1500).
  for source in (aggregates, recorder, recorder.path):
    table = cosine_pass.compute_cosine_table(config, theta0, theta_t, source,
                                             progress=False)
    np.testing.assert_allclose(table.final_cosine, final, atol=1e-6)
    np.testing.assert_allclose(table.max_cosine, best, atol=1e-6)
    np.testing.assert_array_equal(table.max_round, arg)
    assert table.max_round[2] == 4 and table.max_cosine[2] > 1 - 1e-6
    assert table.rounds_recorded == 9 and table.dim == 1500
    # The paper's statistics: the other inserted canaries are not removed.
    assert table.known_canaries_removed == "none"
    np.testing.assert_array_equal(table.participation, config.counts())
    np.testing.assert_array_equal(table.group == "inserted", config.inserted)


@pytest.mark.parametrize("budget_rows", [4, 5, 7, 20])
def test_blocking_does_not_change_the_result(run, budget_rows):
  config, theta0, theta_t, _, recorder = run
  reference = cosine_pass.compute_cosine_table(config, theta0, theta_t,
                                               recorder.path, progress=False)
  budget = budget_rows * 4 * 1500
  chunk, block = cosine_pass.plan_blocks(1500, 9, 7, budget)
  row = 4 * 1500
  assert (block + 1) * row + min(chunk, 9) * row + 8 * block * chunk <= budget
  table = cosine_pass.compute_cosine_table(config, theta0, theta_t,
                                           recorder.path,
                                           memory_budget_bytes=budget,
                                           progress=False)
  # Different GEMM shapes may round differently in float32: 1e-6 as above.
  np.testing.assert_allclose(table.final_cosine, reference.final_cosine,
                             atol=1e-6)
  np.testing.assert_allclose(table.max_cosine, reference.max_cosine,
                             atol=1e-6)
  np.testing.assert_array_equal(table.max_round, reference.max_round)


def test_missing_rounds_are_skipped(tmp_path):
  dim = 300
  config = _config(rounds=5)
  recorder = aggregate_recorder.AggregateRecorder(tmp_path / "a.npy", dim, 5)
  rng = np.random.default_rng(2)
  rows = {0: rng.normal(size=dim), 3: rng.normal(size=dim)}
  for r, a in rows.items():
    recorder.write(r, a)
  theta0, theta_t = rng.normal(size=dim), rng.normal(size=dim)
  with pytest.warns(cosine_table.UnrecordedRoundsWarning,
                    match="not recorded"):
    table = cosine_pass.compute_cosine_table(config, theta0, theta_t, recorder,
                                             progress=False)
  assert table.rounds_recorded == 2
  assert set(table.max_round) <= {0, 3}
  _, best, _ = _brute_force(config.seed, 7, theta0, theta_t,
                            np.stack([rows[0], rows[3]]))
  np.testing.assert_allclose(table.max_cosine, best, atol=1e-6)
  # The inserted canaries took part in rounds 1, 2 or 4 too (2 of 5 rounds
  # each): their maxes miss those rounds, so the all-iterates statistics are
  # refused. Without the guard they came out silently, looking held out.
  events = config.participation.events
  missed = events[~np.isin(events[:, 0], [0, 3])]
  np.testing.assert_array_equal(
      table.unrecorded, np.bincount(missed[:, 1], minlength=7))
  assert table.unrecorded.sum() > 0 and not table.has_max_cosines
  with pytest.raises(ValueError, match="not recorded"):
    table.max_cosines("inserted")


def test_rounds_without_canaries_may_be_unrecorded(tmp_path):
  # Only rounds with an inserted canary matter: skipping the others keeps
  # the all-iterates statistics.
  dim = 300
  config = _config(rounds=8, r=1, num_inserted=2)
  wanted = np.unique(config.participation.events[:, 0])
  assert wanted.size < 8
  rng = np.random.default_rng(3)
  recorder = aggregate_recorder.AggregateRecorder(tmp_path / "a.npy", dim, 8)
  for r in wanted:
    recorder.write(int(r), rng.normal(size=dim))
  with warnings.catch_warnings():
    warnings.simplefilter("error", cosine_table.UnrecordedRoundsWarning)
    table = cosine_pass.compute_cosine_table(config, rng.normal(size=dim),
                                             rng.normal(size=dim), recorder,
                                             progress=False)
  assert table.has_max_cosines and not table.unrecorded.any()


@pytest.mark.tff
def test_state_must_carry_the_configs_seed_and_schedule(run):
  # Loads TFF (the state types live in tff_canary.federated.insertion.canary_process)
  # but runs no computation. A cosine table computed for canaries other than
  # the ones trained with is meaningless; the state carries the trained ones.
  import tensorflow_federated as tff  # pylint: disable=g-import-not-at-top
  from tff_canary.federated.insertion import canary_process  # pylint: disable=g-import-not-at-top
  config, theta0, theta_t, aggregates, _ = run

  def learning_state(cfg):
    aggregator = canary_process.CanaryDPAggregatorState(
        query_state=(), agg_state=(), dp_event=(), is_init_state=False,
        round_num=np.int32(9), seed=np.int64(cfg.seed),
        schedule=np.asarray(cfg.participation.events, np.int32), scores=())
    wrapped = collections.OrderedDict(zeroing_norm=1.0, inner=aggregator)
    return tff.learning.templates.LearningAlgorithmState(
        global_model_weights=(), distributor=(), client_work=(),
        aggregator=wrapped, finalizer=())

  state = learning_state(config)
  reference = cosine_pass.compute_cosine_table(config, theta0, theta_t,
                                               aggregates, progress=False)
  for given in (state, state.aggregator["inner"]):
    table = cosine_pass.compute_cosine_table(config, theta0, theta_t,
                                             aggregates, progress=False,
                                             state=given)
    assert table == reference
  other_seed = _config(seed=4, rounds=9)
  with pytest.raises(ValueError, match="canaries.seed = 4 but the "
                     "aggregator state has seed = 3"):
    cosine_pass.compute_cosine_table(other_seed, theta0, theta_t, aggregates,
                                     progress=False, state=state)
  other_schedule = _config(rounds=9, r=1)  # same seed, 1 presentation, not 2
  with pytest.raises(ValueError, match=r"schedule \(4 \(round, canary id\) "
                     r"events.*differs from the aggregator state's \(8 "
                     r"events\): event 0 is \(round \d+, canary \d\) in "
                     r"canaries and \(round \d+, canary \d\) in the "
                     "state"):
    cosine_pass.compute_cosine_table(other_schedule, theta0, theta_t,
                                     aggregates, progress=False, state=state)
  with pytest.raises(ValueError, match="holds no canary aggregator state"):
    state_check.check_state(config, {"aggregator": (1, 2)})


def test_null_cosines_of_an_independent_vector():
  # u independent of the canaries: cos(c_j, u) has mean 0 and variance 1/d
  # (docs/method/null-law.md). 400 canaries at d = 2000: the mean has sd 1/sqrt(d m) =
  # 1.1e-3, the variance relative sd sqrt(2/m) = 7%; 5 sd bands, fixed seed.
  dim, m = 2000, 400
  config = _config(num_inserted=0, num_held_out=m)
  rng = np.random.default_rng(5)
  table = cosine_pass.compute_cosine_table(config, rng.normal(size=dim),
                                           rng.normal(size=dim), progress=False)
  x = table.final_cosines("held_out")
  assert abs(x.mean()) < 5 / np.sqrt(dim * m)
  assert abs(x.var() * dim - 1.0) < 5 * np.sqrt(2 / m)
  assert np.isnan(table.max_cosine).all() and (table.max_round == -1).all()


def test_sign_convention():
  # A model moved along -c_0 (what an inserted canary does) gives cosine +1.
  dim = 800
  config = _config(num_inserted=1, num_held_out=1, rounds=1, r=1)
  c0 = canary_directions.canary_block(config.seed, [0], dim)[0]
  c0 = c0.astype(np.float64)
  theta0 = np.zeros(dim)
  table = cosine_pass.compute_cosine_table(config, theta0, theta0 - 0.5 * c0,
                                           aggregates=(0.5 * c0)[None, :],
                                           progress=False)
  assert table.final_cosine[0] > 1 - 1e-6
  assert table.max_cosine[0] > 1 - 1e-6


def test_structured_and_model_weights_inputs(run):
  config, theta0, theta_t, aggregates, _ = run
  reference = cosine_pass.compute_cosine_table(config, theta0, theta_t,
                                               aggregates, progress=False)
  weights = collections.namedtuple("ModelWeights",
                                   ["trainable", "non_trainable"])
  split = lambda v: [v[:1000].reshape(100, 10), v[1000:]]
  table = cosine_pass.compute_cosine_table(
      config, weights(split(theta0), [np.ones(3)]),
      weights(split(theta_t), [np.zeros(3)]), aggregates, progress=False)
  np.testing.assert_array_equal(table.final_cosine, reference.final_cosine)


def test_zero_vectors_give_zero_with_a_warning():
  dim = 400
  config = _config(rounds=2, r=2)
  theta = np.ones(dim)
  aggregates = np.zeros((2, dim), np.float32)
  aggregates[1] = 1.0
  with pytest.warns(cosine_pass.ZeroVectorWarning) as record:
    table = cosine_pass.compute_cosine_table(config, theta, theta, aggregates,
                                             progress=False)
  messages = " ".join(str(w.message) for w in record)
  assert "did not move" in messages and "rounds [0]" in messages
  np.testing.assert_array_equal(table.final_cosine, 0.0)
  # Round 0 contributes cosine 0; the max is over both rounds.
  ones = canary_directions.canary_block(config.seed, range(7), dim).sum(1)
  expected = np.maximum(ones / np.sqrt(dim), 0.0)
  np.testing.assert_allclose(table.max_cosine, expected, atol=1e-6)


def test_bad_arguments(run):
  config, theta0, theta_t, aggregates, _ = run
  with pytest.raises(TypeError, match="CanaryConfig"):
    cosine_pass.compute_cosine_table(None, theta0, theta_t)
  with pytest.raises(ValueError, match="dim = 1500, final_weights dim = 10"):
    cosine_pass.compute_cosine_table(config, theta0, theta_t[:10])
  with pytest.raises(ValueError, match="aggregates have dim = 10"):
    cosine_pass.compute_cosine_table(config, theta0, theta_t,
                                     aggregates[:, :10])
  with pytest.raises(ValueError, match="memory_budget_bytes = 100 is too"):
    cosine_pass.compute_cosine_table(config, theta0, theta_t, aggregates,
                                     memory_budget_bytes=100)
  with pytest.raises(ValueError, match="no canaries"):
    cosine_pass.compute_cosine_table(_config(0, 0), theta0, theta_t)
  with pytest.raises(ValueError, match="non-finite"):
    cosine_pass.compute_cosine_table(config, np.full(1500, np.nan), theta_t)
  with pytest.raises(TypeError, match="floating"):
    cosine_pass.compute_cosine_table(config, theta0, theta_t,
                                     np.zeros((2, 1500), np.int32))
  with pytest.raises(ValueError, match="not an aggregate file"):
    bogus = os.path.join(repo_paths.TESTS, "conftest.py")
    cosine_pass.compute_cosine_table(config, theta0, theta_t, bogus)
