"""epsilon-all from a model of each canary's maximum over rounds (docs/method/estimates.md).

The all-iterates statistic of Andrew et al. (ICLR 2024, arXiv 2302.03098,
Algorithm 3) is m_j = max over the R recorded rounds r of cos(c_j, a_r). A
maximum over rounds is not Gaussian, and the epsilon of Gaussians fitted to
the inserted and held-out maxima (Algorithm 3, `estimates.epsilon_all`) is
not the mechanism's: over five rounds it is below it at large noise and
above it at small noise (docs/method/estimates.md).

The max model. Canary j took part in p_j of the R rounds (p_j = 0 for a
held-out canary). Its R cosines are modelled as independent, N(mu, s^2) in a
round it took part in (the paper's Theorem 3.3) and N(0, s^2) in the others
(the Gaussian limit of the null law, docs/method/null-law.md, as in the
paper's estimators). So the CDF and log density of its max are

  F_j(x) = Phi((x - mu)/s)^p_j Phi(x/s)^(R - p_j),                        (1)
  log f_j(x) = p_j log Phi(u1) + (R - p_j) log Phi(u0) - log s
               + log(p_j h(u1) + (R - p_j) h(u0)),                          (2)

with u0 = x/s, u1 = u0 - theta, theta = mu/s, and h = phi/Phi (computed as
exp(log phi - log Phi) with `scipy.special.log_ndtr`, so no tail underflows).
(theta, s) are fitted by maximum likelihood jointly over inserted and held-out
maxima (Nelder-Mead on (theta, log s) from moment-based starting values,
polished by the profile along theta), with theta >= 0: an inserted canary
cannot lower its own round's cosine under the sign convention
(docs/method/sign-convention.md), and below 0 the likelihood flattens out, so
an unconstrained fit wanders there. A negative unconstrained theta is reported
as epsilon 0 (`inserted_below_null`), and with a `SignConventionWarning` only
when the rank-sum test of the inserted maxima against the held-out ones
rejects at 0.001 (`tff_canary.stats.sign_tests`: exact for maxima, whose law
is not Gaussian). Not theta against s / sqrt(n), as before: the maxima say
little about theta, least below 0, and that warned in 82 of 300 correct runs
with no signal (8 rounds, 23 + 17 canaries; issue 34).

The estimate is the epsilon at `delta` of (theta sqrt(P))-GDP
(`gaussian_accounting.gaussian_epsilon_of_mu`), P = max_j p_j over the
inserted canaries: one round is theta-GDP (Dong, Roth & Su 2019, arXiv
1905.02383, §2; theta = 1/z at noise multiplier z), p rounds compose to
(theta sqrt(p))-GDP (ibid., Cor. 3.3). With P = 1 it is the paper's
"analytical epsilon" (§5.1), for P > 1 `gaussian_accounting.repeated_epsilon`.

Interval: profile likelihood for theta, l_p(theta) = max_s l(theta, s):
{theta >= 0 : 2 (l(theta_hat) - l_p(theta)) <= chi2_1(confidence)} (Wilks;
e.g. Pawitan 2001, "In All Likelihood", §3.4 and §9.4), mapped through
epsilon, which grows with theta. At theta = 0 on the boundary the likelihood
ratio is a 50:50 mixture of chi2_0 and chi2_1 (Self & Liang 1987, JASA
82:605, Case 1), so the chi2_1 cut-off is conservative there. Both ends are
found by bracketing (doubling steps), then Brent's method.

What it does not model: the correlation between two canaries' cosines with
the same round (of order 1/sqrt(d)), and other inserted canaries in the same
aggregate (remove them with `known_canaries`).
"""

from __future__ import annotations

import math

import numpy as np
import numpy.typing as npt
from scipy import optimize, special, stats

from tff_canary.stats.accounting import gaussian_accounting
from tff_canary.stats import options
from tff_canary.stats import results
from tff_canary.stats import sign_tests
from tff_canary.stats import validation

