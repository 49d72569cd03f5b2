"""A GDP lower bound that stays valid (Nasr et al. 2023, docs/method/lower-bounds.md).

Nasr, Hayes, Steinke, Balle, Tramèr, Jagielski, Carlini & Terzis, "Tight
Auditing of Differentially Private Machine Learning" (USENIX Security 2023,
arXiv 2302.07956), §4: a mu-GDP mechanism (Dong, Roth & Su 2019, "Gaussian
Differential Privacy", arXiv 1905.02383) forces every test to have
FNR >= G_mu(FPR) = Phi(Phi^-1(1 - FPR) - mu), i.e. (their Eq. 6)

  mu >= Phi^-1(1 - FPR) - Phi^-1(FNR).

A threshold attack guesses "inserted" when a canary's statistic is >= t. At
each threshold t (every observed statistic, and +inf), with Clopper-Pearson
upper limits FPR+ (held-out canaries at or above t) and FNR+ (inserted below
t), each at level alpha / (2 n) for n thresholds (Bonferroni, so every limit
holds at once with probability >= 1 - alpha), and keeping the thresholds with
max(FPR+, FNR+) < 1 - delta,

  mu_lo = max(0, max_t Phi^-1(1 - FPR+) - Phi^-1(FNR+)),

which is <= the true mu whenever the limits hold (both inverse normals move
the right way). A negative value is no evidence of leakage and is clamped to
0, never turned into |mu|: swapping the roles of the two groups is another
test, with its own limits, and taking |mu| reports large epsilons for a
mechanism that leaks nothing (`tests/stats/bounds/test_gdp_bound.py`). The bound
is then the epsilon of mu_lo-GDP at delta (Dong, Roth & Su 2019, Corollary
2.13; `gaussian_accounting.gaussian_epsilon_of_mu`).

What it assumes: the mechanism's trade-off curve is Gaussian. mu_lo bounds
the mu of any mu-GDP mechanism, but epsilon(mu_lo, delta) is a lower bound on
the mechanism's epsilon only if it is no more private than the Gaussian
mechanism with that mu, which holds with equality for the Gaussian mechanism
(and DP-FedAvg without amplification) and is an assumption elsewhere. Its
limits also assume the held-out and the inserted statistics are each
independent draws.

Threshold strategies (`threshold_strategies`): "bonferroni" (above; the
default), "split" and "multi_split" (a seeded half of the canaries chooses
the threshold, the other half bounds mu there with each limit at half the
split's level).
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt
from scipy import special

from tff_canary.stats.accounting import gaussian_accounting
from tff_canary.stats.bounds import lower_bounds
from tff_canary.stats import results
from tff_canary.stats import sign_tests
from tff_canary.stats.bounds import threshold_strategies
from tff_canary.stats import validation

STRATEGIES = ("bonferroni", "split", "multi_split")


def _mu_per_threshold(x: np.ndarray, y: np.ndarray, thresholds: np.ndarray,
                      level: float, delta: float) -> np.ndarray:
  """Phi^-1(1 - FPR+) - Phi^-1(FNR+) at each threshold (-inf if dropped)."""
  x, y = np.sort(x), np.sort(y)
  false_negatives = np.searchsorted(x, thresholds, side="left")
  false_positives = y.size - np.searchsorted(y, thresholds, side="left")
  fnr = lower_bounds.clopper_pearson_upper(false_negatives, x.size, level)
  fpr = lower_bounds.clopper_pearson_upper(false_positives, y.size, level)
  keep = np.maximum(fnr, fpr) < 1.0 - delta
  with np.errstate(divide="ignore", invalid="ignore"):
    mu = -special.ndtri(fpr) - special.ndtri(fnr)
  return np.where(keep, mu, -np.inf)


def _all_thresholds(x, y):
  return np.r_[np.unique(np.r_[x, y]), np.inf]


def gdp_mu_lower(inserted: np.ndarray, held_out: np.ndarray, alpha: float,
                 delta: float) -> float:
  """mu_lo with Bonferroni over every threshold (module docstring), >= 0."""
  thresholds = _all_thresholds(inserted, held_out)
  mu = _mu_per_threshold(inserted, held_out, thresholds,
                         alpha / (2.0 * thresholds.size), delta)
  return float(max(0.0, mu.max()))


def _split_mu(x, y, first, second, alpha, delta):
  """Choose the threshold on `first`, bound mu on `second` at that one."""
  fx, fy = first[first < x.size], first[first >= x.size] - x.size
  sx, sy = second[second < x.size], second[second >= x.size] - x.size
  thresholds = _all_thresholds(x[fx], y[fy])
  chosen = _mu_per_threshold(x[fx], y[fy], thresholds, alpha / 2.0, delta)
  best = thresholds[int(np.argmax(chosen))]
  mu = _mu_per_threshold(x[sx], y[sy], np.array([best]), alpha / 2.0, delta)
  return float(max(0.0, mu[0]))


def gdp_bound(inserted: npt.ArrayLike, held_out: npt.ArrayLike, *,
              delta: float, confidence: float = 0.95,
              strategy: threshold_strategies.Strategy = "bonferroni",
              seed: int = 0,
              splits: int = threshold_strategies.MULTI_SPLITS
              ) -> results.GaussianClaimBound:
  """The GDP lower bound on epsilon (module docstring; Gaussian assumption).

  Args:
    inserted: 1-D array of the inserted canaries' statistics, at least 2.
    held_out: 1-D array of the held-out canaries' statistics, at least 2.
    delta: delta in (0, 1).
    confidence: every Clopper-Pearson limit holds at once with this
      probability, in (0, 1).
    strategy: "bonferroni" (every threshold), "split" or "multi_split".
    seed: the random split's seed, for "split" and "multi_split".
    splits: the number of splits of "multi_split".

  Returns:
    A `GaussianClaimBound` with method "gdp".
  """
  x = validation.as_sample(inserted, "inserted")
  y = validation.as_sample(held_out, "held_out")
  delta, confidence = validation.as_levels(delta, confidence)
  strategy, splits, seed = threshold_strategies.check_strategy(
      strategy, splits, seed)
  if strategy not in STRATEGIES:
    raise ValueError(f"strategy must be one of {STRATEGIES} for the GDP "
                     f"bound (it has no threshold fixed in advance), got "
                     f"{strategy!r}.")
  alpha = 1.0 - confidence
  below = bool(x.mean() < y.mean())
  sign_tests.warn_if_below(x, y, reference_name="held-out canaries' mean")
  if strategy == "bonferroni":
    mu = gdp_mu_lower(x, y, alpha, delta)
  else:
    rng = np.random.default_rng([seed, x.size + y.size])
    count, level = (1, alpha) if strategy == "split" else (splits, alpha / 2)
    values = [_split_mu(x, y, *threshold_strategies.halves(x.size + y.size,
                                                            rng), level, delta)
              for _ in range(count)]
    mu = values[threshold_strategies.median_index(values)]
  return results.GaussianClaimBound(
      epsilon=gaussian_accounting.gaussian_epsilon_of_mu(mu, delta), mu=mu,
      method="gdp", strategy=strategy, guesses=None,
      correct=None, num_candidates=x.size + y.size, num_inserted=x.size,
      delta=delta, confidence=confidence, inserted_below_null=below)
