"""How a bound that is maximized over thresholds pays for the choice (docs/method/lower-bounds.md).

A threshold-based bound (the number of guesses of a one-run audit, the
threshold of a GDP or epsilon_lo attack) is valid at level alpha for a
threshold fixed before looking at the data. Choosing the threshold that gives
the largest bound on the same data is not: the maximum of many bounds, each at
level alpha, exceeds the truth more often than alpha (`lower_bounds` measures
this for the paper's epsilon_lo). The strategies here keep the level:

  "fixed"       one threshold given in advance (the default option), level
                alpha.
  "bonferroni"  every option of the grid at level alpha / |grid|, the maximum
                taken: all bounds hold at once with probability >= 1 - alpha
                (Bonferroni), so their maximum does too.
  "bonferroni_all"  the same over every option the bound has (for the
                one-run bounds every number of guesses, k = 1, 2, ...: each
                threshold a guess count), each at level alpha / (number of
                options): no grid to choose in advance, at the price of a
                smaller level per option. Options whose bound at that level
                cannot beat the best so far (`Exceeds`) are skipped; the
                maximum is the same.
  "split"       a seeded random half of the items chooses the option (the one
                with the largest bound at level alpha on that half); the bound
                is computed on the other half with that option at level alpha.
                The choice is independent of the second half's coins (or
                samples), so the second bound keeps its level.
  "multi_split" `splits` such splits, each second-half bound at level alpha/2,
                and the ceil(S/2)-th largest of the S bounds reported
                (quantile aggregation with gamma = 1/2, Meinshausen, Meier &
                Bühlmann 2009, "p-values for high-dimensional regression",
                JASA, Theorem 3.1). If that value exceeds the truth, at least
                S/2 of the bounds do; each does with probability <= alpha/2, so
                by Markov's inequality this happens with probability
                <= (S alpha / 2) / (S / 2) = alpha.

For the one-run bounds the items are the coin-flipped candidates: a canary's
membership coin is independent of every other canary's, so conditioning on
the first half (its coins and statistics) leaves the second half a fair-coin
game against a mechanism that is as private as before. Options are fractions
of the items (guesses per side, or ranks), so the same option means the same
share of a half as of the whole.
"""

from __future__ import annotations

import math
import typing
from typing import Any, Callable, Sequence

import numpy as np
import numpy.typing as npt

from tff_canary.stats import options
from tff_canary.stats import sign_tests
from tff_canary.stats import validation

Strategy = options.Strategy  # defined in `options`, re-exported here
STRATEGIES = typing.get_args(Strategy)
# Default number of splits of "multi_split".
MULTI_SPLITS = 10

# bound_at(subset indices, option, alpha) -> (bound, details of that bound)
BoundAt = Callable[[np.ndarray, Any, float], tuple[float, Any]]
# exceeds(subset indices, option, alpha, value) -> False only if the bound
# with that option at level alpha is at most value (a cheap test).
Exceeds = Callable[[np.ndarray, Any, float, float], bool]


def guess_counts(statistics: npt.ArrayLike, inserted_mask: npt.ArrayLike,
                 k_plus: int, k_minus: int) -> tuple[int, int]:
  """(guesses, correct) of guessing "in" for the k_plus highest statistics
  and "out" for the k_minus lowest (Steinke, Nasr & Jagielski 2023, §5)."""
  s = np.asarray(statistics)
  mask = np.asarray(inserted_mask, dtype=bool)
  m = s.size
  order = np.argsort(s, kind="stable")
  correct = int(mask[order[m - k_plus:]].sum()) + int(
      (~mask[order[:k_minus]]).sum())
  return k_plus + k_minus, correct


def check_coin_inputs(statistics: npt.ArrayLike, inserted_mask: npt.ArrayLike
                      ) -> tuple[np.ndarray, np.ndarray]:
  """Validated (statistics, bool mask) of a coin-flipped canary game."""
  s = validation.as_sample(statistics, "statistics")
  return s, validation.as_mask(inserted_mask, "inserted_mask", s.shape,
                               "statistics")


def check_guesses(k_plus: int | None, k_minus: int | None,
                  num_candidates: int, default: int) -> tuple[int, int]:
  """Validated (k_plus, k_minus) of a guessing game; None gives `default`."""
  k_plus, k_minus = (default if k is None else validation.as_int(
      k, name, minimum=0) for k, name in ((k_plus, "k_plus"),
                                          (k_minus, "k_minus")))
  if k_plus + k_minus == 0 or k_plus + k_minus > num_candidates:
    raise ValueError(f"k_plus + k_minus must be between 1 and the number of "
                     f"candidates ({num_candidates}); got k_plus={k_plus}, "
                     f"k_minus={k_minus}.")
  return k_plus, k_minus


