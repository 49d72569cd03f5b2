"""What the Flower halves share (protocol_flower.py): layout and round scores."""

from __future__ import annotations

import numpy as np
import pytest
from flwr.app import Array, ArrayRecord, Error, Message, RecordDict

import flower_grid
from tff_canary.mechanisms import protocol_flower
from tff_canary.stats.canaries import canary_config
from tff_canary.stats.canaries import orthogonal_canaries
from tff_canary.stats.canaries import schedules


def record(**arrays) -> ArrayRecord:
  return ArrayRecord({k: Array(np.asarray(v)) for k, v in arrays.items()})


def test_the_layout_is_the_records_order_each_array_in_c_order():
  r = record(b=np.arange(6, dtype=np.float32).reshape(2, 3),
             a=np.array([10.0, 11.0]))
  layout = protocol_flower.ArrayLayout.of(r)
  assert layout.keys == ("b", "a") and layout.dim == 8
  np.testing.assert_array_equal(layout.flatten(r),
                                [0, 1, 2, 3, 4, 5, 10, 11])
  out = layout.add(r, np.full(8, 0.1))
  assert list(out.keys()) == ["b", "a"]
  b, a = out.to_numpy_ndarrays()
  # Each piece cast to its array's dtype before the addition, as Flower
  # casts its noise: float32 stays float32.
  assert b.dtype == np.float32 and a.dtype == np.float64
  np.testing.assert_array_equal(b, np.arange(6, dtype=np.float32).reshape(
      2, 3) + np.float32(0.1))
  np.testing.assert_array_equal(a, [10.1, 11.1])


def test_a_layout_refuses_what_it_cannot_hold():
  with pytest.raises(ValueError, match=r"the number of parameters in arrays "
                     r"must be at least 2, got 1"):
    protocol_flower.ArrayLayout.of(record(w=np.zeros(1)))
  layout = protocol_flower.ArrayLayout.of(record(w=np.zeros((2, 2))))
  with pytest.raises(ValueError, match=r"release has arrays \[\('w', \(4,\)"
                     r"\)\], but the model sent to the clients had \[\('w', "
                     r"\(2, 2\)\)\]"):
    layout.flatten(record(w=np.zeros(4)), "release")


def _canaries(m=12, rounds=4, seed=5):
  return canary_config.CanaryConfig(
      seed=seed, num_inserted=m // 2, num_held_out=m - m // 2,
      schedule=schedules.FixedPresentations(num_rounds=rounds,
                                            presentations=2))


def test_round_cosines_remove_the_other_inserted_canaries_exactly():
  # Against the definition with the canaries as explicit vectors: x_j =
  # cos(c_j, a - sum_{i in I, i != j} s_i c_i). The canaries are float32
  # (the transform's precision): agreement to 1e-5.
  dim, seed = 300, 5
  vectors = orthogonal_canaries.canary_block(seed, np.arange(12), dim).astype(
      np.float64)
  rng = np.random.default_rng(0)
  inserted = np.array([1, 4, 7])
  a = rng.normal(size=dim) + 10.0 * vectors[inserted].sum(axis=0)
  rows = orthogonal_canaries.rows(seed, dim, 12)
  s, x = protocol_flower.score(seed, a, rows, inserted)
  np.testing.assert_allclose(s, vectors @ a, rtol=0, atol=1e-5)
  expected = []
  for j in range(12):
    others = [i for i in inserted if i != j]
    residual = a - (vectors[others] * (vectors[others] @ a)[:, None]).sum(0)
    expected.append(vectors[j] @ residual / np.linalg.norm(residual))
  np.testing.assert_allclose(x, expected, rtol=0, atol=1e-5)
  # The removal is no no-op: each inserted canary's residual loses the
  # other two's 200 of |a|^2 = 600, so its cosine is 10 / 20, not the
  # 10 / 24.5 of the plain cosine s_j / |a|. The held-out cosines have sd
  # 1 / sqrt(400) = 0.05: 0.25 is 5 sd (fixed seed).
  assert np.all(x[inserted] > 1.15 * s[inserted] / np.linalg.norm(a))
  assert x[inserted].min() > 0.4 and np.abs(np.delete(x, inserted)).max() < 0.25


