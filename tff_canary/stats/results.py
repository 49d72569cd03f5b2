"""Frozen result objects of the estimators (docs/method/estimates.md).

Like scipy.stats results, each keeps the inputs that produced it (counts,
`dim`, `delta`, confidence, method), prints a one-line summary, and converts to a
plain dict (`as_dict()`) for JSON reports.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, Literal, NamedTuple, Optional

from tff_canary.stats import options


class SignConventionWarning(UserWarning):
  """The inserted canaries' statistics are significantly below the null's
  (`tff_canary.stats.sign_tests`: a correct run gets it with probability at most 0.001).

  With the sign convention of docs/method/sign-convention.md (u = theta_0 - theta_T, or the round's
  noised aggregate) inserted canaries have a positive mean. A negative one
  almost always means the model delta was taken the wrong way round, and a
  symmetric formula would then report a large epsilon for the wrong reason.
  """


class VarianceMismatchWarning(UserWarning):
  """The inserted canaries' variance is far from the null's 1/dim.

  The mean-only epsilon-final keeps the null's variance (Theorem 3.3 of the
  paper justifies it for the Gaussian mechanism). When the sample variance is
  clearly different, the fitted-variance variant is the one to read.
  """


class ConfidenceInterval(NamedTuple):
  low: float
  high: float


def format_number(x: Optional[float]) -> str:
  """A result number for tables and summaries: 4 significant digits."""
  if x is None or math.isnan(x):
    return "-"
  if math.isinf(x):
    return "inf"
  if x == 0:
    return "0"
  return f"{x:.4g}" if abs(x) < 1e5 else f"{x:.4e}"


def format_confidence(level: float) -> str:
  """A confidence as a percentage with the digits it has, at most two
  decimals: 0.95 -> "95%", 0.975 -> "97.5%", 0.9875 -> "98.75%", 1 - 0.05 /
  6 -> "99.17%" (so a level split by Bonferroni is not rounded to another
  level, as 0.975 was to "98%")."""
  for digits in range(2):
    text = f"{level:.{digits}%}"
    if abs(float(text[:-1]) / 100.0 - level) < 1e-12:
      return text
  return f"{level:.2%}"


def _counts(num_inserted: int, num_held_out: int) -> str:
  text = f"{num_inserted} inserted"
  if num_held_out:
    text += f", {num_held_out} held out"
  return text


_SIGN_NOTE = ("  WARNING: inserted mean below the null's; check the sign "
              "convention (docs/method/sign-convention.md)")


class _Result:
  """What every result shares: its one-line summary (`_summary`) ends with the
  sign note when `inserted_below_null`, and `as_dict` gives its fields (a
  `ConfidenceInterval` as a list)."""

  def __str__(self) -> str:
    return self._summary() + (_SIGN_NOTE if self.inserted_below_null else "")

  def as_dict(self) -> dict[str, Any]:
    return {name: list(value) if isinstance(value, ConfidenceInterval)
            else value for name, value in dataclasses.asdict(self).items()}


@dataclasses.dataclass(frozen=True)
class EpsilonEstimate(_Result):
  """A point estimate of epsilon from two fitted Gaussians (epsilon-final or epsilon-all).

  Not a bound: an estimate of the epsilon that the canary attack achieves,
  assuming both statistics are Gaussian. Read it beside `LowerBound` and
  `OneRunBound`, which do hold with their confidence.

  Attributes:
    epsilon: the estimate.
    interval: confidence interval for it (`confidence` level); see
      `interval_method`.
    statistic: "final" (cosines with theta_0 - theta_T, closed-form null) or
      "all" (max over rounds, held-out null).
    method: "mean_only" (null's variance kept), "fitted_variance" (the
      paper's Algorithms 2 and 3: Gaussians fitted to the statistics) or
      "max_model" (epsilon-all of the mechanism from a model of each
      canary's max over rounds, `max_of_rounds`).
    delta, confidence: as given.
    num_inserted, num_held_out: sample sizes (num_held_out is 0 when the null is
      the closed form).
    dim: model dimension (None for epsilon-all, whose null is empirical).
    null_mean, null_std: the null Gaussian (0 and 1/sqrt(dim) for "final").
    inserted_mean, inserted_std: the Gaussian fitted to the inserted canaries
      (inserted_std is the null's for "mean_only").
    sample_std: the inserted canaries' sample standard deviation.
    inserted_below_null: True if inserted_mean < null_mean (see
      `SignConventionWarning`).
    interval_method: "t" (mean-only: the t-interval of the mean mapped
      through epsilon, exact), "projection" (the range of epsilon over a
      joint confidence region of the fitted Gaussians; conservative) or
      "profile" (max model: profile likelihood of mu).
    num_rounds: the max model's R recorded rounds (None otherwise).
    participations: the max model's P, the most rounds an inserted canary
      took part in; epsilon is that of P compositions (None otherwise).
    mu: the max model's GDP mu of one participation (None otherwise).
  """

  epsilon: float
  interval: ConfidenceInterval
  statistic: options.Statistic
  method: options.Method | options.MaxModel
  delta: float
  confidence: float
  num_inserted: int
  num_held_out: int
  dim: Optional[int]
  null_mean: float
  null_std: float
  inserted_mean: float
  inserted_std: float
  sample_std: float
  inserted_below_null: bool
  interval_method: options.IntervalMethod
  num_rounds: Optional[int] = None
  participations: Optional[int] = None
  mu: Optional[float] = None

  def _summary(self) -> str:
    name = "ε-final" if self.statistic == "final" else "ε-all"
    method = self.method.replace("_", "-") + " estimate"
    dim = f", d={self.dim}" if self.dim is not None else ""
    if self.method == "max_model":
      method += (f" of the mechanism, μ = {format_number(self.mu)} per "
                 f"participation, {self.participations} of "
                 f"{self.num_rounds} rounds")
    return (f"{name} = {format_number(self.epsilon)} "
            f"[{format_number(self.interval.low)}, {format_number(self.interval.high)}] "
            f"({format_confidence(self.confidence)} CI; {method}; δ={self.delta:g}"
            f"{dim}; {_counts(self.num_inserted, self.num_held_out)})")


@dataclasses.dataclass(frozen=True)
class LowerBound(_Result):
  """epsilon_lo: a threshold-attack lower bound on epsilon.

  Jagielski et al. (2020) with Jeffreys intervals (Zanella-Béguelin et al.
  2022), as in the paper (docs/method/lower-bounds.md). With `correction="none"` (the paper's
  construction) the confidence is nominal only: see `tff_canary.stats.bounds.lower_bounds`
  for how far it falls short. The bound saturates with the number of
  canaries (`ceiling`; docs/method/lower-bounds.md).

  Attributes:
    epsilon: the bound (max over thresholds).
    null: "exact" (closed-form null law of docs/method/null-law.md; FPR has no sampling
      error) or "held_out" (FPR from the held-out canaries' Jeffreys interval).
    threshold: the statistic threshold where the max is reached (guess
      "inserted" when statistic >= threshold); None if epsilon is 0.
    fnr_upper, fpr_upper: the FNR and FPR upper limits at that threshold.
    ceiling: the largest value this bound can take with these counts
      (inf for the exact null).
    saturated: True when epsilon is at the ceiling.
    correction: how the level is spread over rates and thresholds ("none" is
      the paper's: each rate at level 1 - confidence, max over thresholds
      uncorrected).
    delta, confidence, num_inserted, num_held_out, dim: inputs.
    inserted_below_null: True if the inserted mean is below the null's.
  """

  epsilon: float
  null: options.Null
  threshold: Optional[float]
  fnr_upper: float
  fpr_upper: float
  ceiling: float
  saturated: bool
  correction: options.Correction
  delta: float
  confidence: float
  num_inserted: int
  num_held_out: int
  dim: Optional[int]
  inserted_below_null: bool

  def _summary(self) -> str:
    null = f"exact null, d={self.dim}" if self.null == "exact" else "held-out null"
    sat = (f"; saturated: cannot exceed {format_number(self.ceiling)} with these counts"
           if self.saturated else "")
    level = (f"nominal {format_confidence(self.confidence)} lower bound, paper's uncorrected "
             "max over thresholds" if self.correction == "none"
             else f"{format_confidence(self.confidence)} lower bound, {self.correction}")
    return (f"ε_lo = {format_number(self.epsilon)} ({level}; "
            f"{null}; δ={self.delta:g}; "
            f"{_counts(self.num_inserted, self.num_held_out)}{sat})")


@dataclasses.dataclass(frozen=True)
class OneRunBound(_Result):
  """The one-run lower bound of Steinke, Nasr & Jagielski (2023).

  Each of `num_candidates` canaries was inserted by a fair coin; the auditor
  guesses "in" for the `k_plus` highest statistics and "out" for the `k_minus`
  lowest; `correct` of the `guesses` = k_plus + k_minus guesses were right.
  `epsilon` is the largest epsilon whose p-value is at most 1 - confidence.

  Attributes:
    epsilon: the bound (0 when not even epsilon = 0 is rejected).
    num_candidates, num_inserted: m and the number the coins inserted.
    k_plus, k_minus, guesses, correct: the guessing game.
    ceiling: the largest value the bound can take with this many guesses
      (all correct).
    delta, confidence: inputs.
    inserted_below_null: True if the inserted mean is below the others'.
  """

  epsilon: float
  num_candidates: int
  num_inserted: int
  k_plus: int
  k_minus: int
  guesses: int
  correct: int
  ceiling: float
  delta: float
  confidence: float
  inserted_below_null: bool

  def _summary(self) -> str:
    return (f"one-run bound = {format_number(self.epsilon)} ({format_confidence(self.confidence)} "
            f"lower bound; {self.correct}/{self.guesses} guesses right, "
            f"k+={self.k_plus}, k-={self.k_minus}; {self.num_candidates} "
            f"candidates, {self.num_inserted} inserted; δ={self.delta:g}; "
            f"ceiling {format_number(self.ceiling)})")


# Which Gaussian-claim bound a `GaussianClaimBound` holds (one name each).
GaussianClaimMethod = Literal["fdp_one_run", "tight_one_run", "gdp"]
_METHOD_NAMES = {"fdp_one_run": "f-DP one-run bound (Mahloujifar et al. 2024)",
                 "tight_one_run": "tight one-run bound (Xiang et al. 2025)",
                 "gdp": "GDP bound (Nasr et al. 2023)"}


@dataclasses.dataclass(frozen=True)
class GaussianClaimBound(_Result):
  """A lower bound on epsilon that tests Gaussian claims (docs/method/lower-bounds.md).

  Each tests the claim "the mechanism is mu-GDP", i.e. its trade-off curve is
  at least G_mu(x) = Phi(Phi^-1(1 - x) - mu) (Dong, Roth & Su 2019), and
  reports the epsilon at `delta` of the largest mu it rejects
  (`gaussian_accounting.gaussian_epsilon_of_mu`): a lower bound on epsilon if
  the mechanism's trade-off curve is Gaussian, an assumption otherwise.

  Attributes:
    epsilon: the bound (0 when not even mu = 0 is rejected).
    mu: the largest rejected mu (0 likewise).
    method: "fdp_one_run", "tight_one_run" or "gdp".
    strategy: how the guesses or threshold were chosen
      (`options.Strategy`).
    guesses, correct: for the one-run bounds, the guesses made and how many
      were right on the part that was bounded (None for "gdp").
    num_candidates, num_inserted: the canaries the bound saw (coin-flipped
      candidates for the one-run bounds; inserted + held-out for "gdp").
    delta, confidence: inputs.
    inserted_below_null: True if the inserted mean is below the others'.
  """

  epsilon: float
  mu: float
  method: GaussianClaimMethod
  strategy: options.Strategy
  guesses: Optional[int]
  correct: Optional[int]
  num_candidates: int
  num_inserted: int
  delta: float
  confidence: float
  inserted_below_null: bool

  def _summary(self) -> str:
    game = ("" if self.guesses is None else
            f"{self.correct}/{self.guesses} guesses right; ")
    return (f"{_METHOD_NAMES[self.method]} = {format_number(self.epsilon)} "
            f"(μ = {format_number(self.mu)}; {format_confidence(self.confidence)} lower bound "
            f"if the trade-off curve is Gaussian; {game}{self.strategy} "
            f"threshold; {self.num_candidates} candidates, "
            f"{self.num_inserted} inserted; δ={self.delta:g})")
