"""Point estimates of epsilon from canary statistics (docs/method/estimates.md).

epsilon-final (Andrew et al. 2024, Algorithm 2). The final-model threat model:
x_j = cos(c_j, theta_0 - theta_T) for the inserted canaries. Without the canary,
x_j would follow the null law of docs/method/null-law.md, whose Gaussian limit is N(0, 1/d).
Fit N(mu, sigma^2) to the x_j; epsilon-final is the epsilon of the two Gaussians
N(0, 1/d) and N(mu, sigma^2) at delta (docs/method/two-gaussians.md). Two variants
(docs/method/estimates.md, "Which variant to trust"): "fitted_variance", mu
and sigma the sample mean and standard deviation (the paper's Algorithm 2),
and "mean_only", sigma^2 = 1/d, the null's (the paper's Theorem 3.3 for the
Gaussian mechanism; `VarianceMismatchWarning` when the sample disagrees).

epsilon-all (Algorithm 3). The all-iterates threat model: m_j = max over rounds
of cos(c_j, a_t), for inserted and held-out canaries; the null has no closed
form, so Gaussians are fitted to both groups and epsilon-all is their epsilon.

Intervals. For the mean-only variant, epsilon grows with |mu|, so the t-interval
of the mean maps to an exact interval for epsilon. For fitted Gaussians the
interval is a projection: the range of epsilon over a joint confidence region
of the fitted parameters, the product of a t-interval for each mean and a
chi-square interval for each standard deviation, each at level
confidence^(1/k) for k parameters (the sample mean and std of a Gaussian sample
are independent, so the region has exactly the stated joint level). It covers
the epsilon of the true Gaussians with probability at least `confidence`
(a percentile bootstrap does not: epsilon is so nonlinear in the variance
ratio, with a cusp at equal variances, that it undercovers).

These are estimates, not bounds: `lower_bounds` has the statements that hold
with a stated confidence.
"""

from __future__ import annotations

import typing
import warnings

import numpy as np
import numpy.typing as npt
from scipy import stats

from tff_canary.stats import call_site
from tff_canary.stats import options
from tff_canary.stats import results
from tff_canary.stats import sign_tests
from tff_canary.stats.estimators import two_gaussians
from tff_canary.stats import validation

# The option types (defined in `options`, re-exported here).
Method = options.Method
METHODS = typing.get_args(Method)
Statistic = options.Statistic
IntervalMethod = options.IntervalMethod
# A variance ratio this improbable under the null variance (two-sided chi^2
# test) triggers VarianceMismatchWarning for the mean-only variant.
_VARIANCE_TEST_LEVEL = 1e-3

# Grid sizes for the projection interval (per standard deviation / mean).
_STD_GRID = 25
_STD_GRID_PAIRED = 11
_MEAN_GRID = 5


def _mean_interval(x, level):
  """t-interval of the mean at `level`."""
  half = (stats.t.ppf(0.5 + level / 2.0, x.size - 1) * x.std(ddof=1)
          / np.sqrt(x.size))
  return x.mean() - half, x.mean() + half


def _std_interval(x, level):
  """chi-square interval of the standard deviation at `level`."""
  n, var = x.size, x.var(ddof=1)
  chi2 = stats.chi2(n - 1)
  tail = (1.0 - level) / 2.0
  return (np.sqrt((n - 1) * var / chi2.isf(tail)),
          np.sqrt((n - 1) * var / chi2.ppf(tail)))


def _std_grid(low, high, size, *extra):
  """A geometric grid over [low, high] plus the given points inside it."""
  inside = [v for v in extra if low < v < high]
  return np.concatenate([np.geomspace(low, high, size), inside])


def _mean_values(low, high):
  """Mean values to try: the interval's ends, points between, and 0 if inside."""
  values = list(np.linspace(low, high, _MEAN_GRID))
  if low < 0.0 < high:
    values.append(0.0)
  return np.array(values)


def _projection_interval(delta, mean_diffs, sigma_pairs):
  """(min, max) of epsilon(N(0, s0^2), N(diff, s1^2)) over diffs x pairs."""
  diffs = np.repeat(mean_diffs, len(sigma_pairs))
  pairs = np.tile(np.asarray(sigma_pairs), (len(mean_diffs), 1))
  eps = two_gaussians.epsilon_for_delta_many(delta, 0.0, pairs[:, 0], diffs,
                                             pairs[:, 1])
  return results.ConfidenceInterval(float(eps.min()), float(eps.max()))


def _sigma_pairs(range0, range1):
  """Grid pairs (s0, s1) over two std intervals, plus pairs s0 == s1 where
  they overlap: epsilon has a cusp at equal variances."""
  grid0 = _std_grid(*range0, _STD_GRID_PAIRED)
  grid1 = _std_grid(*range1, _STD_GRID_PAIRED)
  pairs = [(a, b) for a in grid0 for b in grid1]
  low, high = max(range0[0], range1[0]), min(range0[1], range1[1])
  if low < high:
    pairs += [(v, v) for v in np.geomspace(low, high, _STD_GRID_PAIRED)]
  return pairs