def test_an_aggregate_that_is_its_canaries_has_cosine_one_and_zero_zero():
  s = np.array([2.0, 0.0, 0.0])
  np.testing.assert_allclose(protocol_flower.round_cosines(s, 4.0, [0]),
                             [1.0, 0.0, 0.0])
  assert protocol_flower.round_cosines(np.zeros(3), 0.0, []).tolist() == [
      0.0, 0.0, 0.0]


def test_the_statistics_are_the_max_and_the_schedule_sums_of_the_rounds():
  config = _canaries()
  rounds = protocol_flower.CanaryRounds(config)
  rng = np.random.default_rng(1)
  cosines = rng.uniform(-0.5, 0.5, size=(4, 12))
  cosines[2, 3] = cosines[1, 3] = 0.9  # a tie keeps the earlier round
  for r in range(4):
    rounds.append(protocol_flower.RoundScores(
        server_round=r + 1, schedule_round=r, clip=1.0, scale=0.25,
        noise_std=0.0, inserted_ids=rounds.inserted_in(r), num_replies=4,
        max_weight=0.25, scores=cosines[r], cosines=cosines[r]))
  stats = rounds.statistics()
  np.testing.assert_array_equal(stats.max_cosine, cosines.max(axis=0))
  np.testing.assert_array_equal(stats.max_round, cosines.argmax(axis=0))
  assert stats.max_round[3] == 1
  scheduled = config.schedule_matrix().T  # [rounds, candidates]
  np.testing.assert_allclose(stats.scheduled_sum,
                             (cosines * scheduled).sum(axis=0))
  np.testing.assert_array_equal(stats.scheduled_rounds, scheduled.sum(0))
  assert stats.rounds_scored == 4
  np.testing.assert_array_equal(rounds.matrix("cosines"), cosines)
  # Held-out canaries have schedules too (never inserted).
  assert scheduled[:, ~config.inserted].any()
  events = config.participation.events
  for r in range(4):
    np.testing.assert_array_equal(rounds.inserted_in(r),
                                  events[events[:, 0] == r, 1])
  assert rounds.inserted_in(4).size == 0  # past the schedule: none


def test_weight_shares_leave_out_replies_with_an_error():
  with flower_grid.server_identity():
    instruction = Message(RecordDict(), dst_node_id=1, message_type="train")
    replies = [Message(flower_grid.reply_content({"w": np.zeros(2)}, w),
                       reply_to=instruction) for w in (1.0, 3.0)]
    replies.append(Message(Error(code=0, reason="x"), reply_to=instruction))
  np.testing.assert_allclose(protocol_flower.weight_shares(
      replies, flower_grid.WEIGHT_KEY), [0.25, 0.75])


def test_the_rng_fingerprint_is_the_state_and_reading_it_draws_nothing():
  state = np.random.get_state()
  try:
    np.random.seed(9)
    seeded = protocol_flower.rng_fingerprint()
    assert protocol_flower.rng_fingerprint() == seeded  # read, not drawn
    first = np.random.normal(size=3)
    moved = protocol_flower.rng_fingerprint()
    np.random.seed(9)
    # The same fingerprint, the same draws; the cached Gaussian counts.
    assert protocol_flower.rng_fingerprint() == seeded != moved
    np.testing.assert_array_equal(np.random.normal(size=3), first)
    np.random.seed(9)
    np.random.standard_normal()  # leaves a cached Gaussian behind
    cached = protocol_flower.rng_fingerprint()
    np.random.set_state(np.random.get_state()[:3] + (0, 0.0))
    # The same key and position without it: the next draw differs.
    assert protocol_flower.rng_fingerprint() != cached
  finally:
    np.random.set_state(state)
  assert protocol_flower.repeated_states(["a", "b", "", "a", "", "b", "a"]) == [
      (0, 3), (1, 5), (0, 6)]


def test_a_hand_built_reply_is_aggregated_as_a_clients():
  reply = protocol_flower.reply(record(w=np.ones(3)), node_id=7,
                                server_round=2, weight=5.0)
  assert not reply.has_error() and reply.metadata.src_node_id == 7
  assert reply.metadata.message_type == "train"
  assert reply.content["metrics"]["num-examples"] == 5.0
  np.testing.assert_array_equal(
      reply.content["arrays"].to_numpy_ndarrays()[0], np.ones(3))
  assert protocol_flower.weight_shares([reply, reply], "num-examples"
                                       ).tolist() == [0.5, 0.5]
