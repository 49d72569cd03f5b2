"""The exact null law of a canary cosine (docs/method/null-law.md).

A canary c is uniform on the unit sphere S^{d-1}. For any fixed nonzero vector v
independent of c, the cosine T = cos(c, v) has the density (Andrew et al. 2024,
Theorem 3.1)

  f_d(t) = (1 - t^2)^((d - 3) / 2) / B(1/2, (d - 1)/2),    -1 <= t <= 1,

with mean 0 and variance 1/d. Equivalently (1 + T)/2 ~ Beta((d-1)/2, (d-1)/2)
and T^2 ~ Beta(1/2, (d-1)/2), so for t >= 0

  P(T >= t) = 1/2 * I_{1 - t^2}((d - 1)/2, 1/2)                          (1)
            = 1/2 - 1/2 * I_{t^2}(1/2, (d - 1)/2),                        (2)

where I_x(a, b) is the regularized incomplete beta function. (1) is accurate in
the tail, (2) near t = 0 (where 1 - t^2 rounds to 1). N(0, 1/d) is the large-d
limit (Theorem 3.2) but is wrong in deep tails (docs/method/null-law.md).

Deep tails underflow double precision long before they stop mattering: at
d = 10^6 a cosine of 0.04 already has P(T >= t) ~ e^-800. `logsf` therefore
evaluates (1) in log space with the continued fraction of I_x(a, b) (Press et
al., Numerical Recipes, 3rd ed., eq. 6.4.5, modified Lentz's method), whose
prefactor x^a (1 - x)^b / (a B(a, b)) is taken in logs, wherever SciPy's
`betainc` underflows.
"""

from __future__ import annotations

import dataclasses
import functools

import numpy as np
import numpy.typing as npt
from scipy import optimize, special

from tff_canary.stats import validation

# Below this, SciPy's betainc result is used in log space only after checking
# it did not underflow; tails smaller than this go to the continued fraction.
_SMALLEST_TRUSTED = 1e-280
# Tails at least this large come from (2), which is exact near t = 0.
_CENTRE = 0.1
_CF_TOLERANCE = 1e-15
_CF_MAX_ITERATIONS = 200_000
_TINY = 1e-300


def _log_betainc_cf(a: float, b: float, log_x: np.ndarray,
                    log_one_minus_x: np.ndarray) -> np.ndarray:
  """log I_x(a, b) by its continued fraction; valid for x < (a+1)/(a+b+2).

  Numerical Recipes eq. 6.4.5 with the modified Lentz method, vectorized over
  x. The continued fraction converges in O(sqrt(max(a, b))) iterations in its
  domain; its value is O(1), so the result does not underflow. The caller gives
  log x and log(1 - x) (computed from the cosine without rounding 1 - t^2), so
  the prefactor x^a (1 - x)^b keeps full precision even when a is 10^6.
  """
  def away_from_zero(v):
    return np.where(np.abs(v) < _TINY, _TINY, v)

  def lentz(aa, c, d):  # one step of the modified Lentz method: (c, d)
    return away_from_zero(1.0 + aa / c), 1.0 / away_from_zero(1.0 + aa * d)

  log_x = np.asarray(log_x, dtype=np.float64)
  x = np.exp(log_x)
  qab, qap, qam = a + b, a + 1.0, a - 1.0
  c = np.ones_like(x)
  d = 1.0 / away_from_zero(1.0 - qab * x / qap)
  h = d.copy()
  active = np.ones(x.shape, dtype=bool)
  for m in range(1, _CF_MAX_ITERATIONS + 1):
    m2 = 2.0 * m
    c, d = lentz(m * (b - m) * x / ((qam + m2) * (a + m2)), c, d)
    h = np.where(active, h * d * c, h)
    c, d = lentz(-(a + m) * (qab + m) * x / ((a + m2) * (qap + m2)), c, d)
    step = d * c
    h = np.where(active, h * step, h)
    active &= np.abs(step - 1.0) >= _CF_TOLERANCE
    if not active.any():
      break
  else:
    raise ArithmeticError(
        f"incomplete beta continued fraction did not converge for a={a}, "
        f"b={b} (x in [{x.min()}, {x.max()}])")
  log_prefactor = (a * log_x + b * log_one_minus_x - np.log(a)
                   - special.betaln(a, b))
  return log_prefactor + np.log(h)


