"""Threshold strategies: Bonferroni, split, multi-split (docs/method/lower-bounds.md)."""

import numpy as np
import pytest

from tff_canary.stats.bounds import threshold_strategies as ts


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


def test_bonferroni_all_divides_the_level_among_every_option():
  values = {k: float(k % 7) for k in range(1, 31)}  # max 6.0 first at k = 6
  bound_at, calls = _recording_bound(values)
  value, option, _ = ts.choose_and_bound(
      60, bound_at, options=[1, 2], default=1, strategy="bonferroni_all",
      alpha=0.06, all_options=list(values))
  assert (value, option) == (6.0, 6)
  assert len(calls) == 30
  assert all(alpha == pytest.approx(0.002) for _, _, alpha in calls)


def test_bonferroni_all_skips_only_options_that_cannot_win():
  # `exceeds` says truthfully whether an option's bound beats the best so
  # far; skipping on it gives the same maximum with fewer evaluations.
  values = {k: float((k * 37) % 101) for k in range(1, 101)}
  bound_at, calls = _recording_bound(values)
  value, option, _ = ts.choose_and_bound(
      200, bound_at, options=[1], default=1, strategy="bonferroni_all",
      alpha=0.05, all_options=list(values),
      exceeds=lambda index, k, alpha, best: values[k] > best)
  assert (value, option) == (max(values.values()), max(values, key=values.get))
  assert len(calls) < 20


def test_bonferroni_all_needs_every_option():
  bound_at, _ = _recording_bound({1: 1.0})
  with pytest.raises(ValueError, match="all_options"):
    ts.choose_and_bound(10, bound_at, options=[1], default=1,
                        strategy="bonferroni_all", alpha=0.05)


def test_fdp_bonferroni_all_is_the_brute_force_maximum_over_every_k():
  # Independent route: largest_rejected_mu at every k = 1..m/2 at level
  # alpha / (m/2), maximized by hand, against the strategy's skipping search.
  from tff_canary.stats.bounds import fdp_one_run
  rng = np.random.default_rng(3)
  m = 120
  mask = rng.random(m) < 0.5
  s = rng.standard_normal(m) + 2.5 * mask
  per = 0.05 / (m // 2)
  brute = max(fdp_one_run.largest_rejected_mu(
      *ts.guess_counts(s, mask, k, k), m, per) for k in range(1, m // 2 + 1))
  got = fdp_one_run.fdp_one_run_bound(s, mask, delta=1e-6,
                                      strategy="bonferroni_all")
  assert brute > 0 and got.mu == pytest.approx(brute, abs=1e-9)
  assert got.strategy == "bonferroni_all"
  assert fdp_one_run.all_guess_fractions(m)[:3] == [3 / m, 6 / m, 12 / m]
  assert sorted(round(f * m) for f in fdp_one_run.all_guess_fractions(m)) == (
      list(range(1, m // 2 + 1)))


def test_tight_bonferroni_all_is_the_brute_force_maximum_over_every_r():
  from tff_canary.stats.bounds import tight_one_run
  rng = np.random.default_rng(4)
  n = 60
  mask = rng.random(n) < 0.5
  s = rng.standard_normal(n) + 3.0 * mask
  per = 0.05 / (n - 1)
  brute = 0.0
  for r in range(1, n):
    guesses, correct = ts.guess_counts(s, mask, r, 0)
    brute = max(brute, tight_one_run.largest_rejected_mu(
        n, guesses, guesses - correct, per))
  got = tight_one_run.tight_one_run_bound(s, mask, delta=1e-6,
                                          strategy="bonferroni_all")
  assert brute > 0 and got.mu == pytest.approx(brute, abs=1e-9)
