"""Point estimates of epsilon from canary statistics (METHOD §7).

epsilon-final (Andrew et al. 2024, Algorithm 2). The final-model threat model:
x_j = cos(c_j, theta_0 - theta_T) for the inserted canaries. Without the canary,
x_j would follow the null law of METHOD §5, whose Gaussian limit is N(0, 1/d).
Fit N(mu, sigma^2) to the x_j; epsilon-final is the epsilon of the two Gaussians
N(0, 1/d) and N(mu, sigma^2) at delta (METHOD §6). Two variants:

  * "fitted_variance": mu and sigma are the sample mean and standard deviation
    (the paper's Algorithm 2). Epsilon is very sensitive to the variance ratio:
    at delta = 1e-6 a ratio of 1.02 alone moves epsilon = 1 to about 1.4, and
    with 1000 canaries the sampling noise of sigma-hat (about 2%) biases the
    estimate upward.
  * "mean_only": mu is the sample mean and sigma^2 = 1/d, the null's (Theorem
    3.3 of the paper shows the inserted canaries' variance tends to the null's
    for the Gaussian mechanism). Unbiased there; wrong when the inserted
    canaries' variance truly differs, which `VarianceMismatchWarning` flags.

epsilon-all (Algorithm 3). The all-iterates threat model: m_j = max over rounds
of cos(c_j, a_t), for inserted and held-out canaries; the null has no closed
form, so Gaussians are fitted to both groups and epsilon-all is their epsilon.

These are estimates, not bounds: `lower_bounds` has the statements that hold
with a stated confidence.

NumPy/SciPy only.
"""

from __future__ import annotations

import warnings

import numpy as np
from scipy import stats

from tff_canary import results
from tff_canary import two_gaussians
from tff_canary import validation

METHODS = ("mean_only", "fitted_variance")
# A variance ratio this improbable under the null variance (two-sided chi^2
# test) triggers VarianceMismatchWarning for the mean-only variant.
_VARIANCE_TEST_LEVEL = 1e-3


def _check_common(delta, confidence, n_bootstrap, seed):
  delta = validation.as_open_unit(delta, "delta")
  confidence = validation.as_open_unit(confidence, "confidence")
  n_bootstrap = validation.as_int(n_bootstrap, "n_bootstrap", minimum=10)
  if seed is not None:
    seed = validation.as_int(seed, "seed", minimum=0)
  return delta, confidence, n_bootstrap, seed


def _warn_sign(group: str, mean: float, reference: str, ref_mean: float):
  warnings.warn(
      f"The {group} canaries' mean statistic ({mean:.4g}) is below the "
      f"{reference} ({ref_mean:.4g}). Inserted canaries should have a "
      "positive mean with u = theta_0 - theta_T (or the round's noised "
      "aggregate); this is almost always a sign-convention bug (METHOD §3), "
      "and the epsilon reported for it is not meaningful.",
      results.SignConventionWarning, stacklevel=3)


def _bootstrap_std(rng, std, n, size):
  """Parametric bootstrap draws of a sample std: std * sqrt(chi2(n-1)/(n-1))."""
  return std * np.sqrt(rng.chisquare(n - 1, size=size) / (n - 1))


def _percentile_interval(draws, confidence):
  tail = (1.0 - confidence) / 2.0
  low, high = np.quantile(draws, [tail, 1.0 - tail])
  return results.ConfidenceInterval(float(low), float(high))


