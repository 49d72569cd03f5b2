"""Threshold strategies: Bonferroni, split, multi-split (METHOD §10)."""

import numpy as np
import pytest

from tff_canary.stats import threshold_strategies as ts


def _recording_bound(values):
  """bound_at returning values[option]; records every call."""
  calls = []

  def bound_at(index, option, alpha):
    calls.append((index.copy(), option, alpha))
    return values[option], ("details", option)

  return bound_at, calls


def test_fixed_uses_the_default_at_full_level():
  bound_at, calls = _recording_bound({"a": 1.0, "b": 2.0, None: 0.5})
  value, option, details = ts.choose_and_bound(
      10, bound_at, options=["a", "b"], default=None, strategy="fixed",
      alpha=0.05)
  assert (value, option, details) == (0.5, None, ("details", None))
  assert len(calls) == 1 and calls[0][2] == 0.05 and calls[0][0].size == 10


def test_bonferroni_divides_the_level_among_the_options():
  bound_at, calls = _recording_bound({"a": 1.0, "b": 3.0, "c": 2.0})
  value, option, _ = ts.choose_and_bound(
      10, bound_at, options=["a", "b", "c"], default="a",
      strategy="bonferroni", alpha=0.06)
  assert (value, option) == (3.0, "b")
  assert all(alpha == pytest.approx(0.02) for _, _, alpha in calls)


def test_split_chooses_on_one_half_and_bounds_on_the_other():
  bound_at, calls = _recording_bound({"a": 1.0, "b": 3.0})
  value, option, _ = ts.choose_and_bound(
      11, bound_at, options=["a", "b"], default="a", strategy="split",
      alpha=0.05, seed=3)
  assert (value, option) == (3.0, "b")
  first, second = calls[0][0], calls[-1][0]
  assert not set(first) & set(second)
  assert sorted(np.r_[first, second]) == list(range(11))
  assert calls[-1][1:] == ("b", 0.05)
  # Seeded: the same seed, the same halves.
  again, calls2 = _recording_bound({"a": 1.0, "b": 3.0})
  ts.choose_and_bound(11, again, options=["a", "b"], default="a",
                      strategy="split", alpha=0.05, seed=3)
  assert np.array_equal(calls2[-1][0], second)


def test_multi_split_reports_the_upper_median_at_half_the_level():
  # Each call returns the first index of its half, so the splits differ;
  # calls alternate (choose on the first half, bound on the second), and the
  # report is the ceil(S/2)-th largest of the second halves' values.
  seen = []

  def bound_at(index, option, alpha):
    seen.append((index[0], alpha))
    return float(index[0]), None

  value, _, _ = ts.choose_and_bound(40, bound_at, options=[1], default=1,
                                    strategy="multi_split", alpha=0.05,
                                    seed=1, splits=5)
  reported = [first for (first, alpha) in seen[1::2]]  # second halves
  assert all(alpha == 0.025 for _, alpha in seen)
  assert value == sorted(reported, reverse=True)[2]


@pytest.mark.parametrize("values, expected", [
    ([3.0, 1.0, 2.0], 2), ([5.0, 4.0], 0), ([1.0, 2.0, 3.0, 4.0], 2),
    ([7.0], 0)])
def test_median_index_is_the_ceil_half_largest(values, expected):
  assert ts.median_index(values) == expected


def test_guess_counts():
  s = np.array([0.1, 0.9, 0.5, -0.3, 0.7])
  mask = np.array([False, True, False, False, True])
  assert ts.guess_counts(s, mask, 2, 1) == (3, 3)   # 0.9, 0.7 in; -0.3 out
  assert ts.guess_counts(s, mask, 0, 2) == (2, 2)
  assert ts.guess_counts(s, mask, 3, 0) == (3, 2)


@pytest.mark.parametrize("strategy, splits, seed, match", [
    ("best", 3, 0, "strategy"), ("split", 0, 0, "splits"),
    ("split", 1.5, 0, "splits"), ("split", 3, -1, "seed")])
def test_bad_strategy_names_the_argument(strategy, splits, seed, match):
  with pytest.raises((TypeError, ValueError), match=match):
    ts.check_strategy(strategy, splits, seed)
