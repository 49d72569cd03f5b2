"""Exact epsilon and delta of the Gaussian mechanism, used once or r times.

The accounting side of docs/method/accounting.md for Gaussian releases without
amplification: the epsilon that the accounting promises, to be compared with
the epsilon that the canaries measure. NumPy and SciPy only.

One use of the Gaussian mechanism. A query with L2 sensitivity 1 released with
N(0, z^2 I) noise (z = `noise_multiplier`) is (epsilon, delta)-DP if and only if

  delta >= delta_z(epsilon)
        = Phi(1/(2z) - epsilon z) - e^epsilon Phi(-1/(2z) - epsilon z),

where Phi is the standard normal CDF (Balle & Wang 2018, "Improving the
Gaussian Mechanism for Differential Privacy: Analytical Calibration and Optimal
Denoising", ICML, Theorem 8). Equivalently the mechanism is mu-GDP with
mu = 1/z, and delta_z is the (epsilon, delta) curve of mu-GDP (Dong, Roth & Su
2022, "Gaussian Differential Privacy", JRSS-B, Theorem 2.7 and Corollary 2.13).
delta_z decreases in epsilon from delta_z(0) = erf(1/(2 sqrt(2) z)) to 0, so the
exact epsilon is 0 when delta >= delta_z(0) and otherwise the unique root of
delta_z(epsilon) = delta, which this module brackets and then finds with Brent's
method to full double precision. This is the paper's "analytical epsilon"
(Andrew et al. 2024, section 5.1 and its footnote: the adversary knows the one
round in which the target took part; no amplification, no composition).

log delta_z is evaluated in log space,

  log delta_z(eps) = log Phi(a) + log(1 - exp(eps + log Phi(b) - log Phi(a))),
  a = 1/(2z) - eps z,  b = -1/(2z) - eps z,

with `scipy.special.log_ndtr`, rather than by dp_accounting's
`GaussianPrivacyLoss(z, 1).get_delta_for_epsilon` (the same formula, with
Phi(a) in linear space: wrong below the smallest normal double, and slower;
docs/benchmarks.md, "Gaussian and Poisson accounting"). The tests check
agreement with it and with mpmath.

r participations without amplification compose to one Gaussian mechanism
with z / sqrt(r) (`effective_noise`; Dong, Roth & Su 2022, Corollary 3.3), so
their epsilon is gaussian_epsilon(z / sqrt(r)), exactly (`repeated_epsilon`).
"""

from __future__ import annotations

import math

import numpy as np
from scipy import optimize, special

from tff_canary.stats import validation

_BRENT_RTOL = 4 * np.finfo(float).eps
_BRENT_XTOL = 1e-300
_BRENT_MAXITER = 500
_MAX_BRACKET_STEPS = 2100  # 2^2100 spans every double from tiny to huge.


def _log_gaussian_delta(mu: float, epsilon: float) -> float:
  """log delta_z(epsilon) of the module docstring, for mu = 1/z; -inf where
  delta underflows or rounds to zero."""
  if epsilon == math.inf:
    return -math.inf
  a = 0.5 * mu - epsilon / mu
  b = -0.5 * mu - epsilon / mu
  log_first = float(special.log_ndtr(a))
  if log_first == -math.inf:
    return -math.inf
  gap = epsilon + float(special.log_ndtr(b)) - log_first
  if not gap < 0.0:  # Rounding when delta is far below both terms.
    return -math.inf
  return log_first + math.log(-math.expm1(gap))


def _scale_until(x: float, factor: float, done) -> float:
  """x times factor^k for the first k (at most _MAX_BRACKET_STEPS) with done."""
  for _ in range(_MAX_BRACKET_STEPS):
    if done(x):
      break
    x *= factor
  return x


def gaussian_epsilon_of_mu(mu: float, delta: float) -> float:
  """Exact epsilon of mu-GDP at `delta`; mu = 0 gives 0, mu = inf gives inf.

  For callers that hold a validated mu >= 0 and delta in (0, 1), such as
  `ledger.Ledger`; `gaussian_epsilon` and the others below validate theirs.
  """
  if mu == 0.0:
    return 0.0
  if mu == math.inf:
    return math.inf
  log_delta = math.log(delta)
  # delta_z(0) = erf(mu / (2 sqrt 2)); at or below delta, epsilon is 0.
  if _log_gaussian_delta(mu, 0.0) <= log_delta:
    return 0.0
  # Upper bracket: at eps = mu^2/2 + mu t with Phi(-t) = delta, the first term
  # of delta_z equals delta, so delta_z(eps) < delta.
  t = -float(special.ndtri(delta))
  high = 0.5 * mu * mu + mu * t
  if not math.isfinite(high):
    return math.inf  # epsilon exceeds the largest double.

  def excess(epsilon: float) -> float:
    return _log_gaussian_delta(mu, epsilon) - log_delta

  high = _scale_until(max(high, 1.0), 2.0, lambda h: not math.isfinite(h)
                      or excess(h) <= 0.0)
  if not math.isfinite(high):
    return math.inf
  if excess(high) == 0.0:
    return high
  return float(optimize.brentq(excess, 0.0, high, xtol=_BRENT_XTOL,
                               rtol=_BRENT_RTOL, maxiter=_BRENT_MAXITER))


