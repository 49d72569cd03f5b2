"""The one-sided tests behind `results.SignConventionWarning` (docs/method/sign-convention.md).

Under the sign convention a correct run's inserted canaries have statistics
at least as large as the reference's (the null, or the held-out canaries):
an inserted canary can only raise the cosines of its own rounds. The warning
fires when a one-sided test rejects that at level `SIGN_TEST_LEVEL`, so a
correct run gets it with probability at most that level; both tests are
exact when the canaries are drowned by noise, the boundary:

* `one_sample_p`, against the exact null, whose mean is 0 (final-model
  cosines, the scheduled T with the exact null): Student's t-test,
  p = F_{n-1}(sqrt(n) mean(x) / sd(x)), F_{n-1} the t law on n - 1 degrees
  of freedom (Student 1908, Biometrika 6:1). The inserted x_j are Gaussian
  (Andrew et al. 2024, Theorem 3.3) of mean mu >= 0, any variance: exact at
  mu = 0; for equal mu > 0, (Z + mu sqrt(n) / sigma) / sqrt(V / (n - 1))
  grows with mu for every (Z, V), so p < level is rarer. With unequal means
  (canaries of different participations) it is measured
  (tests/stats/test_sign_tests.py). The normal quantile with the sample sd
  instead (the check before) fired at mu = 0 in about 0.27% of runs of
  n = 23 and 1.8% of n = 5 (measured there too).
* `two_sample_p`, inserted x against held-out y (maxima over rounds, the
  scheduled T, any score): the rank-sum test of Mann & Whitney (1947, Ann.
  Math. Stat. 18:50) on U = #{(i, k): x_i > y_k} (+ 1/2 per tie),
  p = P(U <= u). Distribution-free: with no signal the n1 + n2 statistics
  are exchangeable, every split of their ranks equally likely, so U has the
  exact law below whatever the statistic's law (a maximum over rounds is
  not Gaussian). A correct run's inserted x_i are stochastically at least
  the held-out law F (a maximum is nondecreasing in its canary's rounds,
  which the canary shifts up): coupled as x_i >= F^-1(V_i), V_i uniform,
  and U nondecreasing in every x_i, its U is at least a null U, so
  P(p < level) <= level. The max model's check before (its fitted theta
  against s / sqrt(n)) fired in 82 of 300 runs of 23 + 17 canaries over 8
  rounds with no signal (issue 34's simulation): the maxima say far less
  about theta.
  Both assume independent canaries (their correlation is of order
  1/sqrt(d)).

The exact law of U (no ties): an arrangement with U = u is a partition of u
into at most n1 parts (each x_i's count of y below it) each at most n2,
counted by the coefficient of q^u in the Gaussian binomial coefficient
[N choose k]_q = prod_{i=1}^{k} (1 - q^{N-k+i}) / (1 - q^i), N = n1 + n2,
k = min(n1, n2) (Andrews 1976, The Theory of Partitions, Thm 3.1);
`_rank_cdf` computes it in integers, in k^2 (N - k) steps. Beyond
`_EXACT_COST` of them, or with ties: the normal approximation with a
continuity correction and the tie-corrected variance
n1 n2 / 12 (N + 1 - sum(t^3 - t) / (N (N - 1))), t the sizes of tied runs
(Lehmann 1975, Nonparametrics, Ch. 1). It is conservative in the tail: its
p is at least the exact one wherever that is <= 0.01, for every n1 <= 50
and n2 <= 50 or in {100, 200, 500} with n1 n2 <= 10^4 (measured at this
commit; tests/stats/test_sign_tests.py checks a grid).

Both tests take trials along leading axes (statistics on the last), so
simulations of many runs are vectorized.
"""

from __future__ import annotations

import functools
import math
import warnings

import numpy as np
import numpy.typing as npt
from scipy import special, stats

from tff_canary.stats import call_site
from tff_canary.stats import results

# The one-sided level at which an inserted mean below its reference is
# evidence of a sign error rather than chance (canaries drowned by noise in a
# correct run sit below it half the time).
SIGN_TEST_LEVEL = 1e-3
# The tests' names in the warning.
ONE_SAMPLE_TEST = "Student's t-test"
TWO_SAMPLE_TEST = "the Mann-Whitney rank-sum test"
# The exact law of U when its cost k^2 (N - k) is at most this (50 x 50, or
# 2 x 31,250: at most about 50 ms, once per pair of sizes).
_EXACT_COST = 125_000


def one_sample_p(x: npt.ArrayLike) -> np.ndarray | float:
  """One-sided p of "mean(x) >= 0" (module docstring), per row of the last
  axis (at least 2 values, not all equal)."""
  x = np.asarray(x, dtype=np.float64)
  n = x.shape[-1]
  t = x.mean(axis=-1) * math.sqrt(n) / x.std(axis=-1, ddof=1)
  return special.stdtr(n - 1, t)