# The method name of this estimate in `results.EpsilonEstimate.method`.
MaxModel = options.MaxModel

_LOG_SQRT_2PI = 0.5 * math.log(2.0 * math.pi)
# log s is profiled within this distance of its maximum-likelihood value.
_LOG_S_SPAN = 3.0
_MAX_DOUBLINGS = 60


def _log_h(u, log_cdf):
  """log(phi(u) / Phi(u)) given log Phi(u): the log inverse Mills ratio."""
  return -0.5 * u * u - _LOG_SQRT_2PI - log_cdf


class _Likelihood:
  """The log likelihood (2) of all maxima, as a function of (theta, log s)."""

  def __init__(self, x, participation, num_rounds):
    self.x = x
    self.p = participation.astype(np.float64)
    self.q = num_rounds - self.p
    with np.errstate(divide="ignore"):
      self.log_p = np.log(self.p)
      self.log_q = np.log(self.q)

  def __call__(self, theta, log_s):
    u0 = self.x * math.exp(-log_s)
    u1 = u0 - theta
    log_cdf1, log_cdf0 = special.log_ndtr(u1), special.log_ndtr(u0)
    log_cdf = self.p * log_cdf1 + self.q * log_cdf0
    log_rate = np.logaddexp(self.log_p + _log_h(u1, log_cdf1),
                            self.log_q + _log_h(u0, log_cdf0))
    value = float(np.sum(log_cdf + log_rate)) - self.x.size * log_s
    return value if math.isfinite(value) else -math.inf

  def profile(self, theta, center):
    """(max over log s of l(theta, log s), its argmax) near `center`."""
    got = optimize.minimize_scalar(
        lambda v: -self(theta, v), method="bounded",
        bounds=(center - _LOG_S_SPAN, center + _LOG_S_SPAN),
        options={"xatol": 1e-10})
    return -float(got.fun), float(got.x)


def _fit(lik, theta0, log_s0):
  """(theta, log s, l_max) maximizing the likelihood over theta >= 0, and
  the unconstrained maximum's theta when it is negative (else None)."""
  got = optimize.minimize(lambda v: -lik(v[0], v[1]), [theta0, log_s0],
                          method="Nelder-Mead",
                          options={"xatol": 1e-9, "fatol": 1e-9,
                                   "maxiter": 4000})
  theta, log_s = float(got.x[0]), float(got.x[1])
  if theta <= 0.0:
    l_max, log_s = lik.profile(0.0, log_s)
    return 0.0, log_s, l_max, (theta if theta < 0.0 else None)
  # Polish along theta on the profile (Nelder-Mead's last steps are coarse).
  step = 1e-3 * (theta + 1.0)
  got = optimize.minimize_scalar(
      lambda t: -lik.profile(t, log_s)[0], method="bounded",
      bounds=(max(0.0, theta - step), theta + step),
      options={"xatol": 1e-12})
  l_max, log_s = lik.profile(float(got.x), log_s)
  return float(got.x), log_s, l_max, None


def _profile_interval(lik, theta_hat, log_s_hat, l_max, drop):
  """{theta >= 0 : l_max - l_p(theta) <= drop}, an interval [low, high]."""
  def excess(theta):
    return l_max - lik.profile(theta, log_s_hat)[0] - drop

  low = 0.0
  if theta_hat > 0.0 and excess(0.0) > 0.0:
    low = float(optimize.brentq(excess, 0.0, theta_hat, xtol=1e-10))
  step = 0.1 * theta_hat + 0.05
  inner = theta_hat
  for _ in range(_MAX_DOUBLINGS):
    outer = theta_hat + step
    if excess(outer) > 0.0:
      return low, float(optimize.brentq(excess, inner, outer, xtol=1e-10))
    inner, step = outer, 2.0 * step
  return low, math.inf


def _epsilon(theta, participations, delta):
  return gaussian_accounting.gaussian_epsilon_of_mu(
      theta * math.sqrt(participations), delta)