def epsilon_final(inserted: npt.ArrayLike, *, dim: int, delta: float,
                  method: Method = "mean_only",
                  confidence: float = 0.95) -> results.EpsilonEstimate:
  """epsilon-final from the inserted canaries' final-model cosines.

  Args:
    inserted: 1-D array of x_j = cos(c_j, theta_0 - theta_T), at least 2,
      finite, in [-1, 1].
    dim: the model dimension d (number of trainable parameters), >= 2.
    delta: the delta at which epsilon is computed, in (0, 1).
    method: "mean_only" (default; keeps the null variance 1/d) or
      "fitted_variance" (the paper's Algorithm 2). See the module docstring.
    confidence: level of the interval, in (0, 1).

  Returns:
    An `EpsilonEstimate`. Warns `SignConventionWarning` if the inserted mean is
    negative and, for "mean_only", `VarianceMismatchWarning` if the sample
    variance is inconsistent with 1/d.
  """
  x = validation.as_cosines(inserted, "inserted")
  dim = validation.as_dim(dim)
  method = validation.as_choice(method, "method", METHODS)
  delta, confidence = validation.as_levels(delta, confidence)
  validation.check_spread(x, "inserted")

  n = x.size
  null_std = 1.0 / np.sqrt(dim)
  mean, sample_std = float(x.mean()), float(x.std(ddof=1))
  below = mean < 0.0
  sign_tests.warn_if_below(x, None, reference_name="null mean")

  if method == "mean_only":
    fitted_std = null_std
    ratio = (sample_std / null_std) ** 2
    chi2 = stats.chi2(n - 1)
    p_value = 2.0 * min(chi2.cdf((n - 1) * ratio), chi2.sf((n - 1) * ratio))
    if p_value < _VARIANCE_TEST_LEVEL:
      warnings.warn(
          f"The inserted canaries' variance is {ratio:.3g} times the null's "
          f"1/dim (two-sided chi-square p = {p_value:.2g}, n = {n}); the "
          "mean-only epsilon-final assumes they are equal. Read the "
          "fitted-variance estimate too.",
          results.VarianceMismatchWarning,
          stacklevel=call_site.user_stacklevel())
    epsilon = two_gaussians.epsilon_for_delta(delta, 0.0, null_std, mean,
                                              null_std)
    # epsilon grows with |mu|: map the t-interval of the mean through it.
    lo_mu, hi_mu = _mean_interval(x, confidence)
    near = 0.0 if lo_mu <= 0.0 <= hi_mu else min(abs(lo_mu), abs(hi_mu))
    far = max(abs(lo_mu), abs(hi_mu))
    ends = two_gaussians.epsilon_for_delta_many(
        delta, 0.0, null_std, np.array([near, far]), null_std)
    interval = results.ConfidenceInterval(float(ends[0]), float(ends[1]))
    interval_method = "t"
  else:
    fitted_std = sample_std
    epsilon = two_gaussians.epsilon_for_delta(delta, 0.0, null_std, mean,
                                              sample_std)
    level = confidence ** 0.5  # two parameters: mu and sigma
    sigma_pairs = [(null_std, v) for v in
                   _std_grid(*_std_interval(x, level), _STD_GRID, null_std)]
    interval = _projection_interval(
        delta, _mean_values(*_mean_interval(x, level)), sigma_pairs)
    interval_method = "projection"

  return results.EpsilonEstimate(
      epsilon=epsilon, interval=interval, statistic="final", method=method,
      delta=delta, confidence=confidence, num_inserted=n, num_held_out=0,
      dim=dim, null_mean=0.0, null_std=float(null_std), inserted_mean=mean,
      inserted_std=float(fitted_std), sample_std=sample_std,
      inserted_below_null=below, interval_method=interval_method)


def epsilon_all(inserted: npt.ArrayLike, held_out: npt.ArrayLike, *,
                delta: float,
                confidence: float = 0.95) -> results.EpsilonEstimate:
  """epsilon-all from max-over-rounds cosines of inserted and held-out canaries.

  Args:
    inserted: 1-D array of m_j = max_t cos(c_j, a_t) for inserted canaries.
    held_out: the same statistic for held-out canaries (never inserted): the
      empirical null.
    delta: the delta at which epsilon is computed, in (0, 1).
    confidence: level of the (projection) interval, in (0, 1).

  Returns:
    An `EpsilonEstimate` with statistic "all" and method "fitted_variance".
  """
  x = validation.as_cosines(inserted, "inserted")
  y = validation.as_cosines(held_out, "held_out")
  delta, confidence = validation.as_levels(delta, confidence)
  validation.check_spread(x, "inserted")
  validation.check_spread(y, "held_out")

  mean1, std1 = float(x.mean()), float(x.std(ddof=1))
  mean0, std0 = float(y.mean()), float(y.std(ddof=1))
  below = mean1 < mean0
  sign_tests.warn_if_below(x, y, reference_name="held-out canaries' mean")
  epsilon = two_gaussians.epsilon_for_delta(delta, mean0, std0, mean1, std1)

  level = confidence ** 0.25  # four parameters
  lo0, hi0 = _mean_interval(y, level)
  lo1, hi1 = _mean_interval(x, level)
  # Epsilon depends on the means only through mu1 - mu0, which lies in
  # [lo1 - hi0, hi1 - lo0] whenever both means lie in their intervals.
  interval = _projection_interval(
      delta, _mean_values(lo1 - hi0, hi1 - lo0),
      _sigma_pairs(_std_interval(y, level), _std_interval(x, level)))

  return results.EpsilonEstimate(
      epsilon=epsilon, interval=interval,
      statistic="all", method="fitted_variance", delta=delta,
      confidence=confidence, num_inserted=x.size, num_held_out=y.size, dim=None,
      null_mean=mean0, null_std=std0, inserted_mean=mean1, inserted_std=std1,
      sample_std=std1, inserted_below_null=below,
      interval_method="projection")