@functools.lru_cache(maxsize=32)
def _rank_cdf(n1: int, n2: int) -> np.ndarray:
  """P(U <= u), u = 0 .. n1 n2, for U of the rank-sum test without ties."""
  k, n = min(n1, n2), n1 + n2
  top = k * (n - k)
  size = top + k + 1
  c = np.zeros(size, dtype=object)  # Python integers: exact
  c[0] = 1
  for i in range(1, k + 1):  # times (1 - q^a), then divided by (1 - q^i)
    a = n - k + i
    c[a:] = c[a:] - c[:size - a]
    # c_j += c_{j-i}: a running sum down each column of width i.
    c = np.concatenate([c, np.zeros(-size % i, dtype=object)]).reshape(
        -1, i).cumsum(axis=0).ravel()[:size]
  total = math.comb(n, k)
  return np.array([float(v) / total for v in np.cumsum(c[:top + 1])])


def two_sample_p(x: npt.ArrayLike, y: npt.ArrayLike) -> np.ndarray | float:
  """One-sided p of "x is stochastically at least y" (module docstring),
  per row of the last axes (leading axes broadcast)."""
  x, y = np.asarray(x, dtype=np.float64), np.asarray(y, dtype=np.float64)
  n1, n2 = x.shape[-1], y.shape[-1]
  n, k = n1 + n2, min(n1, n2)
  lead = np.broadcast_shapes(x.shape[:-1], y.shape[:-1])
  z = np.concatenate([np.broadcast_to(x, lead + (n1,)),
                      np.broadcast_to(y, lead + (n2,))],
                     axis=-1).reshape(-1, n)
  order = np.argsort(z, axis=-1)
  ranks = np.empty(z.shape)
  np.put_along_axis(ranks, order, np.arange(1.0, n + 1.0), axis=-1)
  ordered = np.take_along_axis(z, order, axis=-1)
  tied = (ordered[:, 1:] == ordered[:, :-1]).any(axis=-1)
  ties = np.zeros(z.shape[0])
  for row in np.flatnonzero(tied):  # rare: midranks, tied runs of sizes t
    ranks[row] = stats.rankdata(z[row])
    _, t = np.unique(z[row], return_counts=True)
    ties[row] = float(np.sum(t**3 - t))
  u = ranks[:, :n1].sum(axis=-1) - n1 * (n1 + 1) / 2
  var = n1 * n2 / 12.0 * (n + 1 - ties / (n * (n - 1)))
  with np.errstate(divide="ignore", invalid="ignore"):
    p = special.ndtr((u - n1 * n2 / 2.0 + 0.5) / np.sqrt(var))
  p = np.where(var > 0.0, p, 1.0)  # every value tied: no evidence
  if k * k * (n - k) <= _EXACT_COST:
    exact = _rank_cdf(n1, n2)[np.rint(u).astype(np.int64)]
    p = np.where(tied, p, exact)
  p = p.reshape(lead)
  return float(p) if p.ndim == 0 else p


def warn_if_below(inserted: np.ndarray, reference: np.ndarray | None, *,
                  reference_name: str,
                  what: str = "inserted canaries'") -> bool:
  """Warns `results.SignConventionWarning` at the user's call when the
  inserted mean is below the reference's (mean 0 for reference None) and the
  test of the module docstring gives p < `SIGN_TEST_LEVEL` (one-sample
  against 0 for None, else the rank-sum test). Returns whether it warned."""
  mean = float(np.mean(inserted))
  ref_mean = 0.0 if reference is None else float(np.mean(reference))
  if not mean < ref_mean:
    return False
  if reference is None:
    p, test = float(one_sample_p(inserted)), ONE_SAMPLE_TEST
  else:
    p, test = float(two_sample_p(inserted, reference)), TWO_SAMPLE_TEST
  if not p < SIGN_TEST_LEVEL:
    return False
  warnings.warn(
      f"The {what} mean statistic ({mean:.4g}) is below the {reference_name} "
      f"({ref_mean:.4g}), and {test} gives p = {p:.2g} (one-sided): a "
      f"correct run gives a p below {SIGN_TEST_LEVEL:g} with probability at "
      f"most {SIGN_TEST_LEVEL:g}. Inserted canaries should have a "
      "positive mean with u = theta_0 - theta_T (or the round's noised "
      "aggregate): check that the model delta is initial minus final and "
      "that the aggregates are not negated (docs/method/sign-convention.md). "
      "The epsilon reported for it is not meaningful.",
      results.SignConventionWarning, stacklevel=call_site.user_stacklevel())
  return True