def sign_check(s: np.ndarray, mask: np.ndarray) -> bool:
  """True, with a SignConventionWarning, if the inserted mean is below the rest."""
  below = bool(mask.any() and (~mask).any()
               and s[mask].mean() < s[~mask].mean())
  if below:
    sign_tests.warn_if_below(s[mask], s[~mask],
                             reference_name="other candidates'",
                             what="inserted candidates'")
  return below


def check_strategy(strategy: str, splits: int, seed: int
                   ) -> tuple[str, int, int]:
  """Validated (strategy, splits, seed): the strategy and its randomness."""
  strategy = validation.as_choice(strategy, "strategy", STRATEGIES)
  splits = validation.as_int(splits, "splits", minimum=1)
  seed = validation.as_int(seed, "seed", minimum=0)
  return strategy, splits, seed


def halves(num_items: int, rng: np.random.Generator
           ) -> tuple[np.ndarray, np.ndarray]:
  """A random split of range(num_items) into two sorted halves."""
  perm = rng.permutation(num_items)
  half = num_items // 2
  return np.sort(perm[:half]), np.sort(perm[half:])


def _choose(indices: np.ndarray, bound_at: BoundAt, options: Sequence[float],
            alpha: float) -> float:
  """The option with the largest bound at level alpha (ties: the first)."""
  values = [bound_at(indices, option, alpha)[0] for option in options]
  return options[int(np.argmax(values))]


def _bonferroni(indices: np.ndarray, bound_at: BoundAt,
                options: Sequence[Any], alpha: float,
                exceeds: Exceeds | None = None) -> tuple[float, Any, Any]:
  """(largest bound, its option, details) over `options`, each at alpha / |options|."""
  per = alpha / len(options)
  best = None
  for option in options:
    if best is not None and exceeds is not None and not exceeds(
        indices, option, per, best[0]):
      continue
    value, details = bound_at(indices, option, per)
    if best is None or value > best[0]:
      best = (value, option, details)
  return best


def choose_and_bound(num_items: int, bound_at: BoundAt, *,
                     options: Sequence[Any], default: Any,
                     strategy: Strategy, alpha: float, seed: int = 0,
                     splits: int = MULTI_SPLITS,
                     all_options: Sequence[Any] | None = None,
                     exceeds: Exceeds | None = None
                     ) -> tuple[float, Any, Any]:
  """The bound under `strategy` (module docstring) and the option it used.

  Args:
    num_items: how many items (candidates) there are; subsets are index
      arrays into them.
    bound_at: a `BoundAt`, valid at level alpha for an option fixed in advance.
    options: the grid of options ("bonferroni", "split", "multi_split").
    all_options: every option ("bonferroni_all"; required for it).
    exceeds: an optional `Exceeds`, which lets "bonferroni_all" skip options.
    default: the option of "fixed".
    strategy: "fixed", "bonferroni", "split" or "multi_split".
    alpha: 1 - confidence.
    seed: seeds the random halves (the same seed gives the same bound).
    splits: the number of splits of "multi_split".

  Returns:
    (bound, option, details) of the bound reported; for "multi_split" those
    of the reported split.
  """
  everything = np.arange(num_items)
  if strategy == "fixed":
    value, details = bound_at(everything, default, alpha)
    return value, default, details
  if strategy == "bonferroni":
    return _bonferroni(everything, bound_at, options, alpha)
  if strategy == "bonferroni_all":
    if not all_options:
      raise ValueError("strategy 'bonferroni_all' needs all_options, every "
                       "option of the bound.")
    return _bonferroni(everything, bound_at, all_options, alpha, exceeds)
  rng = np.random.default_rng([seed, num_items])
  count, level = (1, alpha) if strategy == "split" else (splits, alpha / 2.0)
  found = []
  for _ in range(count):
    first, second = halves(num_items, rng)
    option = _choose(first, bound_at, options, level)
    value, details = bound_at(second, option, level)
    found.append((value, option, details))
  return found[median_index([value for value, _, _ in found])]


def median_index(values: Sequence[float]) -> int:
  """Index of the ceil(S/2)-th largest of S values (multi-split's report)."""
  order = np.argsort(-np.asarray(values, dtype=np.float64), kind="stable")
  return int(order[math.ceil(len(values) / 2) - 1])
