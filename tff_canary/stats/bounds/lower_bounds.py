"""Lower bounds on epsilon that hold with a stated confidence (docs/method/lower-bounds.md).

epsilon_lo (Jagielski, Ullman & Oprea 2020, with the Jeffreys intervals of
Zanella-Béguelin et al. 2022; the paper's lower bound). A threshold attack
guesses "inserted" when a canary's statistic is >= t. At each threshold t taken
at an observed inserted statistic, with f of the n inserted canaries below t:

  FNR_up(t) = Beta(f + 1/2, n - f + 1/2).ppf(1 - alpha)   (Jeffreys, one-sided)
  FPR_up(t) = P(T >= t) under the exact null of docs/method/null-law.md (final model; no
              sampling error), or the Jeffreys upper limit of the held-out
              canaries at or above t (all iterates, or any empirical null)
  eps(t)   = max(log((1 - delta - FNR_up)/FPR_up),
                 log((1 - delta - FPR_up)/FNR_up), 0)              (Kairouz et
              al. 2015: (eps, delta)-DP forces FPR + e^eps FNR >= 1 - delta
              and FNR + e^eps FPR >= 1 - delta)
  epsilon_lo = max over t of eps(t),   alpha = 1 - confidence = 0.05.

Thresholds between two inserted statistics never help (FNR is constant there and
FPR only falls as t rises to the next one), so the observed inserted statistics
are all the thresholds needed. The bound saturates with the number of canaries:
with FNR_up >= Beta(1/2, n + 1/2).ppf(1 - alpha), it cannot exceed about 6.2
for 1000 inserted and 1000 held-out canaries. The max over thresholds, with
each rate at level alpha, is what the paper does (`correction="none"`).

That construction is NOT a 95% bound: each threshold's interval holds at 95%,
but the maximum over ~n data-chosen thresholds does not (`bench/validity.py`;
docs/method/lower-bounds.md has the rates). Results carry `correction` so a
report can say which construction it used.

`correction="simultaneous"` is a corrected version that keeps its confidence.
The thresholds are the inserted statistics at a fixed set of ranks K (the k-th
largest, k = 1, 2, 4, 8, ..., and the same counted from the bottom: about
2 log2(n) ranks, chosen before seeing the data; finer grids measured no more
powerful, since each extra threshold costs Bonferroni level). At the k-th
largest inserted statistic s_k, TPR(s_k) = P(X >= s_k) is distributed
exactly as Beta(k, n - k + 1) (the k-th smallest of n uniforms) for i.i.d.
continuous statistics, so its alpha_k quantile is an exact lower limit;
FNR_up = 1 - that limit serves both terms.
The FPR is exact under the closed-form null; under a held-out null it is the
Clopper-Pearson upper limit of the held-out count at or above s_k, valid
because the held-out statistics are independent of s_k. alpha goes to the TPR
limits (all of it for the exact null, half for a held-out null, the other half
to the FPR limits) and is divided equally among the |K| thresholds (Bonferroni),
so all limits hold at once with probability >= 1 - alpha and so does the
bound.

The one-run bound (Steinke, Nasr & Jagielski 2023, "Privacy auditing with one
(1) training run", Theorem 5.2 as restated in docs/method/lower-bounds.md). m candidate canaries
are each inserted by a fair coin. The auditor guesses "in" for the k+ highest
statistics and "out" for the k- lowest (k+ and k- fixed in advance); r = k+ + k-
guesses, v of them right. With q = e^eps / (1 + e^eps),

  beta(eps)  = P[Bin(r, q) >= v],
  alpha'(eps) = max_{i = 1..v} (1/i) P[v - i <= Bin(r, q) < v],
  p(eps)     = min(1, beta + 2 m delta alpha'),

and the bound is the largest eps with p(eps) <= 1 - confidence (p rises with
eps). At delta = 0 it cannot exceed logit((1 - confidence)^(1/r)): 3.49 for
r = 100.

The strategies of `threshold_strategies` are further corrections, each with
the simultaneous construction's exact limits: "bonferroni" (every rank 1..n
at alpha / n), "split" and "multi_split" (the rank chosen on the grid by a
seeded half of the inserted, and of the held-out, canaries, the other half
bounded at that rank as a share of its size).
"""

