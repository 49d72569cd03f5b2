"""The f-DP one-run audit of a Gaussian claim (Mahloujifar, Melis & Chaudhuri 2024).

"Auditing f-Differential Privacy in One Run", arXiv 2410.22235 (ICML 2025),
its reconstruction game with abstention and the numerical audit "with cap"
(docs/method/lower-bounds.md). m candidate canaries are each inserted by a fair coin; the
auditor guesses "in" for the k+ highest statistics and "out" for the k- lowest
and abstains on the rest: r = k+ + k- guesses, v of them right. The claim is
that the mechanism is f-DP for the Gaussian trade-off curve of mu-GDP,
f(x) = Phi(Phi^-1(1 - x) - mu). With g(x) = Phi(Phi^-1(x) - mu) (the inverse
of the blow-up x -> 1 - f(x)) and alpha = 1 - confidence:

  R = alpha v / m,  H = alpha (r - v) / m,
  for i = v - 1 down to 0:
    H' = max(H, g(R));  stop if H' = H (nothing changes after that);
    R <- min(R + (i / (r - i)) (H' - H), 1);  H <- H',

and the claim is rejected at level alpha when R + H > r / m. This is docs/method/lower-bounds.md's restatement; it agrees with the recursion `rh_with_cap` /
`audit_rh_with_cap` of the reference implementation that the paper's authors
released with PrivacyGuard (facebookresearch/PrivacyGuard,
`fdp_analysis_node.py`), which starts from the same R and H, runs the same
update (without the cap at 1, which only keeps Phi^-1 defined: once R reaches
1 the claim is rejected either way) and passes a claim when R + H <= r / m.
The paper's text was not reachable from here to check equation numbers; the
tests check the recursion's guarantee directly by Monte Carlo (a true claim is
rejected in at most alpha of trials) and its limit mu = 0.

g falls as mu grows, so R + H does too: a claim is rejected for every mu
below a threshold and for none above it. The bound is that largest rejected
mu (bracketed, then Brent's method), reported as the epsilon of mu-GDP at
delta (Balle & Wang 2018, Theorem 8; `gaussian_accounting`). It is a lower
bound on the epsilon of a mechanism whose trade-off curve is Gaussian; see
`results.GaussianClaimBound`.

Choosing k+ and k- from the data must be paid for (`threshold_strategies`):
"fixed" is k+ = k- = 5% of the candidates (as `lower_bounds.one_run_bound`),
the others choose among `GUESS_FRACTIONS` or, "bonferroni_all", every k from
1 to m // 2 (skipping a k at which the recursion does not reject the best mu
so far, which cannot change the maximum).
"""

from __future__ import annotations

from typing import Optional

import numpy.typing as npt
from scipy import special

from tff_canary.stats.accounting import gaussian_accounting
from tff_canary.stats.bounds import lower_bounds
from tff_canary.stats import results
from tff_canary.stats.bounds import threshold_strategies
from tff_canary.stats import validation

# Guesses per side, as fractions of the candidates, that the strategies choose
# among; the "fixed" default is DEFAULT_FRACTION (as one_run_bound's 5%).
GUESS_FRACTIONS = (0.025, 0.05, 0.1, 0.2)
DEFAULT_FRACTION = 0.05
_MU_XTOL = 1e-10


def inverse_blow_up(x: float, mu: float) -> float:
  """g(x) = Phi(Phi^-1(x) - mu) for x in [0, 1]: g(0) = 0, g(1) = 1."""
  if x <= 0.0:
    return 0.0
  if x >= 1.0:
    return 1.0
  return float(special.ndtr(special.ndtri(x) - mu))


def rejection_margin(mu: float, guesses: int, correct: int,
                     num_candidates: int, alpha: float) -> float:
  """R + H - r/m of the module docstring: the claim mu is rejected iff > 0."""
  m, r, v = num_candidates, guesses, correct
  big_r, big_h = alpha * v / m, alpha * (r - v) / m
  for i in range(v - 1, -1, -1):
    new_h = max(big_h, inverse_blow_up(big_r, mu))
    if new_h == big_h:
      break
    big_r = min(big_r + (i / (r - i)) * (new_h - big_h), 1.0)
    big_h = new_h
  return big_r + big_h - r / m