def epsilon_final(inserted, *, dim, delta, method: str = "mean_only",
                  confidence: float = 0.95, n_bootstrap: int = 1000,
                  seed: int | None = 0) -> results.EpsilonEstimate:
  """epsilon-final from the inserted canaries' final-model cosines.

  Args:
    inserted: 1-D array of x_j = cos(c_j, theta_0 - theta_T), at least 2,
      finite, in [-1, 1].
    dim: the model dimension d (number of trainable parameters), >= 2.
    delta: the delta at which epsilon is computed, in (0, 1).
    method: "mean_only" (default; keeps the null variance 1/d) or
      "fitted_variance" (the paper's Algorithm 2). See the module docstring.
    confidence: level of the interval, in (0, 1).
    n_bootstrap: parametric bootstrap size for the fitted-variance interval.
    seed: seed of the bootstrap (None for fresh entropy).

  Returns:
    An `EpsilonEstimate`. Warns `SignConventionWarning` if the inserted mean is
    negative and, for "mean_only", `VarianceMismatchWarning` if the sample
    variance is inconsistent with 1/d.
  """
  x = validation.as_cosines(inserted, "inserted")
  dim = validation.as_dim(dim)
  method = validation.as_choice(method, "method", METHODS)
  delta, confidence, n_bootstrap, seed = _check_common(
      delta, confidence, n_bootstrap, seed)
  validation.check_spread(x, "inserted")

  n = x.size
  null_std = 1.0 / np.sqrt(dim)
  mean, sample_std = float(x.mean()), float(x.std(ddof=1))
  below = mean < 0.0
  if below:
    _warn_sign("inserted", mean, "null mean", 0.0)

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
          results.VarianceMismatchWarning, stacklevel=2)
    epsilon = two_gaussians.epsilon_for_delta(delta, 0.0, null_std, mean,
                                              null_std)
    # epsilon grows with |mu|: map the t-interval of the mean through it.
    half = stats.t.ppf(0.5 + confidence / 2.0, n - 1) * sample_std / np.sqrt(n)
    lo_mu, hi_mu = mean - half, mean + half
    near = 0.0 if lo_mu <= 0.0 <= hi_mu else min(abs(lo_mu), abs(hi_mu))
    far = max(abs(lo_mu), abs(hi_mu))
    ends = two_gaussians.epsilon_for_delta_many(
        delta, 0.0, null_std, np.array([near, far]), null_std)
    interval = results.ConfidenceInterval(
        0.0 if near == 0.0 else float(ends[0]), float(ends[1]))
    used_bootstrap, used_seed = 0, None
  else:
    fitted_std = sample_std
    epsilon = two_gaussians.epsilon_for_delta(delta, 0.0, null_std, mean,
                                              sample_std)
    rng = np.random.default_rng(seed)
    mu_draws = mean + sample_std / np.sqrt(n) * rng.standard_normal(n_bootstrap)
    std_draws = _bootstrap_std(rng, sample_std, n, n_bootstrap)
    draws = two_gaussians.epsilon_for_delta_many(delta, 0.0, null_std,
                                                 mu_draws, std_draws)
    interval = _percentile_interval(draws, confidence)
    used_bootstrap, used_seed = n_bootstrap, seed

  return results.EpsilonEstimate(
      epsilon=epsilon, interval=interval, statistic="final", method=method,
      delta=delta, confidence=confidence, num_inserted=n, num_held_out=0,
      dim=dim, null_mean=0.0, null_std=float(null_std), inserted_mean=mean,
      inserted_std=float(fitted_std), sample_std=sample_std,
      inserted_below_null=below, n_bootstrap=used_bootstrap, seed=used_seed)


def epsilon_all(inserted, held_out, *, delta, confidence: float = 0.95,
                n_bootstrap: int = 1000,
                seed: int | None = 0) -> results.EpsilonEstimate:
  """epsilon-all from max-over-rounds cosines of inserted and held-out canaries.

  Args:
    inserted: 1-D array of m_j = max_t cos(c_j, a_t) for inserted canaries.
    held_out: the same statistic for held-out canaries (never inserted): the
      empirical null.
    delta: the delta at which epsilon is computed, in (0, 1).
    confidence: level of the bootstrap interval, in (0, 1).
    n_bootstrap: parametric bootstrap size.
    seed: seed of the bootstrap (None for fresh entropy).

  Returns:
    An `EpsilonEstimate` with statistic "all" and method "fitted_variance".
  """
  x = validation.as_cosines(inserted, "inserted")
  y = validation.as_cosines(held_out, "held_out")
  delta, confidence, n_bootstrap, seed = _check_common(
      delta, confidence, n_bootstrap, seed)
  validation.check_spread(x, "inserted")
  validation.check_spread(y, "held_out")

  mean1, std1 = float(x.mean()), float(x.std(ddof=1))
  mean0, std0 = float(y.mean()), float(y.std(ddof=1))
  below = mean1 < mean0
  if below:
    _warn_sign("inserted", mean1, "held-out canaries' mean", mean0)
  epsilon = two_gaussians.epsilon_for_delta(delta, mean0, std0, mean1, std1)

  rng = np.random.default_rng(seed)
  n1, n0 = x.size, y.size
  draws = two_gaussians.epsilon_for_delta_many(
      delta,
      mean0 + std0 / np.sqrt(n0) * rng.standard_normal(n_bootstrap),
      _bootstrap_std(rng, std0, n0, n_bootstrap),
      mean1 + std1 / np.sqrt(n1) * rng.standard_normal(n_bootstrap),
      _bootstrap_std(rng, std1, n1, n_bootstrap))

  return results.EpsilonEstimate(
      epsilon=epsilon, interval=_percentile_interval(draws, confidence),
      statistic="all", method="fitted_variance", delta=delta,
      confidence=confidence, num_inserted=n1, num_held_out=n0, dim=None,
      null_mean=mean0, null_std=std0, inserted_mean=mean1, inserted_std=std1,
      sample_std=std1, inserted_below_null=below, n_bootstrap=n_bootstrap,
      seed=seed)