def mu_of(noise_multiplier: float) -> float:
  """The GDP parameter mu = 1/z of noise multiplier z; 1/0 = inf, 1/inf = 0."""
  if noise_multiplier == 0.0:
    return math.inf
  return 1.0 / noise_multiplier


def gaussian_delta(noise_multiplier: float, epsilon: float) -> float:
  """Exact delta of one use of the Gaussian mechanism at `epsilon`.

  delta_z(epsilon) of the module docstring (Balle & Wang 2018, Theorem 8),
  for sensitivity 1 and noise std z = `noise_multiplier`, in log space:
  accurate down to the smallest positive double. z = 0 (no noise) gives 1.

  Args:
    noise_multiplier: z >= 0, the noise std in units of the sensitivity.
    epsilon: epsilon >= 0.

  Returns:
    The smallest delta for which the mechanism is (epsilon, delta)-DP.
  """
  noise_multiplier = validation.as_nonnegative(noise_multiplier,
                                               "noise_multiplier")
  epsilon = validation.as_nonnegative(epsilon, "epsilon")
  if noise_multiplier == 0.0:
    return 1.0
  return math.exp(_log_gaussian_delta(1.0 / noise_multiplier, epsilon))


def gaussian_epsilon(noise_multiplier: float, delta: float) -> float:
  """Exact epsilon of one use of the Gaussian mechanism (sensitivity 1).

  The smallest epsilon >= 0 with delta_z(epsilon) <= delta (module
  docstring; Balle & Wang 2018, Theorem 8), z = `noise_multiplier`. Zero when
  delta >= erf(1/(2 sqrt(2) z)); otherwise the root is bracketed in
  [0, 1/(2 z^2) + Phi^-1(1 - delta)/z] and found by Brent's method in log
  space to full double precision.

  Args:
    noise_multiplier: z >= 0. z = 0 means no noise, hence no privacy: inf.
    delta: in (0, 1).

  Returns:
    epsilon in [0, inf]; inf also when it exceeds the largest double
    (z below about 1e-154).
  """
  noise_multiplier = validation.as_nonnegative(noise_multiplier,
                                               "noise_multiplier")
  delta = validation.as_open_unit(delta, "delta")
  return gaussian_epsilon_of_mu(mu_of(noise_multiplier), delta)


def gaussian_noise_multiplier(epsilon: float, delta: float) -> float:
  """The noise multiplier z whose exact Gaussian-mechanism epsilon is given.

  Inverts `gaussian_epsilon`: solves delta_z(epsilon) = delta (module
  docstring; Balle & Wang 2018, Theorem 8) for mu = 1/z (delta increases with
  mu), by bracketing mu geometrically and Brent's method. At epsilon = 0 the
  answer is closed-form, z = 1 / (2 sqrt(2) erfinv(delta)): the smallest z
  with epsilon 0 (every larger z also has epsilon 0).

  Args:
    epsilon: epsilon >= 0 (finite).
    delta: in (0, 1).

  Returns:
    z > 0 with gaussian_epsilon(z, delta) == epsilon to about 1e-12 relative.
  """
  epsilon = validation.as_nonnegative(epsilon, "epsilon")
  delta = validation.as_open_unit(delta, "delta")
  if epsilon == 0.0:
    return 1.0 / (2.0 * math.sqrt(2.0) * float(special.erfinv(delta)))
  log_delta = math.log(delta)

  def excess(mu: float) -> float:
    return _log_gaussian_delta(mu, epsilon) - log_delta

  low = _scale_until(1.0, 0.5, lambda m: excess(m) < 0.0 or m * 0.5 == 0.0)
  high = _scale_until(1.0, 2.0, lambda m: excess(m) > 0.0
                      or not math.isfinite(m))
  if not (excess(low) < 0.0 < excess(high)):
    raise ValueError(f"gaussian_noise_multiplier: could not bracket the noise "
                     f"multiplier for epsilon={epsilon!r}, delta={delta!r}.")
  mu = optimize.brentq(excess, low, high, xtol=_BRENT_XTOL, rtol=_BRENT_RTOL,
                       maxiter=_BRENT_MAXITER)
  return 1.0 / float(mu)


def repeated_epsilon(noise_multiplier: float, participations: int,
                     delta: float) -> float:
  """Exact epsilon of r Gaussian releases with no amplification.

  The adversary knows the r rounds in which the target took part, each a
  Gaussian mechanism with multiplier z. The r-fold composition of (1/z)-GDP is
  (sqrt(r)/z)-GDP (Dong, Roth & Su 2022, Corollary 3.3), so
    epsilon = gaussian_epsilon(z / sqrt(r), delta).

  Args:
    noise_multiplier: z >= 0 (0 gives inf).
    participations: r >= 1, an integer.
    delta: in (0, 1).
  """
  noise_multiplier = validation.as_nonnegative(noise_multiplier,
                                               "noise_multiplier")
  participations = validation.as_int(participations, "participations",
                                     minimum=1)
  delta = validation.as_open_unit(delta, "delta")
  return gaussian_epsilon_of_mu(
      math.sqrt(participations) * mu_of(noise_multiplier), delta)