def _check_participation(values, size, num_rounds):
  counts = validation.as_counts(values, "inserted_participation",
                                maximum=num_rounds)
  if counts.size != size:
    raise ValueError(f"inserted_participation has {counts.size} entries but "
                     f"inserted has {size}; give one count per inserted "
                     "canary.")
  if counts.max() == 0:
    raise ValueError("inserted_participation is 0 for every inserted canary: "
                     "none took part in a recorded round, so the max model "
                     "has nothing to estimate.")
  return counts


def epsilon_all_max_model(inserted: npt.ArrayLike, held_out: npt.ArrayLike, *,
                          inserted_participation: npt.ArrayLike,
                          num_rounds: int, delta: float,
                          confidence: float = 0.95
                          ) -> results.EpsilonEstimate:
  """epsilon-all of the mechanism from max-over-rounds cosines (module docstring).

  Args:
    inserted: 1-D array of m_j = max over the R recorded rounds of cos(c_j,
      a_r) for the inserted canaries, at least 2, in [-1, 1].
    held_out: the same for the held-out canaries (never inserted), at least 2.
    inserted_participation: for each inserted canary, the number p_j of the
      recorded rounds it took part in, integers in [0, num_rounds], at least
      one positive.
    num_rounds: R >= 1, the number of recorded rounds the maxima are over.
    delta: the delta at which epsilon is computed, in (0, 1).
    confidence: level of the profile-likelihood interval, in (0, 1).

  Returns:
    An `EpsilonEstimate` with statistic "all", method "max_model" and
    interval_method "profile": epsilon of (theta sqrt(P))-GDP, P =
    `participations` the largest p_j; `mu` holds theta (per participation),
    null_std and inserted_std the fitted s, inserted_mean theta s. Warns
    `SignConventionWarning` if theta < 0 and the inserted maxima are
    significantly below the held-out ones (module docstring).

  Raises:
    TypeError, ValueError: for a bad argument, naming it.
  """
  x = validation.as_cosines(inserted, "inserted")
  y = validation.as_cosines(held_out, "held_out")
  num_rounds = validation.as_int(num_rounds, "num_rounds", minimum=1)
  counts = _check_participation(inserted_participation, x.size, num_rounds)
  delta, confidence = validation.as_levels(delta, confidence)
  validation.check_spread(x, "inserted")
  validation.check_spread(y, "held_out")

  lik = _Likelihood(np.concatenate([x, y]),
                    np.concatenate([counts, np.zeros(y.size, np.int64)]),
                    num_rounds)
  # Start: s from the held-out maxima's spread, theta from the mean gap.
  s0 = float(y.std(ddof=1))
  theta0 = (float(x.mean()) - float(y.mean())) / s0
  theta, log_s, l_max, negative = _fit(lik, theta0, math.log(s0))
  s = math.exp(log_s)
  below = negative is not None
  if below:  # the same test and text as `estimates.epsilon_all`'s
    sign_tests.warn_if_below(x, y, reference_name="held-out canaries' mean")
  drop = 0.5 * float(stats.chi2.ppf(confidence, 1))
  low, high = _profile_interval(lik, theta, log_s, l_max, drop)
  big = int(counts.max())
  interval = results.ConfidenceInterval(_epsilon(low, big, delta),
                                        _epsilon(high, big, delta))
  return results.EpsilonEstimate(
      epsilon=_epsilon(theta, big, delta), interval=interval, statistic="all",
      method="max_model", delta=delta, confidence=confidence,
      num_inserted=x.size, num_held_out=y.size, dim=None, null_mean=0.0,
      null_std=s, inserted_mean=theta * s, inserted_std=s,
      sample_std=float(x.std(ddof=1)), inserted_below_null=below,
      interval_method="profile", num_rounds=num_rounds, participations=big,
      mu=theta)


__all__ = ["MaxModel", "epsilon_all_max_model"]
