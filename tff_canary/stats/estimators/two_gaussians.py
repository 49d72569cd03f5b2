"""Epsilon of two Gaussians with unequal variances (docs/method/two-gaussians.md).

A mechanism that outputs a draw of P = N(mu0, sigma0^2) on one dataset and of
Q = N(mu1, sigma1^2) on its neighbour is (epsilon, delta)-DP iff

  delta >= max(H_eps(P || Q), H_eps(Q || P)),                             (1)

where the hockey-stick divergence is (Balle & Wang 2018, Theorem 5; Steinke 2022,
Prop. 7; Andrew et al. 2024, §3.2)

  H_eps(P || Q) = P[L > eps] - e^eps Q[L > eps],   L(y) = log p(y) / q(y).  (2)

The privacy loss L is quadratic in y. Both divergences are invariant under a
common affine map of y, so we standardize P to N(0, 1); Q becomes N(m, s^2)
with m = (mu1 - mu0) / sigma0 and s = sigma1 / sigma0, and

  L(x) = A x^2 + B x + C,  A = (1 - s^2) / (2 s^2),  B = -m / s^2,
                           C = m^2 / (2 s^2) + log s.                      (3)

{L > eps} and {L < -eps} are therefore a half-line, an interval, the outside
of an interval, everything or nothing, with end points at the roots of
L(x) = +-eps (found with the cancellation-free form of the quadratic formula).
Their Gaussian masses are taken in log space (`scipy.special.log_ndtr`), and
H = exp(log P[...]) (1 - exp(eps + log Q[...] - log P[...])) is formed in log
space too, so delta stays exact from epsilon ~ 0 to epsilon in the tens of
thousands (the paper reports epsilon-all = 45800).

With sigma0 = sigma1 = sigma and |mu1 - mu0| = Delta this is exactly the
Gaussian mechanism with noise multiplier sigma / Delta (Balle & Wang 2018,
Theorem 8); the tests check that against dp_accounting.

`epsilon_for_delta` finds the smallest epsilon >= 0 with delta(epsilon) <= delta
(delta(epsilon) is nonincreasing); `epsilon_for_delta_many` does the same for
arrays of Gaussians at once.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt
from scipy import optimize, special

from tff_canary.stats import validation

_LOG_HALF = np.log(0.5)
# Larger epsilons than this are reported as inf: the Gaussians are so far apart
# that their masses underflow even in log space.
_EPSILON_MAX = 1e7


def _log1mexp(x):
  """log(1 - exp(x)) for x <= 0, accurate on both sides of -log 2."""
  x = np.asarray(x, dtype=np.float64)
  with np.errstate(divide="ignore", invalid="ignore"):
    return np.where(x > _LOG_HALF, np.log(-np.expm1(x)), np.log1p(-np.exp(x)))


def _log_mass_between(lo, hi):
  """log(Phi(hi) - Phi(lo)) for lo <= hi, without cancellation in either tail."""
  lo = np.asarray(lo, dtype=np.float64)
  hi = np.asarray(hi, dtype=np.float64)
  with np.errstate(divide="ignore", invalid="ignore"):
    right = special.log_ndtr(-lo) + _log1mexp(special.log_ndtr(-hi)
                                              - special.log_ndtr(-lo))
    left = special.log_ndtr(hi) + _log1mexp(special.log_ndtr(lo)
                                            - special.log_ndtr(hi))
    middle = np.log1p(-(special.ndtr(lo) + special.ndtr(-hi)))
  out = np.where(lo >= 0.0, right, np.where(hi <= 0.0, left, middle))
  return np.where(hi > lo, out, -np.inf)


def _log_mass_outside(lo, hi):
  """log(Phi(lo) + 1 - Phi(hi)) for lo <= hi (NaN in, NaN out)."""
  with np.errstate(invalid="ignore"):
    return np.logaddexp(special.log_ndtr(lo), special.log_ndtr(-hi))


def _roots(a, b, c):
  """Real roots (lo, hi) of a x^2 + b x + c = 0 where they exist.

  Uses q = -(b + sign(b) sqrt(disc)) / 2, roots q/a and c/q, which has no
  cancellation when a is tiny (nearly equal variances). Returns NaN where the
  roots are not real or a == 0.
  """
  with np.errstate(divide="ignore", invalid="ignore"):
    disc = b * b - 4.0 * a * c
    sqrt_disc = np.sqrt(np.where(disc >= 0.0, disc, np.nan))
    q = -0.5 * (b + np.where(b >= 0.0, 1.0, -1.0) * sqrt_disc)
    r1 = q / a
    r2 = c / q
    # q == 0 only when b == 0 and disc == 0, a double root at 0.
    r2 = np.where(q == 0.0, r1, r2)
  return np.fmin(r1, r2), np.fmax(r1, r2), disc


def _log_masses_where_positive(a, b, c, m, s):
  """log P[f > 0], log Q[f > 0] for f(x) = a x^2 + b x + c, P = N(0,1), Q = N(m, s^2)."""
  lo, hi, disc = _roots(a, b, c)
  with np.errstate(divide="ignore", invalid="ignore"):
    root = -c / b  # where a == 0: f is linear (or constant)
  real = disc > 0.0

  def log_mass(mean, std):  # of {f > 0} under N(mean, std^2)
    low, high, at = (lo - mean) / std, (hi - mean) / std, (root - mean) / std
    linear = np.where(b > 0.0, special.log_ndtr(-at),
                      np.where(b < 0.0, special.log_ndtr(at),
                               np.where(c > 0.0, 0.0, -np.inf)))
    # a > 0: positive outside the roots, or everywhere if none are real;
    # a < 0: positive between the roots, or nowhere.
    outside = np.where(real, _log_mass_outside(low, high), 0.0)
    between = np.where(real, _log_mass_between(low, high), -np.inf)
    return np.where(a == 0.0, linear, np.where(a > 0.0, outside, between))

  return log_mass(0.0, 1.0), log_mass(m, s)


def _standardize(mu0, sigma0, mu1, sigma1):
  """(m, s, A, B, C) of equation (3), with 1 - s^2 formed without cancellation."""
  mu0, sigma0, mu1, sigma1 = np.broadcast_arrays(
      *(np.asarray(v, dtype=np.float64) for v in (mu0, sigma0, mu1, sigma1)))
  m = (mu1 - mu0) / sigma0
  s = sigma1 / sigma0
  a = (sigma0 - sigma1) * (sigma0 + sigma1) / (2.0 * sigma1 * sigma1)
  b = -m / (s * s)
  c = m * m / (2.0 * s * s) + np.log(s)
  return m, s, a, b, c


def log_delta_for_epsilon(epsilon: npt.ArrayLike, mu0: npt.ArrayLike,
                          sigma0: npt.ArrayLike, mu1: npt.ArrayLike,
                          sigma1: npt.ArrayLike):
  """log max(H_eps(P||Q), H_eps(Q||P)) for P = N(mu0, sigma0^2), Q = N(mu1, sigma1^2).

  Vectorized: every argument broadcasts. Unvalidated (the public functions
  validate); -inf means delta = 0.
  """
  epsilon = np.asarray(epsilon, dtype=np.float64)
  m, s, a, b, c = _standardize(mu0, sigma0, mu1, sigma1)
  # H_eps(P||Q): region {L > eps} = {A x^2 + B x + (C - eps) > 0}.
  log_p, log_q = _log_masses_where_positive(a, b, c - epsilon, m, s)
  with np.errstate(invalid="ignore"):
    log_h_pq = log_p + _log1mexp(np.minimum(epsilon + log_q - log_p, 0.0))
  log_h_pq = np.where(epsilon + log_q < log_p, log_h_pq, -np.inf)
  # H_eps(Q||P): region {L < -eps} = {-A x^2 - B x - (C + eps) > 0}.
  log_p, log_q = _log_masses_where_positive(-a, -b, -(c + epsilon), m, s)
  with np.errstate(invalid="ignore"):
    log_h_qp = log_q + _log1mexp(np.minimum(epsilon + log_p - log_q, 0.0))
  log_h_qp = np.where(epsilon + log_p < log_q, log_h_qp, -np.inf)
  return np.maximum(log_h_pq, log_h_qp)[()]


def _check_gaussians(mu0, sigma0, mu1, sigma1):
  return (validation.as_float(mu0, "mu0"), validation.as_positive(sigma0, "sigma0"),
          validation.as_float(mu1, "mu1"), validation.as_positive(sigma1, "sigma1"))


def delta_for_epsilon(epsilon: float, mu0: float, sigma0: float, mu1: float,
                      sigma1: float) -> float:
  """The smallest delta for which outputting N(mu0, sigma0^2) vs N(mu1, sigma1^2) is (epsilon, delta)-DP.

  Equation (1) of the module docstring, exact in log space, for epsilon >= 0
  and standard deviations sigma0, sigma1 > 0. Returns delta in [0, 1].
  """
  epsilon = validation.as_nonnegative(epsilon, "epsilon")
  args = _check_gaussians(mu0, sigma0, mu1, sigma1)
  return float(np.exp(log_delta_for_epsilon(epsilon, *args)))


def epsilon_for_delta(delta: float, mu0: float, sigma0: float, mu1: float,
                      sigma1: float) -> float:
  """The smallest epsilon >= 0 at which N(mu0, sigma0^2) vs N(mu1, sigma1^2) is (epsilon, delta)-DP.

  For delta in (0, 1) and standard deviations sigma0, sigma1 > 0. Brackets by
  doubling, then Brent's method on log delta(eps) - log delta, which is
  smooth and strictly decreasing wherever delta(eps) > 0.

  Returns:
    epsilon >= 0; 0 when even the total variation distance is <= delta, inf
    when the two are so far apart that no finite epsilon below 1e7 suffices.
  """
  delta = validation.as_open_unit(delta, "delta")
  args = _check_gaussians(mu0, sigma0, mu1, sigma1)
  return _solve_scalar(np.log(delta), args)


def _solve_scalar(log_delta: float, args) -> float:
  def gap(eps):
    value = float(log_delta_for_epsilon(eps, *args))
    return max(value, -1e300) - log_delta

  if gap(0.0) <= 0.0:
    return 0.0
  hi = 1.0
  while gap(hi) > 0.0:
    hi *= 2.0
    if hi > _EPSILON_MAX:
      return float("inf")
  lo = hi / 2.0 if hi > 1.0 else 0.0
  return float(optimize.brentq(gap, lo, hi, xtol=1e-300, rtol=4 * np.finfo(float).eps,
                               maxiter=500))


def epsilon_for_delta_many(delta: float, mu0: npt.ArrayLike,
                           sigma0: npt.ArrayLike, mu1: npt.ArrayLike,
                           sigma1: npt.ArrayLike,
                           rtol: float = 1e-12,
                           max_iterations: int = 200) -> np.ndarray:
  """`epsilon_for_delta` for arrays of Gaussian pairs at once (broadcast).

  Brackets by doubling, then runs the Illinois variant of regula falsi
  (Dowell & Jarratt 1971) on g(eps) = log delta(eps) - log delta for every
  element at once: the bracket [lo, hi] with g(lo) > 0 >= g(hi) is kept, so
  the method cannot diverge, and it converges superlinearly (order about
  1.44). Stops when each bracket is narrower than rtol * hi (or 1e-300), and
  returns hi, at which delta(hi) <= delta holds. Inputs are assumed valid
  (finite means, positive stds).
  """
  log_delta = np.log(delta)
  args = [np.asarray(v, dtype=np.float64) for v in (mu0, sigma0, mu1, sigma1)]
  shape = np.broadcast_shapes(*(v.shape for v in args))
  args = [np.broadcast_to(v, shape).ravel() for v in args]
  size = int(np.prod(shape, dtype=np.int64))

  def gap(eps, idx):
    value = log_delta_for_epsilon(eps, *(v[idx] for v in args))
    return np.maximum(value, -1e300) - log_delta

  everyone = np.arange(size)
  out = np.zeros(size)
  g0 = gap(np.zeros(size), everyone)
  todo = np.flatnonzero(g0 > 0.0)  # delta(0) <= delta means epsilon = 0.
  lo = np.zeros(todo.size)
  glo = g0[todo]
  hi = np.ones(todo.size)
  ghi = gap(hi, todo)
  while True:
    grow = ghi > 0.0
    if not grow.any():
      break
    lo = np.where(grow, hi, lo)
    glo = np.where(grow, ghi, glo)
    hi = np.where(grow, 2.0 * hi, hi)
    if hi.max() > _EPSILON_MAX:
      out[todo[hi > _EPSILON_MAX]] = np.inf
      keep = hi <= _EPSILON_MAX
      todo, lo, glo, hi, ghi = todo[keep], lo[keep], glo[keep], hi[keep], ghi[keep]
      grow = grow[keep]
    if grow.any():
      ghi[grow] = gap(hi[grow], todo[grow])

  last_side = np.zeros(todo.size, dtype=np.int8)
  for _ in range(max_iterations):
    active = (hi - lo) > np.maximum(rtol * hi, 1e-300)
    if not active.any():
      break
    a = np.flatnonzero(active)
    l, h, gl, gh = lo[a], hi[a], glo[a], ghi[a]
    x = h - gh * (h - l) / (gh - gl)
    bad = ~((x > l) & (x < h))
    x = np.where(bad, 0.5 * (l + h), x)
    gx = gap(x, todo[a])
    up = gx > 0.0  # the root lies above x
    side = np.where(up, 1, -1).astype(np.int8)
    repeat = side == last_side[a]
    # Illinois: when the same end moves twice, halve the other end's value.
    lo[a] = np.where(up, x, l)
    glo[a] = np.where(up, gx, np.where(repeat, 0.5 * gl, gl))
    hi[a] = np.where(up, h, x)
    ghi[a] = np.where(up, np.where(repeat, 0.5 * gh, gh), gx)
    last_side[a] = side
  out[todo] = hi
  return out.reshape(shape)
