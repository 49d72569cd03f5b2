"""The f-DP one-run bound (Mahloujifar, Melis & Chaudhuri 2024; docs/method/lower-bounds.md)."""

import math

import numpy as np
import pytest
from scipy import stats

from tff_canary.stats.accounting import gaussian_accounting
from tff_canary.stats.bounds.fdp_one_run import (fdp_one_run_bound, inverse_blow_up,
                                          largest_rejected_mu,
                                          rejection_margin)

DELTA = 1e-6


def _iid_game(rng, mu, m, k):
  """Fair coins, independent scores N(mu b, 1); top/bottom k guessed."""
  mask = rng.random(m) < 0.5
  s = rng.standard_normal(m) + mu * mask
  order = np.argsort(s)
  correct = int(mask[order[-k:]].sum() + (~mask[order[:k]]).sum())
  return s, mask, correct


def test_inverse_blow_up_is_the_gaussian_trade_off_mirrored():
  # g(x) = Phi(Phi^-1(x) - mu) = 1 - f(1 - x) for the GDP curve
  # f(a) = Phi(Phi^-1(1 - a) - mu): computed independently with stats.norm.
  for x in (1e-9, 0.01, 0.3, 0.9):
    f = stats.norm.cdf(stats.norm.ppf(1 - (1 - x)) - 0.7)
    assert inverse_blow_up(x, 0.7) == pytest.approx(f, rel=1e-12)
  assert inverse_blow_up(0.0, 1.0) == 0.0 and inverse_blow_up(1.0, 1.0) == 1.0
  assert inverse_blow_up(0.25, 0.0) == pytest.approx(0.25, rel=1e-14)


def test_claim_of_perfect_privacy_is_rejected_at_most_alpha_exactly():
  # At mu = 0 every guess is a fair coin: v ~ Bin(r, 1/2) exactly. Summing the
  # binomial pmf over the v the recursion rejects gives its exact size, which
  # must be <= alpha (no Monte Carlo error here).
  m, r = 1000, 100
  size = sum(stats.binom.pmf(v, r, 0.5) for v in range(r + 1)
             if rejection_margin(0.0, r, v, m, 0.05) > 0)
  assert size <= 0.05
  # ... and it is a real test: it rejects when nearly every guess is right.
  assert rejection_margin(0.0, r, 90, m, 0.05) > 0


def test_true_claim_is_rejected_at_most_alpha_by_monte_carlo():
  # Independent scores of a mu-GDP mechanism (its worst-case pair of
  # distributions): 400 seeded games at mu = 1. A valid test rejects the true
  # claim in <= 5%. This test is conservative at mu > 0 (it rejected none of
  # these), so 5% itself is far above its rate; the exact test at mu = 0
  # (above, and tests/stats/bounds/test_bound_levels.py at a sharp size) is where it is
  # nearly tight and where a liberal error shows.
  rng = np.random.default_rng(11)
  rejected = 0
  for _ in range(400):
    _, _, correct = _iid_game(rng, 1.0, 400, 20)
    rejected += rejection_margin(1.0, 40, correct, 400, 0.05) > 0
  assert rejected / 400 <= 0.05


def test_rejection_weakens_as_mu_grows_and_the_bound_is_its_edge():
  mu = largest_rejected_mu(200, 170, 2000, 0.05)
  assert mu > 0
  assert rejection_margin(mu * 0.999, 200, 170, 2000, 0.05) > 0
  assert rejection_margin(mu * 1.001, 200, 170, 2000, 0.05) <= 0
  # More correct guesses, larger bound.
  assert largest_rejected_mu(200, 180, 2000, 0.05) > mu


def test_degenerate_games():
  assert largest_rejected_mu(100, 0, 1000, 0.05) == 0.0   # nothing right
  assert largest_rejected_mu(100, 50, 1000, 0.05) == 0.0  # chance level
  top = largest_rejected_mu(100, 100, 1000, 0.05)         # all right
  assert 0 < top < math.inf


def test_bound_on_the_gaussian_mechanism_is_valid_and_informative():
  rng = np.random.default_rng(12)
  mu = 1.0 / gaussian_accounting.gaussian_noise_multiplier(3.0, DELTA)
  values = []
  for _ in range(40):
    s, mask, _ = _iid_game(rng, mu, 2000, 100)
    values.append(fdp_one_run_bound(s, mask, delta=DELTA).epsilon)
  values = np.array(values)
  # Valid: at most a few of 40 above the truth (5% expected; 5 of 40 has
  # binomial probability < 1% under 5%). Informative: the reference library's
  # median on this setting was 1.22 at true epsilon 3.
  assert (values > 3.0).sum() <= 4
  assert np.median(values) > 1.22


# Every strategy's level without canary effect (the fixed one's exact size,
# the others' over 400 runs at alpha): tests/stats/bounds/test_bound_levels.py.


def test_result_keeps_its_game_and_says_what_it_assumes():
  rng = np.random.default_rng(14)
  s, mask, correct = _iid_game(rng, 2.0, 1000, 50)
  bound = fdp_one_run_bound(s, mask, delta=DELTA)
  assert (bound.guesses, bound.correct) == (100, correct)
  assert bound.epsilon == pytest.approx(
      gaussian_accounting.gaussian_epsilon_of_mu(bound.mu, DELTA), rel=1e-12)
  assert "Gaussian" in str(bound) and bound.method == "fdp_one_run"


@pytest.mark.parametrize("kwargs, error, match", [
    (dict(inserted_mask=[1, 0, 1, 0]), TypeError, "inserted_mask"),
    (dict(inserted_mask=np.array([True, False])), ValueError, "inserted_mask"),
    (dict(k_plus=0, k_minus=0), ValueError, "k_plus"),
    (dict(k_plus=3, k_minus=3), ValueError, "k_plus"),
    (dict(strategy="best"), ValueError, "strategy"),
    (dict(splits=0), ValueError, "splits"),
    (dict(delta=0.0), ValueError, "delta"),
    (dict(confidence=1.0), ValueError, "confidence"),
    (dict(statistics=[0.1, np.nan, 0.2, 0.3]), ValueError, "statistics"),
])
def test_bad_input_names_the_argument(kwargs, error, match):
  args = dict(statistics=[0.1, 0.2, 0.3, 0.4],
              inserted_mask=np.array([True, False, True, False]), delta=DELTA,
              k_plus=1, k_minus=1)
  args.update(kwargs)
  with pytest.raises(error, match=match):
    fdp_one_run_bound(**args)
