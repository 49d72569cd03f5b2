"""Tests of tff_canary.federated.scores.aggregate_recorder (NumPy only, no TF)."""

from __future__ import annotations

import collections
import json

import numpy as np
import pytest

from tff_canary.federated.scores import aggregate_recorder


def test_recorder_pops_writes_and_resumes(tmp_path):
  path = str(tmp_path / "agg.npy")
  data = np.random.default_rng(0).normal(size=(6, 50)).astype(np.float32)
  recorder = aggregate_recorder.AggregateRecorder(path, 50, 8)
  for r in range(3):
    metrics = collections.OrderedDict(
        client_work={"loss": 1.0},
        aggregator=collections.OrderedDict(
            zeroing=collections.OrderedDict(
                clip=0.1, round_num=np.int32(r), noised_aggregate=data[r])))
    assert recorder.record(metrics) == r
    assert "noised_aggregate" not in metrics["aggregator"]["zeroing"]
    assert metrics["aggregator"]["zeroing"]["clip"] == 0.1
  recorder.close()
  # Resume: reopen and go on.
  again = aggregate_recorder.AggregateRecorder.open(path)
  np.testing.assert_array_equal(again.recorded, np.arange(8) < 3)
  for r in range(3, 6):
    again.record({"noised_aggregate": data[r], "round_num": r})
  array, recorded = aggregate_recorder.load_aggregates(path)
  np.testing.assert_array_equal(array[:6], data)
  np.testing.assert_array_equal(recorded, np.arange(8) < 6)
  with open(path + ".rounds.json") as f:
    assert json.load(f)["recorded"] == list(range(6))


def test_recorder_errors(tmp_path):
  path = str(tmp_path / "agg.npy")
  recorder = aggregate_recorder.AggregateRecorder(path, 5, 2)
  with pytest.raises(FileExistsError, match="open"):
    aggregate_recorder.AggregateRecorder(path, 5, 2)
  with pytest.raises(ValueError, match="record_aggregates=True"):
    recorder.record({"aggregator": {"clip": 1.0}})
  with pytest.raises(ValueError, match="2 'noised_aggregate'"):
    recorder.record({"a": {"noised_aggregate": np.zeros(5), "round_num": 0},
                     "b": {"noised_aggregate": np.zeros(5), "round_num": 0}})
  with pytest.raises(ValueError, match="beyond"):
    recorder.record({"noised_aggregate": np.zeros(5), "round_num": 2})
  with pytest.raises(ValueError, match="shape"):
    recorder.write(0, np.zeros(4))
  with pytest.raises(ValueError, match="not finite"):
    recorder.write(0, np.full(5, np.nan))
  with pytest.raises(ValueError, match="dtype"):
    aggregate_recorder.AggregateRecorder(str(tmp_path / "b.npy"), 5, 2,
                                         dtype=np.int32)
  other = tmp_path / "c.npy"
  np.save(other, np.zeros((2, 5), np.float32))
  with pytest.raises(ValueError, match="rounds.json is missing"):
    aggregate_recorder.AggregateRecorder.open(other)


def test_recorder_float16(tmp_path):
  path = str(tmp_path / "agg.npy")
  recorder = aggregate_recorder.AggregateRecorder(path, 4, 1, dtype=np.float16)
  recorder.write(0, np.array([1.0, 2.0, 3.0, 4.0], np.float32))
  array, _ = aggregate_recorder.load_aggregates(path)
  assert array.dtype == np.float16
  np.testing.assert_array_equal(array[0], [1, 2, 3, 4])
