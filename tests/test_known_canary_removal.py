"""Removing the other inserted canaries in the cosine pass, on real TFF rounds.

tff_canary.federated.scores.known_canary_removal with compute_cosine_table: the
aggregation process of this package runs a few rounds without clients (zero
client updates), so each recorded aggregate is the round's canaries at the
clip over clients_per_round, plus the noise.
"""

from __future__ import annotations

import numpy as np
import pytest

from tff_canary.federated.scores import cosine_pass
from tff_canary.federated.insertion import factory
from tff_canary.federated.scores import known_canary_removal
from tff_canary.stats.canaries import canary_config
from tff_canary.stats.canaries import cosine_table
from tff_canary.stats.canaries import schedules
import tensorflow_federated as tff  # pylint: disable=g-bad-import-order

pytestmark = pytest.mark.tff

SHAPES = ([40, 5], [5])
DIM = 205
CLIENTS = 4


def _value_type():
  return tff.types.to_type([tff.TensorType(np.float32, s) for s in SHAPES])


def _config(num_inserted, num_held_out, rounds):
  return canary_config.CanaryConfig(
      seed=5, num_inserted=num_inserted, num_held_out=num_held_out,
      schedule=schedules.FixedPresentations(rounds, 1))


def _rounds(aggregator, rounds):
  """Runs `rounds` rounds without clients: (aggregates [R, d], clips)."""
  process = aggregator.create(_value_type())
  state = process.initialize()
  rows, clips = [], []
  for _ in range(rounds):
    output = process.next(state, [])
    state = output.state
    rows.append(np.asarray(output.measurements["noised_aggregate"]))
    clips.append(float(output.measurements["clip"]))
  return np.stack(rows), np.array(clips)


def _table(config, aggregates, clips, remove):
  theta0 = np.zeros(DIM)
  theta_t = -aggregates.sum(axis=0)  # server SGD, learning rate 1
  return cosine_pass.compute_cosine_table(
      config, theta0, theta_t, aggregates, progress=False, clips=clips,
      clients_per_round=CLIENTS, remove_known_canaries=remove)


def test_corrected_cosine_of_a_noiseless_canary_is_one():
  # 7 canaries in 3 rounds: some round holds at least 3 of them, whose
  # uncorrected cosine is about 1/sqrt(3). Zero noise and no clients: each
  # aggregate is (C / n) times its canaries' sum, so with the others
  # removed each canary's cosine in its round is that of a canary alone, 1
  # (up to float32 rounding, ~1e-7; 1e-6 leaves a margin).
  rounds = 3
  config = _config(7, 2, rounds)
  aggregator = factory.CanaryDPFactory.gaussian_fixed(0.0, CLIENTS, 2.0,
                                                      canaries=config)
  aggregates, clips = _rounds(aggregator, rounds)
  np.testing.assert_array_equal(clips, 2.0)
  corrected = _table(config, aggregates, clips, True)
  plain = _table(config, aggregates, clips, False)
  assert corrected.known_canaries_removed == "all_iterates"
  assert plain.known_canaries_removed == "none"
  inserted = corrected.mask("inserted")
  np.testing.assert_allclose(corrected.max_cosine[inserted], 1.0, atol=1e-6)
  events = config.participation.events
  per_round = np.bincount(events[:, 0], minlength=rounds)
  np.testing.assert_array_equal(corrected.max_round[inserted],
                                events[np.argsort(events[:, 1]), 0])
  crowded = np.isin(np.arange(7), events[per_round[events[:, 0]] >= 2, 1])
  assert crowded.any()
  # Uncorrected, a canary sharing its round with others is well below 1.
  assert np.all(plain.max_cosine[:7][crowded] < 0.9)
  # a'_r (3 x 205 float32, 2460 bytes) above half the budget goes to a
  # temporary file; 4000 bytes is above plan_blocks' minimum 16 d = 3280.
  small = cosine_pass.compute_cosine_table(
      config, np.zeros(DIM), -aggregates.sum(axis=0), aggregates,
      progress=False, clips=clips, clients_per_round=CLIENTS,
      memory_budget_bytes=4000)
  # The same up to float32 rounding: the chunked path's GEMMs have other
  # shapes (and memory alignment), so BLAS may round a product's last bit
  # differently (seen: 7.5e-9 on one of 9 cosines); 1e-7 is a few ulps.
  np.testing.assert_allclose(small.max_cosine, corrected.max_cosine,
                             rtol=0, atol=1e-7)
  # The scale matters: with a wrong clip the known part is not removed.
  wrong = _table(config, aggregates, 2 * clips, True)
  assert np.all(wrong.max_cosine[:7][crowded] < 0.9)
  # The final-model cosines are never corrected.
  np.testing.assert_array_equal(corrected.final_cosine, plain.final_cosine)