from __future__ import annotations

import functools
import typing
from typing import Callable, Optional

import numpy as np
import numpy.typing as npt
from scipy import optimize, special, stats

from tff_canary.stats.estimators import null_law
from tff_canary.stats import options
from tff_canary.stats import results
from tff_canary.stats import sign_tests
from tff_canary.stats.bounds import threshold_strategies
from tff_canary.stats import validation

# The option types (defined in `options`, re-exported here).
Correction = options.Correction
CORRECTIONS = typing.get_args(Correction)
Null = options.Null
# Ratio of the geometric rank grid of the simultaneous correction.
_RANK_RATIO = 2.0


def _beta_upper(count, trials, alpha, a, b):
  """Beta(count + a, trials - count + b).ppf(1 - alpha); 1 when count = trials."""
  count = np.asarray(count, dtype=np.float64)
  with np.errstate(invalid="ignore"):
    upper = special.betaincinv(count + a, trials - count + b, 1.0 - alpha)
  return np.where(count >= trials, 1.0, upper)


def jeffreys_upper(failures: npt.ArrayLike, trials: npt.ArrayLike,
                   alpha: float) -> np.ndarray:
  """One-sided Jeffreys upper limit Beta(f + 1/2, n - f + 1/2).ppf(1 - alpha); 1 when f = n."""
  return _beta_upper(failures, trials, alpha, 0.5, 0.5)


def clopper_pearson_upper(successes: npt.ArrayLike, trials: npt.ArrayLike,
                          alpha: float) -> np.ndarray:
  """One-sided Clopper-Pearson upper limit Beta(c + 1, n - c).ppf(1 - alpha); 1 when c = n."""
  return _beta_upper(successes, trials, alpha, 1.0, 0.0)


def simultaneous_ranks(n: int) -> np.ndarray:
  """The fixed ranks K of the simultaneous correction (1 = the largest)."""
  low = np.unique(np.round(_RANK_RATIO ** np.arange(
      0, np.log(n) / np.log(_RANK_RATIO) + 1)).astype(np.int64))
  low = low[low <= n]
  return np.unique(np.concatenate([low, n + 1 - low]))


def _eps_of_rates(log_fnr, log_fpr, delta):
  """eps(t) of the module docstring from log upper limits of FNR and FPR."""
  fnr, fpr = np.exp(log_fnr), np.exp(log_fpr)
  with np.errstate(divide="ignore", invalid="ignore"):
    first = np.log1p(-(delta + fnr)) - log_fpr
    second = np.log1p(-(delta + fpr)) - log_fnr
  first = np.where(delta + fnr < 1.0, first, -np.inf)
  second = np.where(delta + fpr < 1.0, second, -np.inf)
  return np.maximum(np.maximum(first, second), 0.0)


_BLOCK = 32


