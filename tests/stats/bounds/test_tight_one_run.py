"""The tight one-run bound (Xiang et al. 2025; docs/method/lower-bounds.md)."""


import numpy as np
import pytest
from scipy import integrate, stats

from tff_canary.stats.accounting import gaussian_accounting
from tff_canary.stats.bounds.tight_one_run import (largest_rejected_mu, p_value,
                                            released_error_rate,
                                            tight_one_run_bound)

DELTA = 1e-6


def _mistakes(rng, mu, n, r):
  mask = rng.random(n) < 0.5
  s = rng.standard_normal(n) + mu * mask
  return s, mask, int((~mask[np.argsort(s)[-r:]]).sum())


def test_perfect_privacy_claim_is_the_binomial_test():
  for u in (10, 25, 40):
    assert p_value(0.0, 500, 60, u) == pytest.approx(
        stats.binom.cdf(u, 60, 0.5), rel=1e-12)
  # The quadrature agrees with that limit as mu -> 0.
  assert p_value(1e-9, 500, 60, 25) == pytest.approx(
      stats.binom.cdf(25, 60, 0.5), rel=1e-5)


def test_released_error_rate_against_quadrature():
  # gamma_bar(w) = E[1/(1 + L(X)) | X > c] under the mixture, c = M^-1(w);
  # integrated numerically here from the densities, independently.
  mu = 1.3
  for w in (0.3, 0.75, 0.99):
    c = 0.0
    c = __import__("scipy.optimize").optimize.brentq(
        lambda t: 0.5 * (stats.norm.cdf(t) + stats.norm.cdf(t - mu)) - w,
        -20, 20)
    num = integrate.quad(lambda x: 0.5 * stats.norm.pdf(x), c, np.inf)[0]
    assert released_error_rate([w], mu)[0] == pytest.approx(
        num / (1 - w), rel=1e-7)


def test_p_value_against_monte_carlo():
  # 4000 seeded games of independent scores at mu = 1, n = 200, r = 50: the
  # empirical P[T <= u] against the formula. The binomial sd of a frequency
  # near 0.3 over 4000 games is 0.007; 0.025 is ~3.5 sd.
  rng = np.random.default_rng(21)
  mistakes = np.array([_mistakes(rng, 1.0, 200, 50)[2] for _ in range(4000)])
  for u in (10, 13, 16):
    assert (mistakes <= u).mean() == pytest.approx(
        p_value(1.0, 200, 50, u), abs=0.025)


def test_true_claim_is_rejected_at_most_alpha():
  # 400 seeded games at mu = 1.5, n = 400, r = 100: a valid test rejects the
  # true claim in <= 5%. Its exact size here is 0.022 (discreteness), so 5%
  # is 3.9 binomial SE above it. (Where the size is near 5%, mu = 0.5, the
  # 20000-game test of tests/stats/bounds/test_bound_levels.py fails a test at 1.5 alpha.)
  rng = np.random.default_rng(22)
  rejected = sum(p_value(1.5, 400, 100, _mistakes(rng, 1.5, 400, 100)[2])
                 < 0.05 for _ in range(400))
  assert rejected / 400 <= 0.05


def test_bound_is_the_edge_of_rejection_and_grows_with_fewer_mistakes():
  mu = largest_rejected_mu(2000, 500, 60, 0.05)
  assert p_value(mu * 0.999, 2000, 500, 60) < 0.05 <= p_value(
      mu * 1.001, 2000, 500, 60)
  assert largest_rejected_mu(2000, 500, 40, 0.05) > mu
  assert largest_rejected_mu(2000, 500, 250, 0.05) == 0.0  # chance level
  assert largest_rejected_mu(2000, 500, 500, 0.05) == 0.0  # all wrong


def test_recovers_most_of_a_large_epsilon():
  # The authors report ~90% of epsilon ~ 10 recovered from 1000 canaries. On
  # independent scores at epsilon 10 (2000 canaries, 500 released) the median
  # of 20 seeded runs must exceed 80% of it (measured 89% on the simulator).
  rng = np.random.default_rng(23)
  mu = 1.0 / gaussian_accounting.gaussian_noise_multiplier(10.0, DELTA)
  values = [tight_one_run_bound(*_mistakes(rng, mu, 2000, 500)[:2],
                                delta=DELTA).epsilon for _ in range(20)]
  assert np.median(values) > 8.0
  assert max(values) < 10.0 * 1.1  # bounded by the truth up to its noise


# The level without canary effect (the fixed release's exact size, the
# strategies over 400 runs at alpha): tests/stats/bounds/test_bound_levels.py.


@pytest.mark.parametrize("kwargs, error, match", [
    (dict(released=4), ValueError, "released"),
    (dict(released=0), ValueError, "released"),
    (dict(inserted_mask=[1, 0, 1, 0]), TypeError, "inserted_mask"),
    (dict(strategy="all"), ValueError, "strategy"),
    (dict(delta=2.0), ValueError, "delta"),
])
def test_bad_input_names_the_argument(kwargs, error, match):
  args = dict(statistics=[0.1, 0.2, 0.3, 0.4],
              inserted_mask=np.array([True, False, True, False]), delta=DELTA,
              released=2)
  args.update(kwargs)
  with pytest.raises(error, match=match):
    tight_one_run_bound(**args)