def largest_rejected_mu(guesses: int, correct: int, num_candidates: int,
                        alpha: float) -> float:
  """The largest mu whose claim is rejected (0 if not even mu = 0 is)."""
  if correct == 0:
    return 0.0
  return lower_bounds.largest_rejected(  # g -> 0 as mu grows, R + H too
      lambda mu: rejection_margin(mu, guesses, correct, num_candidates, alpha),
      lambda margin: margin > 0.0, _MU_XTOL)


def all_guess_fractions(num_candidates: int) -> list[float]:
  """k / m for every k+ = k- = k in 1..m // 2 ("bonferroni_all"), the grid's
  k first (they usually hold the maximum, so more of the rest are skipped)."""
  m = num_candidates
  grid = [max(1, round(f * m)) for f in GUESS_FRACTIONS if 2 * round(f * m) <= m]
  rest = sorted(set(range(1, m // 2 + 1)) - set(grid))
  return [k / m for k in dict.fromkeys(grid + rest)]


def fdp_one_run_bound(statistics: npt.ArrayLike, inserted_mask: npt.ArrayLike,
                      *, delta: float, confidence: float = 0.95,
                      strategy: threshold_strategies.Strategy = "fixed",
                      k_plus: Optional[int] = None,
                      k_minus: Optional[int] = None, seed: int = 0,
                      splits: int = threshold_strategies.MULTI_SPLITS
                      ) -> results.GaussianClaimBound:
  """The f-DP one-run lower bound on epsilon for a Gaussian claim.

  Args:
    statistics: 1-D array, one statistic per candidate canary (any real
      scores; inserted canaries score higher).
    inserted_mask: 1-D bool array of the same length: which candidates the
      fair coins inserted.
    delta: delta in (0, 1) at which mu is turned into epsilon.
    confidence: the bound holds with this probability, in (0, 1).
    strategy: how the number of guesses is chosen ("fixed" uses k_plus and
      k_minus; the others choose among `GUESS_FRACTIONS`, k+ = k-;
      "bonferroni_all" among every k+ = k-).
    k_plus: guesses "in" for "fixed" (default 5% of the candidates, at
      least 1).
    k_minus: guesses "out" for "fixed" (the same default).
    seed: the random split's seed, for "split" and "multi_split".
    splits: the number of splits of "multi_split".

  Returns:
    A `GaussianClaimBound` with method "fdp_one_run".
  """
  s, mask = threshold_strategies.check_coin_inputs(statistics, inserted_mask)
  delta, confidence = validation.as_levels(delta, confidence)
  strategy, splits, seed = threshold_strategies.check_strategy(
      strategy, splits, seed)
  m = s.size
  k_plus, k_minus = threshold_strategies.check_guesses(
      k_plus, k_minus, m, max(1, round(DEFAULT_FRACTION * m)))
  below = threshold_strategies.sign_check(s, mask)

  def counts(index, fraction):  # (guesses, correct); None: the fixed k's.
    kp, km = (k_plus, k_minus) if fraction is None else (
        (max(1, round(fraction * index.size)),) * 2)
    return threshold_strategies.guess_counts(s[index], mask[index], kp, km)

  def bound_at(index, fraction, alpha):
    guesses, correct = counts(index, fraction)
    return (largest_rejected_mu(guesses, correct, index.size, alpha),
            (guesses, correct))

  def exceeds(index, fraction, alpha, mu):
    guesses, correct = counts(index, fraction)
    return correct > 0 and rejection_margin(mu, guesses, correct, index.size,
                                            alpha) > 0.0

  mu, _, (guesses, correct) = threshold_strategies.choose_and_bound(
      m, bound_at, options=GUESS_FRACTIONS, default=None, strategy=strategy,
      alpha=1.0 - confidence, seed=seed, splits=splits,
      all_options=all_guess_fractions(m), exceeds=exceeds)
  return results.GaussianClaimBound(
      epsilon=gaussian_accounting.gaussian_epsilon_of_mu(mu, delta), mu=mu, method="fdp_one_run",
      strategy=strategy, guesses=guesses, correct=correct, num_candidates=m,
      num_inserted=int(mask.sum()), delta=delta, confidence=confidence,
      inserted_below_null=below)


__all__ = ["GUESS_FRACTIONS", "all_guess_fractions", "fdp_one_run_bound", "inverse_blow_up",
           "largest_rejected_mu", "rejection_margin"]