def _max_over_thresholds(n, log_fnr_at, log_fpr_at, delta):
  """max_i eps(t_i) over sorted thresholds t_0 <= ... <= t_{n-1}, exactly.

  `log_fnr_at(idx)` and `log_fpr_at(idx)` give the log upper limits at the
  given threshold indices; the first never decreases with the index and the
  second never increases (more misses and fewer false positives as the
  threshold rises). So on a block of thresholds between indices a < b,
  eps <= max(log(1 - delta - FNR_a) - log FPR_b, log(1 - delta - FPR_b) -
  log FNR_a). Evaluating every `_BLOCK`-th threshold first and then only the
  blocks whose bound beats the best value found gives the same maximum as
  evaluating all n, with a fraction of the special-function calls.

  Returns:
    (eps, index, log_fnr, log_fpr) at the maximizing threshold.
  """
  coarse = np.unique(np.r_[np.arange(0, n, _BLOCK), n - 1])
  fnr_c, fpr_c = log_fnr_at(coarse), log_fpr_at(coarse)
  eps_c = _eps_of_rates(fnr_c, fpr_c, delta)
  k = int(np.argmax(eps_c))
  best = (float(eps_c[k]), int(coarse[k]), float(fnr_c[k]), float(fpr_c[k]))
  bounds = _eps_of_rates(fnr_c[:-1], fpr_c[1:], delta)
  for j in np.argsort(-bounds):
    if bounds[j] <= best[0]:
      break
    inner = np.arange(coarse[j] + 1, coarse[j + 1])
    if inner.size == 0:
      continue
    fnr_i, fpr_i = log_fnr_at(inner), log_fpr_at(inner)
    eps_i = _eps_of_rates(fnr_i, fpr_i, delta)
    m = int(np.argmax(eps_i))
    if eps_i[m] > best[0]:
      best = (float(eps_i[m]), int(inner[m]), float(fnr_i[m]), float(fpr_i[m]))
  return best


def epsilon_lo(inserted: npt.ArrayLike, *, delta: float,
               dim: Optional[int] = None,
               held_out: Optional[npt.ArrayLike] = None,
               confidence: float = 0.95,
               correction: Correction = "none") -> results.LowerBound:
  """epsilon_lo: the threshold-attack lower bound on epsilon (see module docstring).

  Args:
    inserted: 1-D array of the inserted canaries' statistics (cosines in
      [-1, 1]), at least 2.
    delta: delta in (0, 1).
    dim: model dimension (>= 2) for the exact closed-form null of a cosine
      (final model). Give exactly one of `dim` and `held_out`.
    held_out: 1-D array of held-out canaries' statistics for the empirical
      null (all iterates, where there is no closed form).
    confidence: the bound holds with this probability (per the paper's
      construction, see `correction`), in (0, 1).
    correction: "none" (the paper's; nominal confidence only),
      "simultaneous" (holds with probability >= confidence; see the module
      docstring), or the threshold strategies "bonferroni", "split",
      "multi_split" (also valid; module docstring).

  Returns:
    A `LowerBound`.
  """
  x = validation.as_cosines(inserted, "inserted")
  delta, confidence = validation.as_levels(delta, confidence)
  correction = validation.as_choice(correction, "correction", CORRECTIONS)
  if (dim is None) == (held_out is None):
    raise ValueError("give exactly one of dim (exact null) and held_out "
                     f"(empirical null); got dim={dim!r} and held_out="
                     f"{'None' if held_out is None else 'an array'}.")
  if dim is not None:
    null, null_dist, y, null_mean = "exact", null_law.CosineNull(
        validation.as_dim(dim)), None, 0.0
  else:
    y = np.sort(validation.as_cosines(held_out, "held_out"))
    null, null_dist, null_mean = "held_out", None, float(y.mean())
  below = float(x.mean()) < null_mean
  # y is None for the exact null: then against its mean 0. Named as the
  # estimates name the same comparison, so a report shows it once.
  sign_tests.warn_if_below(x, y, reference_name=(
      "null mean" if y is None else "held-out canaries' mean"))
  search = {"none": _paper_search, "simultaneous": _simultaneous_search,
            "bonferroni": lambda x, *rest: _simultaneous_search(  # every rank
                x, *rest, ranks=np.arange(1, x.size + 1)),
            "split": _split_search,
            "multi_split": functools.partial(
                _split_search, splits=threshold_strategies.MULTI_SPLITS),
            }[correction]
  epsilon, threshold, fnr, fpr, ceiling = search(x, null_dist, y, delta,
                                                 1.0 - confidence)
  return results.LowerBound(
      epsilon=epsilon, null=null,
      threshold=threshold if epsilon > 0 else None,
      fnr_upper=fnr, fpr_upper=fpr, ceiling=ceiling,
      saturated=bool(np.isfinite(ceiling) and epsilon >= ceiling * (1 - 1e-9)),
      correction=correction, delta=delta, confidence=confidence,
      num_inserted=x.size, num_held_out=0 if y is None else y.size,
      dim=None if null_dist is None else null_dist.dim,
      inserted_below_null=below)