@dataclasses.dataclass(frozen=True)
class CosineNull:
  """The law of cos(c, v) for c uniform on S^{dim-1} and v fixed (docs/method/null-law.md).

  Methods follow scipy.stats: `pdf`, `logpdf`, `cdf`, `logcdf`, `sf`, `logsf`,
  `ppf`, `isf`, `mean`, `var`, `std`, `rvs`. They accept scalars or arrays and
  return the same shape; outside [-1, 1] the density is 0 and the tails are 0
  or 1, as in SciPy.

  Attributes:
    dim: the dimension d of the sphere's ambient space, d >= 2 (the number of
      trainable model parameters for a model canary).
  """

  dim: int

  def __post_init__(self):
    object.__setattr__(self, "dim", validation.as_dim(self.dim))

  @property
  def _b(self) -> float:
    """(d - 1)/2, the large Beta parameter."""
    return (self.dim - 1) / 2.0

  # Moments -------------------------------------------------------------------
  def mean(self) -> float:
    return 0.0

  def var(self) -> float:
    return 1.0 / self.dim

  def std(self) -> float:
    return 1.0 / np.sqrt(self.dim)

  # Density -------------------------------------------------------------------
  def logpdf(self, t: npt.ArrayLike):
    """log f_d(t) = ((d-3)/2) log(1 - t^2) - log B(1/2, (d-1)/2)."""
    t = np.asarray(t, dtype=np.float64)
    inside = np.abs(t) <= 1.0
    tc = np.where(inside, t, 0.0)
    exponent = (self.dim - 3) / 2.0
    with np.errstate(divide="ignore", invalid="ignore"):
      # log((1 - t)(1 + t)) keeps precision near t = +-1 and near 0.
      log_one_minus_t2 = np.log1p(-tc) + np.log1p(tc)
      body = np.where(exponent == 0.0, 0.0, exponent * log_one_minus_t2)
    out = np.where(inside, body - special.betaln(0.5, self._b), -np.inf)
    return out[()]

  def pdf(self, t: npt.ArrayLike):
    return np.exp(self.logpdf(t))

  # Tails ---------------------------------------------------------------------
  def logsf(self, t: npt.ArrayLike):
    """log P(T >= t), accurate in the deep upper tail (see module docstring)."""
    t = np.asarray(t, dtype=np.float64)
    out = np.empty(t.shape, dtype=np.float64)
    flat_t, flat_out = t.reshape(-1), out.reshape(-1)
    upper = flat_t >= 0.0
    flat_out[~upper] = np.log1p(-self._upper_tail(-flat_t[~upper]))
    flat_out[upper] = self._log_upper_tail(flat_t[upper])
    return out[()]

  def sf(self, t: npt.ArrayLike):
    """P(T >= t)."""
    t = np.asarray(t, dtype=np.float64)
    upper = self._upper_tail(np.abs(t))
    return np.where(t >= 0.0, upper, 1.0 - upper)[()]

  def cdf(self, t: npt.ArrayLike):
    """P(T <= t) = P(T >= -t) by symmetry."""
    return self.sf(-np.asarray(t, dtype=np.float64))

  def logcdf(self, t: npt.ArrayLike):
    return self.logsf(-np.asarray(t, dtype=np.float64))

  def _upper_tail(self, t: np.ndarray) -> np.ndarray:
    """P(T >= t) for t >= 0, by (1) or (2) of the module docstring.

    (2) subtracts from 1/2, so it is used only where the tail is at least
    `_CENTRE` (losing under one digit); (1) everywhere else. (1) rounds
    x = 1 - t^2 to double precision, which costs a relative error of about
    d * 5e-17 in the tail (5e-11 at d = 10^6), measured against mpmath.
    """
    t = np.asarray(t, dtype=np.float64)
    tc = np.clip(t, 0.0, 1.0)
    tail = np.empty(tc.shape)
    centre = tc <= self._centre_edge  # where (2) gives a tail >= _CENTRE
    sq = tc[centre]
    tail[centre] = 0.5 - 0.5 * special.betainc(0.5, self._b, sq * sq)
    tl = tc[~centre]
    tail[~centre] = 0.5 * special.betainc(self._b, 0.5, (1.0 - tl) * (1.0 + tl))
    return np.where(t > 1.0, 0.0, tail)

  @functools.cached_property
  def _centre_edge(self) -> float:
    """The t >= 0 with P(T >= t) = _CENTRE, where (2) hands over to (1)."""
    return float(np.sqrt(special.betaincinv(0.5, self._b, 1.0 - 2.0 * _CENTRE)))

  def _log_upper_tail(self, t: np.ndarray) -> np.ndarray:
    """log P(T >= t) for t >= 0, switching to the continued fraction in deep tails."""
    t = np.asarray(t, dtype=np.float64)
    tail = self._upper_tail(t)
    with np.errstate(divide="ignore"):
      out = np.log(tail)
    deep = (tail < _SMALLEST_TRUSTED) & (t < 1.0)
    if deep.any():
      td = t[deep]
      # (1): log P = log(1/2) + log I_x((d-1)/2, 1/2) with x = 1 - t^2. A tail
      # this deep is far inside the continued fraction's domain.
      out[deep] = np.log(0.5) + _log_betainc_cf(
          self._b, 0.5, np.log1p(-td) + np.log1p(td), 2.0 * np.log(td))
    return out

  # Quantiles -----------------------------------------------------------------
  def isf(self, q: npt.ArrayLike):
    """The t with P(T >= t) = q, for q in [0, 1].

    Near the centre (tail probability >= 1/4) it inverts (2) with SciPy's
    `betaincinv`, which is accurate there; smaller tails are found by Brent's
    method on `logsf`, which stays accurate where `betaincinv` does not (it
    loses all precision near 1e-30 at d = 10^6). Where the answer is closer to
    1 than double precision can represent (d = 2, q < ~1e-8), the result is the
    largest double below 1.
    """
    q = np.asarray(q, dtype=np.float64)
    if np.any((q < 0.0) | (q > 1.0) | np.isnan(q)):
      raise ValueError(f"q must lie in [0, 1], got {q!r}.")
    qc = np.where(q > 0.5, 1.0 - q, q)  # upper-tail probability <= 1/2
    flat_q = qc.reshape(-1)
    flat_t = np.sqrt(special.betaincinv(0.5, self._b, 1.0 - 2.0 * flat_q))
    top = np.nextafter(1.0, 0.0)
    log_top = float(self.logsf(top))
    for i in np.flatnonzero(flat_q < 0.25):
      if flat_q[i] == 0.0:
        flat_t[i] = 1.0
        continue
      target = np.log(flat_q[i])
      if log_top >= target:
        flat_t[i] = top
        continue
      flat_t[i] = optimize.brentq(lambda x: float(self.logsf(x)) - target,
                                  0.0, top, xtol=1e-300,
                                  rtol=4 * np.finfo(float).eps)
    t = flat_t.reshape(q.shape)
    return np.where(q > 0.5, -t, t)[()]

  def ppf(self, p: npt.ArrayLike):
    """The t with P(T <= t) = p; by symmetry ppf(p) = -isf(p)."""
    return -self.isf(p)

  # Sampling ------------------------------------------------------------------
  def rvs(self, size=None, seed=None):
    """Samples T via (1 + T)/2 ~ Beta((d-1)/2, (d-1)/2)."""
    rng = np.random.default_rng(seed)
    return 2.0 * rng.beta(self._b, self._b, size=size) - 1.0

  def __str__(self) -> str:
    return f"CosineNull(dim={self.dim}): mean 0, std {self.std():.4g}"
