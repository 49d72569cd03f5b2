"""epsilon of a multi-round mechanism from schedule-aware sums of cosines
(docs/method/orthogonal-canaries.md, "The schedule-aware statistic").

The statistic (Agrawal et al. 2026, "Let's Ask Gauss: Improved One-Run Privacy
Auditing", arXiv 2606.12733). Over R rounds, each round r an independent
Gaussian mechanism rho_r = sum_{j in I_r} c_j + sigma z_r of sensitivity 1
(DP-FedAvg's aggregate, the canaries scaled to the clip), canary j has a
schedule S_j of P_j rounds: an inserted canary takes part in them, a held-out
one has a schedule drawn the same way but is never inserted. With x_{j,r}
canary j's cosine with round r's output, the round's other inserted canaries
removed (`tff_canary.stats.simulation.orthogonal_mechanism`, equation (1):
with orthonormal canaries, x_{j,r} = s_{j,r} / sqrt(|rho_r|^2 - sum_{i in I_r,
i != j} s_{i,r}^2), s_{i,r} = <c_i, rho_r>),

  T_j = sqrt(d / P_j) * sum_{r in S_j} x_{j,r}                 (`scheduled_statistic`).

Its law (Theorem 3.3 of Andrew et al., ICLR 2024, arXiv 2302.03098):
x_{j,r} is about N(0, 1/d) when j is not in round r (docs/method/null-law.md)
and N(1 / (sigma sqrt(d)), 1/d) when it is, the rounds independent. So a
held-out T_j is about N(0, 1) and an inserted one N(sqrt(P_j) / sigma, 1),
exact as d -> inf (at finite d the null variance is d / (d - |I_r|) and the
inserted mean is low by a relative O(1 / (sigma^2 d))): the mean of P_j
rounds of (1/sigma)-GDP composed (Dong, Roth & Su 2019, arXiv 1905.02383, §2
and Cor. 3.3). So mean(T_in) estimates the composed mu (with unequal P_j,
the mean of sqrt(P_j) / sigma), and epsilon is that of mu-GDP at delta
(Balle & Wang 2018, Thm 8; `gaussian_accounting.gaussian_epsilon_of_mu`).
Unlike the max over rounds (`max_of_rounds`), T_j adds up the evidence of
all P rounds, and its law is Gaussian.

The estimate and its interval.

* Exact null (`held_out_T` None): T_out ~ N(0, 1) taken as known; mu =
  mean(T_in), with the t-interval of the mean at `confidence` (exact for a
  Gaussian T_in of any variance).
* Held-out null: mu = (mean(T_in) - mean(T_out)) / std(T_out), the mean gap
  in units of the null's spread (which corrects the finite-d variance). The
  interval is a projection, as in `estimates.epsilon_all`: Welch's
  t-interval of the mean gap and the chi-square interval of std(T_out), each
  at level sqrt(confidence) (the gap and the held-out std are independent for
  Gaussian samples, so the box has the joint level), and mu's range over the
  box. Slightly conservative.
* Held-out mean, claimed scale (`scale="claimed"`): mu = mean(T_in) -
  mean(T_out), the mean gap in units of the claimed noise (T's null std is
  1 when the scores are in units of the claimed noise), with Welch's
  t-interval at `confidence`.

The two held-out readings differ when something other than the claimed
noise spreads the held-out T: in training, the clients' updates have a
component along the canary directions that adds the same variance to
inserted and held-out T and leaves the mean gap unchanged. Then gap /
std(T_out) is the epsilon of an attack that faces this run's extra spread
(a distinguisher sees the scores it sees), below the mechanism's epsilon,
which the mean gap in units of the claimed noise estimates; that reading
takes the noise to be the claimed one, which the noise self-test checks.
`spread_p_value` tests the held-out variance against 1 (one-sided).

epsilon grows with mu >= 0, so each mu interval maps to an epsilon interval
(a negative mu gives epsilon 0; a significantly negative one warns
`results.SignConventionWarning`).

These are estimates, not bounds: they assume the Gaussian laws above (a
Gaussian mechanism in every round, large d), which the result checks where
the data can. The inserted T_j are N(s m_j, sigma_0^2), a known shape m_j
(sqrt(P_j); `gls_statistics.schedule_mu` in DP-FTRL) times one scale s, so
given the shape (`inserted_mu`) the check fits a + s m_j by least squares
(s fitted, not taken from the claim: leaking less than claimed is no reason
to doubt the Gaussian reading) and tests the residual variance, on n - 2
degrees of freedom, against the null's: 1 for the exact null (chi-square),
the held-out T's sample variance otherwise (F on n - 2 and m - 1 degrees of
freedom). Held-out T are also checked against N(0, 1) (mean and variance).
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, Literal, Optional

import numpy as np
import numpy.typing as npt
from scipy import stats

from tff_canary.stats.accounting import gaussian_accounting
from tff_canary.stats import results
from tff_canary.stats import sign_tests
from tff_canary.stats import validation

# A check of the Gaussian model this improbable (two-sided) is reported.
_CHECK_LEVEL = 1e-3

ScheduledNull = Literal["exact", "held_out"]


@dataclasses.dataclass(frozen=True)
class ScheduledEstimate:
  """epsilon of the composed mechanism from schedule-aware sums (module
  docstring): an estimate, not a bound.

  Attributes:
    epsilon: the estimate, epsilon at `delta` of mu-GDP.
    interval: its confidence interval (`confidence` level).
    mu: the estimated GDP mu of the composition of a canary's rounds.
    mu_interval: the interval of mu that `interval` maps.
    delta, confidence: as given.
    null: "exact" (T ~ N(0, 1) known) or "held_out" (held-out T's mean and
      std).
    num_inserted, num_held_out: sample sizes (num_held_out 0 for "exact").
    null_mean, null_std: the null used (0 and 1 for "exact").
    inserted_mean, inserted_std: the inserted T's sample mean and std.
    interval_method: "t" (exact null, or the claimed scale) or
      "projection" (held-out null, its scale).
    inserted_below_null: True if inserted_mean < null_mean.
    variance_p_value: two-sided p-value of the inserted T's variance around
      their model means (`residual_std`) against the null's: chi-square
      against 1 (exact null), F against null_std^2 (held-out null).
    residual_std: the inserted T's std around a + s m_j fitted to the known
      shape of their means (`inserted_mu`; module docstring), or around
      their mean without it (then inserted_std).
    known_spread: True when `inserted_mu` was given.
    null_p_value: with held-out T, the smaller two-sided p-value of their
      mean against 0 (t) and variance against 1 (chi-square); None for the
      exact null.
    scale: the unit of mu: "held_out" (std(T_out)) or "claimed" (1, the
      claimed noise's; always for the exact null).
    spread_p_value: with held-out T, the one-sided p-value of their variance
      above 1 (chi-square): small when something beyond the claimed noise
      spreads them (module docstring); None for the exact null.
    null_mean_p_value: with held-out T, the two-sided p-value of their mean
      against 0 (t); None for the exact null.
  """

  epsilon: float
  interval: results.ConfidenceInterval
  mu: float
  mu_interval: results.ConfidenceInterval
  delta: float
  confidence: float
  null: ScheduledNull
  num_inserted: int
  num_held_out: int
  null_mean: float
  null_std: float
  inserted_mean: float
  inserted_std: float
  interval_method: Literal["t", "projection"]
  inserted_below_null: bool
  variance_p_value: float
  null_p_value: Optional[float]
  residual_std: float = float("nan")
  known_spread: bool = False
  scale: Literal["held_out", "claimed"] = "held_out"
  spread_p_value: Optional[float] = None
  null_mean_p_value: Optional[float] = None

  @property
  def spread_above_noise(self) -> bool:
    """Whether the held-out T spread significantly more than the claimed
    noise alone spreads them (`spread_p_value` below 1e-3)."""
    return self.spread_p_value is not None and self.spread_p_value < (
        _CHECK_LEVEL)

  @property
  def trust(self) -> str:
    """How far the estimate can be trusted, in words."""
    notes = []
    if self.inserted_below_null:
      notes.append("inserted mean below the null's: check the sign "
                   "convention (docs/method/sign-convention.md)")
    if self.variance_p_value < _CHECK_LEVEL:
      around = (" around their schedules' known spread of means"
                if self.known_spread else "")
      notes.append(
          f"inserted T have std {results.format_number(self.residual_std)}"
          f"{around} against the null's "
          f"{results.format_number(self.null_std)} (p = "
          f"{self.variance_p_value:.2g}): not the Gaussian mechanism's mean "
          "shift, so the GDP reading of mu is doubtful")
    if self.spread_above_noise:
      unit = ("so this is the ε of an attack facing that spread, below the "
              "mechanism's (the mean gap in units of the claimed noise)"
              if self.scale == "held_out" else
              "this reading counts the claimed noise only")
      notes.append(
          f"held-out T spread more than the claimed noise alone (std "
          f"{results.format_number(self.null_std)} against 1, p = "
          f"{self.spread_p_value:.2g}): something besides it moves the "
          "canaries' scores, in training the clients' updates along the "
          "canary directions (or more noise than claimed, which the noise "
          f"self-test checks); {unit}")
    off = (self.null_mean_p_value if self.spread_above_noise
           else self.null_p_value)   # the spread is said above
    if off is not None and off < _CHECK_LEVEL:
      notes.append(
          f"held-out T are not N(0, 1) (mean "
          f"{results.format_number(self.null_mean)}, std "
          f"{results.format_number(self.null_std)}, p = "
          f"{self.null_p_value:.2g}): the statistic is off (schedules, "
          "removal or scaling); the estimate uses the held-out null")
    if not notes:
      notes = ["Gaussian model consistent with the data"
               if self.null == "held_out" else
               "inserted variance consistent with the null; the N(0, 1) null "
               "is assumed (give held-out T to check it)"]
    return "; ".join(notes) + "; an estimate, not a bound"

  def __str__(self) -> str:
    null = ("exact N(0, 1) null" if self.null == "exact" else
            f"held-out null, {self.num_held_out} held out"
            + ("" if self.scale == "held_out" else
               ", in units of the claimed noise"))
    return (f"ε-scheduled = {results.format_number(self.epsilon)} "
            f"[{results.format_number(self.interval.low)}, "
            f"{results.format_number(self.interval.high)}] "
            f"({results.format_confidence(self.confidence)} CI, "
            f"{self.interval_method}; composed "
            f"μ = {results.format_number(self.mu)}; δ={self.delta:g}; "
            f"{null}; {self.num_inserted} inserted). {self.trust}.")

  def as_dict(self) -> dict[str, Any]:
    out = dataclasses.asdict(self)
    out["interval"] = list(self.interval)
    out["mu_interval"] = list(self.mu_interval)
    out["trust"] = self.trust
    return out


def scheduled_statistic(cosines: npt.ArrayLike, schedule: npt.ArrayLike, *,
                        dim: int) -> np.ndarray:
  """T_j = sqrt(d / P_j) * sum_{r in S_j} x_{j,r} (module docstring).

  Args:
    cosines: [canaries, rounds] per-round cosines x_{j,r}, finite, in
      [-1, 1] (entries outside a canary's schedule are ignored).
    schedule: [canaries, rounds] Boolean, True where round r is in canary j's
      schedule; every canary at least one round.
    dim: the dimension d, at least 2.

  Returns:
    float64 T_j, one per canary.

  Raises:
    TypeError, ValueError: for a bad argument, naming it.
  """
  dim = validation.as_dim(dim, "dim")
  x = np.asarray(cosines)
  if x.ndim != 2 or not (np.issubdtype(x.dtype, np.floating)
                         or np.issubdtype(x.dtype, np.integer)):
    raise ValueError(f"cosines must be a 2-D array of numbers [canaries, "
                     f"rounds], got shape {x.shape} and dtype {x.dtype}.")
  validation.as_cosines(x.ravel(), "cosines", min_size=1)
  mask = validation.as_mask(schedule, "schedule", x.shape, "cosines")
  counts = mask.sum(axis=1)
  if (counts == 0).any():
    index = int(np.flatnonzero(counts == 0)[0])
    raise ValueError(f"schedule[{index}] has no round: every canary needs at "
                     "least one scheduled round.")
  total = np.where(mask, x.astype(np.float64), 0.0).sum(axis=1)
  return np.sqrt(dim / counts) * total


def _epsilon(mu: float, delta: float) -> float:
  return gaussian_accounting.gaussian_epsilon_of_mu(max(mu, 0.0), delta)


def _residuals(x: np.ndarray, shape: Optional[np.ndarray]
               ) -> tuple[float, int]:
  """(residual sum of squares, degrees of freedom) of x around a + s m_j
  (least squares; module docstring), or around its mean without a shape,
  with one that does not vary, or with too few values to fit both."""
  design = np.ones((x.size, 1))
  if (shape is not None and x.size > 2
      and np.ptp(shape) > 1e-9 * np.abs(shape).max()):
    design = np.column_stack([design, shape])
  coef = np.linalg.lstsq(design, x, rcond=None)[0]
  residual = x - design @ coef
  return float(residual @ residual), x.size - design.shape[1]


def _variance_p_value(rss: float, df: int, null_variance: float,
                      null_size: Optional[int]) -> float:
  """Two-sided p of the residual variance rss / df against the null's: a
  known variance (chi-square) or a sample variance of `null_size` values
  (F, its sampling error included)."""
  if null_size is None:
    law, value = stats.chi2(df), rss / null_variance
  else:
    law, value = stats.f(df, null_size - 1), rss / df / null_variance
  return float(min(1.0, 2.0 * min(law.cdf(value), law.sf(value))))


def epsilon_scheduled(inserted_T: npt.ArrayLike,
                      held_out_T: npt.ArrayLike | None = None, *,
                      delta: float,
                      confidence: float = 0.95,
                      inserted_mu: npt.ArrayLike | None = None,
                      scale: str = "held_out") -> ScheduledEstimate:
  """epsilon of the composed mechanism from the schedule-aware T_j.

  Args:
    inserted_T: 1-D array of T_j for the inserted canaries
      (`scheduled_statistic`), at least 2, finite.
    held_out_T: the same for held-out canaries (at least 2), or None to take
      the null N(0, 1) as exact.
    delta: the delta at which epsilon is computed, in (0, 1).
    confidence: level of the interval, in (0, 1).
    inserted_mu: each inserted canary's mean T under the model, up to one
      common scale (`gls_statistics.schedule_mu`; sqrt(P_j)), one per
      inserted_T, or None when the means are equal. Only the variance check
      uses it (module docstring): the estimate is of the mean mu.
    scale: with `held_out_T`, the unit of mu: "held_out" (the held-out T's
      std: the attack's reading) or "claimed" (1: the mechanism's reading,
      the mean gap in units of the claimed noise; module docstring).

  Returns:
    A `ScheduledEstimate` (module docstring). Warns
    `results.SignConventionWarning` if the inserted mean is significantly
    below the null's.

  Raises:
    TypeError, ValueError: for a bad argument, naming it.
  """
  x = validation.as_sample(inserted_T, "inserted_T")
  y = (None if held_out_T is None else
       validation.as_sample(held_out_T, "held_out_T"))
  delta, confidence = validation.as_levels(delta, confidence)
  scale = validation.as_choice(scale, "scale", ("held_out", "claimed"))
  if y is None and scale == "held_out":
    scale = "claimed"   # the exact null's unit is the claimed noise's
  validation.check_spread(x, "inserted_T")
  shape = None
  if inserted_mu is not None:
    shape = validation.as_sample(inserted_mu, "inserted_mu")
    if shape.size != x.size:
      raise ValueError(f"inserted_mu has {shape.size} values, inserted_T "
                       f"{x.size}: give one mean per inserted canary.")
  rss, rss_df = _residuals(x, shape)
  mean1, std1 = float(x.mean()), float(x.std(ddof=1))
  spread_p = None
  if y is None:
    null, mean0, std0, null_p = "exact", 0.0, 1.0, None
    half = float(stats.t.ppf(0.5 + confidence / 2.0, x.size - 1)) * std1 / (
        math.sqrt(x.size))
    mu = mean1
    mu_low, mu_high = mean1 - half, mean1 + half
    method = "t"
  else:
    validation.check_spread(y, "held_out_T")
    null, mean0, std0 = "held_out", float(y.mean()), float(y.std(ddof=1))
    p_mean = float(stats.ttest_1samp(y, 0.0).pvalue)
    null_p = min(p_mean, _variance_p_value(
        (y.size - 1) * y.var(ddof=1), y.size - 1, 1.0, None))
    chi2 = stats.chi2(y.size - 1)
    spread_p = float(chi2.sf((y.size - 1) * y.var(ddof=1)))
    level = math.sqrt(confidence) if scale == "held_out" else confidence
    gap = mean1 - mean0
    v1, v0 = std1**2 / x.size, std0**2 / y.size
    se = math.sqrt(v1 + v0)
    # Welch-Satterthwaite degrees of freedom.
    df = (v1 + v0)**2 / (v1**2 / (x.size - 1) + v0**2 / (y.size - 1))
    half = float(stats.t.ppf(0.5 + level / 2.0, df)) * se
    low_gap, high_gap = gap - half, gap + half
    if scale == "claimed":
      mu, mu_low, mu_high, method = gap, low_gap, high_gap, "t"
    else:
      tail = (1.0 - level) / 2.0
      s_low = std0 * math.sqrt((y.size - 1) / chi2.isf(tail))
      s_high = std0 * math.sqrt((y.size - 1) / chi2.ppf(tail))
      mu = gap / std0
      mu_low = low_gap / (s_high if low_gap > 0.0 else s_low)
      mu_high = high_gap / (s_low if high_gap > 0.0 else s_high)
      method = "projection"
  below = mean1 < mean0
  sign_tests.warn_if_below(x, y, reference_name="null mean")
  return ScheduledEstimate(
      epsilon=_epsilon(mu, delta),
      interval=results.ConfidenceInterval(_epsilon(mu_low, delta),
                                          _epsilon(mu_high, delta)),
      mu=float(mu),
      mu_interval=results.ConfidenceInterval(float(mu_low), float(mu_high)),
      delta=delta, confidence=confidence, null=null, num_inserted=x.size,
      num_held_out=0 if y is None else y.size, null_mean=mean0,
      null_std=std0, inserted_mean=mean1, inserted_std=std1,
      interval_method=method, inserted_below_null=below,
      variance_p_value=_variance_p_value(
          rss, rss_df, std0**2, None if y is None else y.size),
      null_p_value=null_p, residual_std=math.sqrt(rss / rss_df),
      known_spread=shape is not None, scale=scale, spread_p_value=spread_p,
      null_mean_p_value=None if y is None else p_mean)


__all__ = ["ScheduledEstimate", "epsilon_scheduled", "scheduled_statistic"]