def _paper_search(x, null_dist, y, delta, alpha):
  """The paper's construction: every threshold, each rate at level alpha.

  Returns:
    (epsilon, threshold, FNR_up, FPR_up, ceiling) at the best threshold.
  """
  n = x.size
  thresholds = np.sort(x)
  misses = np.searchsorted(thresholds, thresholds, side="left")

  def log_fnr_at(idx):
    return np.log(jeffreys_upper(misses[idx], n, alpha))

  if null_dist is not None:
    def log_fpr_at(idx):
      return null_dist.logsf(thresholds[idx])

    ceiling = np.inf
  else:
    false_positives = y.size - np.searchsorted(y, thresholds, side="left")

    def log_fpr_at(idx):
      return np.log(jeffreys_upper(false_positives[idx], y.size, alpha))

    ceiling = float(_eps_of_rates(np.log(jeffreys_upper(0, n, alpha)),
                                  np.log(jeffreys_upper(0, y.size, alpha)),
                                  delta))
  epsilon, best, log_fnr, log_fpr = _max_over_thresholds(
      n, log_fnr_at, log_fpr_at, delta)
  return (epsilon, float(thresholds[best]), float(np.exp(log_fnr)),
          float(np.exp(log_fpr)), ceiling)


def _simultaneous_search(x, null_dist, y, delta, alpha, ranks=None):
  """correction="simultaneous" (module docstring), the level split among
  `ranks` if given instead of the geometric grid; same return as above."""
  n = x.size
  ranks = simultaneous_ranks(n) if ranks is None else ranks
  thresholds = np.sort(x)[::-1][ranks - 1]
  per_rank = (alpha if null_dist is not None else alpha / 2.0) / ranks.size
  tpr_lo = special.betaincinv(ranks.astype(np.float64),
                              (n - ranks + 1).astype(np.float64), per_rank)
  with np.errstate(divide="ignore"):
    log_fnr = np.log1p(-tpr_lo)
  if null_dist is not None:
    log_fpr = null_dist.logsf(thresholds)
    ceiling = np.inf
  else:
    per_rank_fpr = (alpha / 2.0) / ranks.size
    counts = y.size - np.searchsorted(y, thresholds, side="left")
    log_fpr = np.log(clopper_pearson_upper(counts, y.size, per_rank_fpr))
    # Perfect separation: no held-out statistic above any threshold.
    ceiling = float(_eps_of_rates(log_fnr, np.log(clopper_pearson_upper(
        np.zeros(ranks.size), y.size, per_rank_fpr)), delta).max())
  eps = _eps_of_rates(log_fnr, log_fpr, delta)
  best = int(np.argmax(eps))
  return (float(eps[best]), float(thresholds[best]),
          float(np.exp(log_fnr[best])), float(np.exp(log_fpr[best])), ceiling)


def _split_search(x, null_dist, y, delta, alpha, splits=1):
  """correction="split" (splits=1, level alpha) or "multi_split"."""
  rng = np.random.default_rng([x.size, 0 if y is None else y.size])
  level = alpha if splits == 1 else alpha / 2.0
  found = []
  for _ in range(splits):
    first_x, second_x = threshold_strategies.halves(x.size, rng)
    first_y = second_y = None
    if y is not None:
      a, b = threshold_strategies.halves(y.size, rng)
      first_y, second_y = y[a], y[b]  # y is sorted, so are its halves
    chosen = _simultaneous_search(x[first_x], null_dist, first_y, delta,
                                  level)[1]
    share = np.count_nonzero(x[first_x] >= chosen) / first_x.size
    rank = int(np.clip(round(share * second_x.size), 1, second_x.size))
    found.append(_simultaneous_search(x[second_x], null_dist, second_y, delta,
                                      level, ranks=np.array([rank])))
  return found[threshold_strategies.median_index([f[0] for f in found])]