def test_held_out_cosines_do_not_depend_on_the_inserted_canaries():
  # Seeded noise: the same noise stream whatever is inserted (it is keyed by
  # the noise seed, query, round and tensor). Run A inserts 6 canaries, run B
  # none; held-out ids 6..9 are the same directions in both. After removal
  # A's aggregates equal B's up to float32 rounding, so their held-out
  # cosines agree to ~1e-6; uncorrected they differ by ~0.1 / sqrt(d).
  rounds = 3
  with_canaries = _config(6, 4, rounds)
  without = canary_config.CanaryConfig(
      seed=5, num_inserted=0, num_held_out=10,
      schedule=schedules.FixedPresentations(rounds, 1))
  results = {}
  for name, config in (("a", with_canaries), ("b", without)):
    aggregator = factory.CanaryDPFactory.gaussian_fixed(
        1.0, CLIENTS, 0.5, canaries=config, noise_seed=17)
    results[name] = _rounds(aggregator, rounds)
  (agg_a, clips_a), (agg_b, clips_b) = results["a"], results["b"]
  base = _table(without, agg_b, clips_b, True)
  corrected = _table(with_canaries, agg_a, clips_a, True)
  plain = _table(with_canaries, agg_a, clips_a, False)
  held = slice(6, 10)
  np.testing.assert_allclose(corrected.max_cosine[held],
                             base.max_cosine[held], atol=2e-6)
  assert np.max(np.abs(plain.max_cosine[held] - base.max_cosine[held])) > 1e-3


def test_tables_record_the_correction_and_load_older_files(tmp_path):
  config = _config(2, 1, 2)
  aggregator = factory.CanaryDPFactory.gaussian_fixed(0.5, CLIENTS, 1.0,
                                                      canaries=config)
  aggregates, clips = _rounds(aggregator, 2)
  table = _table(config, aggregates, clips, True)
  for suffix in ("csv", "npz"):
    path = tmp_path / f"t.{suffix}"
    table.save(path)
    loaded = cosine_table.CosineTable.load(path)
    assert loaded.known_canaries_removed == "all_iterates" and loaded == table
  # Without clips the pass cannot correct, and says so in the table.
  plain = cosine_pass.compute_cosine_table(config, np.zeros(DIM),
                                           -aggregates.sum(0), aggregates,
                                           progress=False)
  assert plain.known_canaries_removed == "none"
  # A table from before the field loads as "none".
  text = (tmp_path / "t.csv").read_text().replace(
      '# known_canaries_removed: "all_iterates"\n', "")
  (tmp_path / "old.csv").write_text(text)
  assert cosine_table.CosineTable.load(
      tmp_path / "old.csv").known_canaries_removed == "none"


def test_bad_clips_are_refused():
  config = _config(2, 1, 3)
  with pytest.raises(TypeError, match="remove_known_canaries must be a bool"):
    cosine_pass.compute_cosine_table(
        config, np.zeros(DIM), np.ones(DIM), np.ones((3, DIM), np.float32),
        progress=False, remove_known_canaries="yes")
  removal = known_canary_removal.KnownCanaryRemoval(config, 4)
  with pytest.raises(ValueError, match="clips must be 1-D"):
    removal.chunk(np.arange(3), [1.0])
  with pytest.raises(ValueError, match=r"clips\[1\] = nan"):
    removal.chunk(np.arange(3), [1.0, np.nan, 1.0])
  with pytest.raises(ValueError, match="clients_per_round"):
    known_canary_removal.KnownCanaryRemoval(config, 0)
  with pytest.raises(ValueError, match="clips has 2 rounds"):
    cosine_pass.compute_cosine_table(
        config, np.zeros(DIM), np.ones(DIM), np.ones((3, DIM), np.float32),
        progress=False, clips=[1.0, 1.0], clients_per_round=4)
