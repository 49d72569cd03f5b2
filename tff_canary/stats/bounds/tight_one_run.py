"""The tight one-run audit of a Gaussian claim (Xiang, Wang, Xiao, Tian & Wang 2025).

"Tight Privacy Audit in One Run", arXiv 2509.08704, as restated in docs/method/lower-bounds.md:
model the claim as the pair of one-score distributions P = N(0, 1) (canary
out) and Q = N(mu, 1) (canary in), so that the claim is mu-GDP with a Gaussian
trade-off curve, and the fair coin makes every candidate's score a draw from
the mixture M = (P + Q)/2. The auditor releases the r highest-scoring
candidates of n as guesses "in"; u of them are mistakes (not inserted).

Given its score x, a candidate is out with probability p(x)/(p(x) + q(x)) =
1/(1 + L(x)), L = dQ/dP = exp(mu x - mu^2/2) (gamma of docs/method/lower-bounds.md, for the guess
"in"). Let c be the score at quantile w of M, M(c) = (Phi(c) + Phi(c - mu))/2.
Above c the error mass is G(w) = (1/2) int_c^inf p = Phi(-c)/2, and the mean
error of a released guess is

  gamma_bar(w) = G(w) / (1 - w) = Phi(-c) / (Phi(-c) + Phi(mu - c)).

Conditionally on the cut (the best unreleased score, at quantile W of M), the
r released scores are i.i.d. draws of M above it, so T | W ~ Bin(r,
gamma_bar(W)), and W, the (n - r)-th smallest of n uniforms, is Beta(n - r,
r + 1). Hence

  p(mu) = P[T <= u] = E_W[BinomCDF(u; r, gamma_bar(W))],

and the claim mu is rejected at level alpha when p(mu) < alpha. Only ranks
enter (r, n and u), so the statistics need no scale. gamma_bar falls as mu
grows, so p(mu) rises: the rejected claims are the mu below a threshold,
found by bracketing and Brent's method, and reported as the epsilon of mu-GDP
at delta. At mu = 0, gamma_bar = 1/2 and p is the binomial test of pure
guessing, BinomCDF(u; r, 1/2).

The expectation over W is a Gauss-Legendre quadrature in the Beta's
probability scale (w = Beta(n - r, r + 1).ppf(t), t in (0, 1)), where the
integrand is smooth; the mixture quantile is found by vectorized bisection,
and gamma_bar in log space (`log_ndtr`).

What this assumes, beyond the Gaussian claim: the n scores are independent
draws of M, as for n runs of one mechanism. Gaussian canaries of one
training run share one noise vector, which the paper gives no guarantee for
(measured to exceed the truth too often), so the audit uses it only for
orthogonal canaries, whose noise scores are exactly independent
(`audit.tight_bound`; DP-FTRL's `tree_audit`). docs/method/lower-bounds.md
has the figures.
"""

from __future__ import annotations

from typing import Optional

import numpy as np
import numpy.typing as npt
from scipy import special, stats

from tff_canary.stats.accounting import gaussian_accounting
from tff_canary.stats.bounds import lower_bounds
from tff_canary.stats import results
from tff_canary.stats.bounds import threshold_strategies
from tff_canary.stats import validation

# Released guesses, as fractions of the candidates, that the strategies
# choose among; the "fixed" default is DEFAULT_FRACTION.
RELEASE_FRACTIONS = (0.05, 0.1, 0.25, 0.5)
DEFAULT_FRACTION = 0.25
_NODES, _WEIGHTS = np.polynomial.legendre.leggauss(128)
_NODES = 0.5 * (_NODES + 1.0)
_WEIGHTS = 0.5 * _WEIGHTS
_BISECTIONS = 52
_MU_XTOL = 1e-7


def _mixture_quantile(w: np.ndarray, mu: float) -> np.ndarray:
  """c with (Phi(c) + Phi(c - mu))/2 = w, elementwise, by bisection."""
  low = np.full_like(w, -40.0)
  high = np.full_like(w, 40.0 + mu)
  for _ in range(_BISECTIONS):
    mid = 0.5 * (low + high)
    under = 0.5 * (special.ndtr(mid) + special.ndtr(mid - mu)) < w
    low = np.where(under, mid, low)
    high = np.where(under, high, mid)
  return 0.5 * (low + high)


def released_error_rate(w: npt.ArrayLike, mu: float) -> np.ndarray:
  """gamma_bar(w) = Phi(-c) / (Phi(-c) + Phi(mu - c)), c = M^-1(w)."""
  c = _mixture_quantile(np.asarray(w, dtype=np.float64), mu)
  log_out = special.log_ndtr(-c)
  return np.exp(log_out - np.logaddexp(log_out, special.log_ndtr(mu - c)))