def one_run_p_value(epsilon, guesses, correct, num_candidates, delta):
  """p(eps) = min(1, beta + 2 m delta alpha') of the module docstring."""
  q = special.expit(epsilon)
  if correct == 0:
    return 1.0
  beta = stats.binom.sf(correct - 1, guesses, q)
  pmf = stats.binom.pmf(np.arange(correct), guesses, q)
  # sum_{k = v-i}^{v-1} pmf(k) for i = 1..v, divided by i.
  windows = np.cumsum(pmf[::-1]) / np.arange(1, correct + 1)
  return float(min(1.0, beta + 2.0 * num_candidates * delta * windows.max()))


def largest_rejected(test: Callable[[float], float],
                     rejects: Callable[[float], bool], xtol: float) -> float:
  """The largest claim x >= 0 a test rejects (0 if it does not reject x = 0),
  for tests that reject every claim below a threshold and none above it:
  `rejects(test(x))` says whether x is rejected; the threshold, a root of
  `test`, is bracketed by doubling from 1 and found by Brent's method."""
  if not rejects(test(0.0)):
    return 0.0
  high = 1.0
  while rejects(test(high)):
    high *= 2.0
  return float(optimize.brentq(test, high / 2.0 if high > 1.0 else 0.0, high,
                               xtol=xtol))


def default_guesses(num_candidates: int) -> int:
  """Default k+ = k-: 5% of the candidates (at least 1) on each side."""
  return max(1, int(round(0.05 * num_candidates)))


def one_run_bound(statistics: npt.ArrayLike, inserted_mask: npt.ArrayLike, *,
                  delta: float, k_plus: Optional[int] = None,
                  k_minus: Optional[int] = None,
                  confidence: float = 0.95) -> results.OneRunBound:
  """The one-run lower bound of Steinke, Nasr & Jagielski (2023).

  Args:
    statistics: 1-D array, one finite statistic per candidate canary
      (cosines, or any score: only their order is used).
    inserted_mask: 1-D bool array of the same length: which candidates the
      fair coins inserted.
    delta: delta in [0, 1) (0 allowed: the pure-DP bound).
    k_plus: how many top statistics to guess "in"; fixed before looking at
      the statistics. Default `default_guesses(m)`.
    k_minus: how many bottom statistics to guess "out"; likewise.
    confidence: the bound holds with this probability, in (0, 1).

  Returns:
    A `OneRunBound`.
  """
  s, mask = threshold_strategies.check_coin_inputs(statistics, inserted_mask)
  delta = validation.as_float(delta, "delta")
  if not 0.0 <= delta < 1.0:
    raise ValueError(f"delta must lie in [0, 1), got {delta}.")
  confidence = validation.as_open_unit(confidence, "confidence")
  m = s.size
  k_plus, k_minus = threshold_strategies.check_guesses(
      k_plus, k_minus, m, default_guesses(m))
  guesses, correct = threshold_strategies.guess_counts(s, mask, k_plus,
                                                       k_minus)
  alpha = 1.0 - confidence
  below = threshold_strategies.sign_check(s, mask)

  def bound(right):  # p rises with eps, to 1
    return largest_rejected(
        lambda eps: one_run_p_value(eps, guesses, right, m, delta) - alpha,
        lambda excess: excess <= 0.0, 1e-12)

  epsilon, ceiling = bound(correct), bound(guesses)
  return results.OneRunBound(
      epsilon=epsilon, num_candidates=m, num_inserted=int(mask.sum()),
      k_plus=k_plus, k_minus=k_minus, guesses=guesses, correct=correct,
      ceiling=ceiling, delta=delta, confidence=confidence,
      inserted_below_null=below)