def p_value(mu: float, num_candidates: int, released: int,
            mistakes: int) -> float:
  """P[T <= u] of the module docstring for the claim mu (>= 0)."""
  n, r, u = num_candidates, released, mistakes
  if u >= r:
    return 1.0
  if mu == 0.0:
    return float(stats.binom.cdf(u, r, 0.5))
  w = special.betaincinv(n - r, r + 1, _NODES)
  rate = released_error_rate(w, mu)
  return float(np.clip(np.sum(_WEIGHTS * stats.binom.cdf(u, r, rate)), 0, 1))


def largest_rejected_mu(num_candidates: int, released: int, mistakes: int,
                        alpha: float) -> float:
  """The largest mu with p(mu) < alpha (0 if not even mu = 0 is rejected)."""
  return lower_bounds.largest_rejected(
      lambda mu: p_value(mu, num_candidates, released, mistakes) - alpha,
      lambda excess: excess < 0.0, _MU_XTOL)


def tight_one_run_bound(statistics: npt.ArrayLike,
                        inserted_mask: npt.ArrayLike, *, delta: float,
                        confidence: float = 0.95,
                        strategy: threshold_strategies.Strategy = "fixed",
                        released: Optional[int] = None, seed: int = 0,
                        splits: int = threshold_strategies.MULTI_SPLITS
                        ) -> results.GaussianClaimBound:
  """The tight one-run lower bound on epsilon for a Gaussian claim.

  Args:
    statistics: 1-D array, one statistic per candidate canary (inserted
      canaries score higher).
    inserted_mask: 1-D bool array of the same length: which candidates the
      fair coins inserted.
    delta: delta in (0, 1) at which mu is turned into epsilon.
    confidence: the bound holds with this probability (under the module
      docstring's assumptions), in (0, 1).
    strategy: how the number released is chosen ("fixed" uses `released`;
      the others choose among `RELEASE_FRACTIONS`, "bonferroni_all" among
      every r in 1..n-1, each at alpha / (n - 1)).
    released: guesses released for "fixed", 1 <= r < n (default 25% of the
      candidates).
    seed: the random split's seed, for "split" and "multi_split".
    splits: the number of splits of "multi_split".

  Returns:
    A `GaussianClaimBound` with method "tight_one_run".
  """
  s, mask = threshold_strategies.check_coin_inputs(statistics, inserted_mask)
  delta, confidence = validation.as_levels(delta, confidence)
  strategy, splits, seed = threshold_strategies.check_strategy(
      strategy, splits, seed)
  n = s.size
  if released is None:
    released = max(1, round(DEFAULT_FRACTION * n))
  released = validation.as_int(released, "released", minimum=1)
  if released >= n:
    raise ValueError(f"released must be below the number of candidates "
                     f"({n}): the cut is the best unreleased guess; got "
                     f"released={released}.")
  below = threshold_strategies.sign_check(s, mask)

  def counts(index, fraction):  # (guesses, correct); None: `released`.
    r = released if fraction is None else min(
        index.size - 1, max(1, round(fraction * index.size)))
    return threshold_strategies.guess_counts(s[index], mask[index], r, 0)

  def bound_at(index, fraction, alpha):
    guesses, correct = counts(index, fraction)
    return (largest_rejected_mu(index.size, guesses, guesses - correct,
                                alpha), (guesses, correct))

  def exceeds(index, fraction, alpha, mu):
    guesses, correct = counts(index, fraction)
    return p_value(mu, index.size, guesses, guesses - correct) < alpha

  # "bonferroni_all": every r in 1..n-1, the grid's first.
  grid = [min(n - 1, max(1, round(f * n))) for f in RELEASE_FRACTIONS]
  every = list(dict.fromkeys(grid + sorted(set(range(1, n)) - set(grid))))
  mu, _, (guesses, correct) = threshold_strategies.choose_and_bound(
      n, bound_at, options=RELEASE_FRACTIONS, default=None, strategy=strategy,
      alpha=1.0 - confidence, seed=seed, splits=splits,
      all_options=[r / n for r in every], exceeds=exceeds)
  return results.GaussianClaimBound(
      epsilon=gaussian_accounting.gaussian_epsilon_of_mu(mu, delta), mu=mu,
      method="tight_one_run", strategy=strategy,
      guesses=guesses, correct=correct, num_candidates=n,
      num_inserted=int(mask.sum()), delta=delta, confidence=confidence,
      inserted_below_null=below)
