"""The SignConventionWarning fires in at most 0.1% of correct runs, as its
text says, and still on a sign error (tff_canary/stats/sign_tests.py; issue
34, item 17: the max model's fired in 82 of 300 correct runs).

The rates are measured on the tests themselves, vectorized over TRIALS
seeded simulations of correct runs; a test per call site shows that every
estimator and bound that warns does so exactly when its test rejects.
"""

import itertools
import math
import warnings

import numpy as np
import pytest
from scipy import special, stats

from tff_canary.stats import results
from tff_canary.stats import sign_tests
from tff_canary.stats.bounds import fdp_one_run
from tff_canary.stats.bounds import gdp_bound
from tff_canary.stats.bounds import lower_bounds
from tff_canary.stats.bounds import tight_one_run
from tff_canary.stats.estimators import estimates
from tff_canary.stats.estimators import max_of_rounds
from tff_canary.stats.estimators import scheduled_sums

LEVEL = sign_tests.SIGN_TEST_LEVEL
# 50,000 trials: a 0.1% test fires about 50 times (sd 7). Each rate check
# allows up to the binomial 99.99% quantile of a 0.1% rate (78), so a
# correct test fails it with probability below 1e-4 (the seeds are fixed:
# it passes or fails for good), while a 1% rate (500 expected), the old
# one-sample rule's 0.27% at n = 23 (135) and the max model's 8% to 27% fail
# it (the old Welch rule's 0.17% on maxima, 85 expected, mostly would).
# Where a trial is large, fewer: 12,500 allow 28 (125 at 1%), 2,000 allow 9
# (20 at 1%).
TRIALS = 50_000
DIM = 10_000
DELTA = 1e-5


def _upper(trials):
  return stats.binom.ppf(1 - 1e-4, trials, LEVEL)


def _fires_at_most_the_level(p):
  count, trials = int(np.sum(p < LEVEL)), p.size
  assert count <= _upper(trials), f"{count} of {trials} correct runs warned"
  return count


def _fires_at(p, level):
  """Exact at the boundary: the count is within the central 99.99% of a
  binomial at the test's attainable level (just below 0.001 for ranks)."""
  count = _fires_at_most_the_level(p)
  low = stats.binom.ppf(1e-4, p.size, level)
  assert count >= low, f"{count} of {p.size}: below {low}, not exact"


def _max_of(rng, rounds, shape):
  """Max of `rounds` N(0, 1), by inversion: P(max <= m) = Phi(m)^rounds,
  so max = -Phi^-1(1 - U^(1/rounds)) (-inf for no round)."""
  rounds = np.asarray(rounds, dtype=np.float64)
  with np.errstate(divide="ignore"):
    tail = -np.expm1(np.log(rng.random(shape)) / rounds)
  return np.where(rounds > 0, -special.ndtri(tail), -np.inf)


def _maxima(rng, theta, participation, num_rounds, trials=TRIALS, s=1e-3):
  """Max over rounds of N(0, s^2) cosines, a canary's p_j rounds shifted by
  theta s (`max_of_rounds`' model; p_j = 0 held out): the max of the
  shifted rounds' max and the others'."""
  p = np.asarray(participation)
  shape = (trials, p.size)
  return s * np.maximum(theta + _max_of(rng, p, shape),
                        _max_of(rng, num_rounds - p, shape))


def _attainable(n1, n2):
  cdf = sign_tests._rank_cdf(n1, n2)  # pylint: disable=protected-access
  return float(cdf[cdf < LEVEL].max())


def test_the_rank_law_is_exact():
  # Every split of the ranks, counted (U = pairs x > y), for small sizes.
  for n1, n2 in ((1, 1), (2, 3), (3, 2), (4, 4), (5, 3)):
    counts = np.zeros(n1 * n2 + 1)
    for ranks in itertools.combinations(range(n1 + n2), n1):
      counts[sum(ranks) - n1 * (n1 - 1) // 2] += 1
    expected = np.cumsum(counts) / math.comb(n1 + n2, n1)
    np.testing.assert_allclose(
        sign_tests._rank_cdf(n1, n2), expected,  # pylint: disable=protected-access
        rtol=1e-14)
  # And SciPy's exact Mann-Whitney p (another recursion) at the issue's sizes.
  rng = np.random.default_rng(0)
  x, y = rng.standard_normal(23) - 0.5, rng.standard_normal(17)
  assert sign_tests.two_sample_p(x, y) == pytest.approx(stats.mannwhitneyu(
      x, y, alternative="less", method="exact").pvalue, rel=1e-12)


def test_the_normal_approximation_is_conservative_in_the_tail():
  # Where the exact law is not computed (k^2 (N - k) > _EXACT_COST, or ties)
  # the normal p is used: it must not be below the exact one where p <= 1%.
  for n1, n2 in itertools.product((2, 5, 13, 31, 50), (2, 7, 40, 50, 200)):
    cdf = sign_tests._rank_cdf(n1, n2)  # pylint: disable=protected-access
    u = np.arange(cdf.size)
    n = n1 + n2
    normal = special.ndtr((u - n1 * n2 / 2 + 0.5)
                          / math.sqrt(n1 * n2 * (n + 1) / 12))
    tail = cdf <= 0.01
    assert np.all(normal[tail] >= cdf[tail]), (n1, n2)


@pytest.mark.parametrize("n1, n2, rounds, theta, participation", [
    (23, 17, 8, 0.0, 1),  # issue 34's run: TFF's DP tutorial, z = 1
    (23, 17, 8, 0.866, 1),
    (23, 17, 8, 0.866, (1, 2, 3)),  # canaries of unequal participation
    (23, 17, 8, 3.0, 1),
    (8, 6, 3, 0.0, 1),  # small: the exact law's attainable level 7.3e-4
    (40, 40, 80, 0.0, 1),  # the EMNIST job's shape at large noise
    (40, 40, 80, 0.3, 1),
    (200, 150, 5, 0.0, 1),  # beyond _EXACT_COST: the normal approximation
])
def test_maxima_of_correct_runs_warn_at_most_at_the_level(
    n1, n2, rounds, theta, participation):
  rng = np.random.default_rng([n1, n2, rounds, int(1000 * theta)])
  counts = np.resize(participation, n1)
  trials = TRIALS if n1 < 100 else TRIALS // 4
  x = _maxima(rng, theta, counts, rounds, trials)
  y = _maxima(rng, theta, np.zeros(n2, int), rounds, trials)
  p = sign_tests.two_sample_p(x, y)
  exact = min(n1, n2)**2 * (n1 + n2 - min(n1, n2)) <= sign_tests._EXACT_COST  # pylint: disable=protected-access
  if theta == 0.0 and exact:
    _fires_at(p, _attainable(n1, n2))
  else:
    _fires_at_most_the_level(p)


@pytest.mark.parametrize("n1, n2, sd", [(23, 17, 1.0), (5, 5, 1.0),
                                        (23, 17, 2.0), (1000, 1000, 1.0)])
def test_gaussian_scores_of_correct_runs_warn_at_most_at_the_level(n1, n2,
                                                                    sd):
  # The scheduled T (held-out null) and the Gaussian bounds' scores: inserted
  # of another variance (sd) and mean 0, the boundary of a correct run.
  rng = np.random.default_rng([n1, n2, int(sd)])
  trials = TRIALS if n1 < 1000 else TRIALS // 25
  x = sd * rng.standard_normal((trials, n1))
  y = rng.standard_normal((trials, n2))
  _fires_at_most_the_level(sign_tests.two_sample_p(x, y))


@pytest.mark.parametrize("n", [2, 5, 23, 100])
def test_one_sample_correct_runs_warn_at_the_level(n):
  # Final-model cosines of drowned canaries: Gaussian of mean 0, exact.
  rng = np.random.default_rng(n)
  x = rng.standard_normal((TRIALS, n)) / math.sqrt(DIM)
  _fires_at(sign_tests.one_sample_p(x), LEVEL)
  # The old rule, 3.09 standard errors with the sample sd, fired more
  # (0.27% at n = 23, 0.61% at n = 10, 1.8% at n = 5): past the tolerance.
  t = x.mean(axis=-1) * math.sqrt(n) / x.std(axis=-1, ddof=1)
  if n <= 10:
    assert np.sum(t < -special.ndtri(1 - LEVEL)) > _upper(TRIALS)


def test_one_sample_with_unequal_positive_means_warns_at_most_the_level():
  # Canaries of different participations: means in {0, mu}. The t-test is
  # exact only at equal means; here it is measured.
  rng = np.random.default_rng(7)
  for n, mu in ((5, 1.0), (5, 4.0), (23, 0.5), (23, 2.0)):
    means = np.where(np.arange(n) < n // 2, mu, 0.0)
    x = rng.standard_normal((TRIALS, n)) + means
    _fires_at_most_the_level(sign_tests.one_sample_p(x))


def test_sign_errors_still_warn():
  rng = np.random.default_rng(11)
  # Final model, u = theta_T - theta_0: cosines of mean -1.5 null sd, n = 23.
  x = (-1.5 + rng.standard_normal((1000, 23))) / math.sqrt(DIM)
  assert np.mean(sign_tests.one_sample_p(x) < LEVEL) > 0.9
  # All iterates over one round, negated aggregates, theta = 2, 23 + 17.
  x = -_maxima(rng, 2.0, np.ones(23, int), 1, trials=1000)
  y = _maxima(rng, 0.0, np.zeros(17, int), 1, trials=1000)
  assert np.mean(sign_tests.two_sample_p(x, y) < LEVEL) > 0.9


def _first(condition, draws):
  """The first simulated run meeting `condition` (the seeds are fixed)."""
  for run in draws:
    if condition(*run):
      return run
  raise AssertionError("no run met the condition")


def _old_two_sample_z(x, y):
  se = math.sqrt(x.var(ddof=1) / x.size + y.var(ddof=1) / y.size)
  return (y.mean() - x.mean()) / se


def _borderline_two_sample():
  """A correct run (23 + 17 maxima over 8 rounds, no signal) that the old
  rule (3.09 Welch standard errors) warned on, and the rank test does not."""
  rng = np.random.default_rng(3)
  xs = _maxima(rng, 0.0, np.ones(23, int), 8, trials=5000)
  ys = _maxima(rng, 0.0, np.zeros(17, int), 8, trials=5000)
  x, y = _first(lambda x, y: _old_two_sample_z(x, y) > 3.09
                and sign_tests.two_sample_p(x, y) >= LEVEL, zip(xs, ys))
  return x, y, 8


def _flipped_two_sample():
  """A sign error: one round, negated aggregates, theta = 3, 23 + 17."""
  rng = np.random.default_rng(4)
  return (-_maxima(rng, 3.0, np.ones(23, int), 1, trials=1)[0],
          _maxima(rng, 0.0, np.zeros(17, int), 1, trials=1)[0], 1)


# A correct run's 5 final-model cosines, 5.1 sample standard errors below 0:
# the old rule warned; Student's t on 4 degrees of freedom gives p = 0.0034.
_BORDERLINE_ONE = (-1.0 + 0.55 * np.linspace(-1.0, 1.0, 5)) / math.sqrt(DIM)
_FLIPPED_ONE = -(3.0 + np.random.default_rng(5).standard_normal(23)) / (
    math.sqrt(DIM))


def _coin(bound):
  return lambda x, y, rounds: bound(np.concatenate([x, y]), np.arange(
      x.size + y.size) < x.size, delta=DELTA)


ONE_SAMPLE_CALLS = {
    "epsilon_final": lambda x: estimates.epsilon_final(x, dim=DIM,
                                                       delta=DELTA),
    "epsilon_lo, exact null": lambda x: lower_bounds.epsilon_lo(
        x, dim=DIM, delta=DELTA),
    "epsilon_scheduled, exact null": lambda x: (
        scheduled_sums.epsilon_scheduled(x * math.sqrt(DIM), delta=DELTA)),
}
# Each takes (inserted, held_out, rounds the maxima are over).
TWO_SAMPLE_CALLS = {
    "epsilon_all": lambda x, y, _: estimates.epsilon_all(x, y, delta=DELTA),
    "max model": lambda x, y, rounds: max_of_rounds.epsilon_all_max_model(
        x, y, inserted_participation=np.ones(x.size, int),
        num_rounds=rounds, delta=DELTA),
    "epsilon_lo, held-out null": lambda x, y, _: lower_bounds.epsilon_lo(
        x, held_out=y, delta=DELTA),
    "epsilon_scheduled, held-out null": lambda x, y, _: (
        scheduled_sums.epsilon_scheduled(x * 1e3, y * 1e3, delta=DELTA)),
    "gdp_bound": lambda x, y, _: gdp_bound.gdp_bound(x, y, delta=DELTA),
    "one_run_bound": _coin(lower_bounds.one_run_bound),
    "fdp_one_run_bound": _coin(fdp_one_run.fdp_one_run_bound),
    "tight_one_run_bound": _coin(tight_one_run.tight_one_run_bound),
}


def _warned(call, *args):
  with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    result = call(*args)
  fired = [w for w in caught
           if issubclass(w.category, results.SignConventionWarning)]
  return result, fired


@pytest.mark.parametrize("name", list(ONE_SAMPLE_CALLS) + list(
    TWO_SAMPLE_CALLS))
def test_each_call_site_warns_exactly_when_its_test_rejects(name):
  # So every call site's false-warning rate is its test's, measured above.
  if name in ONE_SAMPLE_CALLS:
    call, test = ONE_SAMPLE_CALLS[name], sign_tests.one_sample_p
    borderline, flipped = (_BORDERLINE_ONE,), (_FLIPPED_ONE,)
    assert -_BORDERLINE_ONE.mean() / (_BORDERLINE_ONE.std(ddof=1) / math.sqrt(
        5)) > 5.0  # the old rule's 3.09 far exceeded
  else:
    call, test = TWO_SAMPLE_CALLS[name], sign_tests.two_sample_p
    borderline, flipped = _borderline_two_sample(), _flipped_two_sample()
  assert test(*borderline[:2]) >= LEVEL and test(*flipped[:2]) < LEVEL
  result, fired = _warned(call, *borderline)
  assert not fired and result.inserted_below_null  # recorded, not warned
  result, fired = _warned(call, *flipped)
  assert len(fired) == 1 and result.inserted_below_null
  text = str(fired[0].message)
  assert "p = " in text and "at most 0.001" in text
  assert "initial minus final" in text


def test_the_max_model_no_longer_warns_on_issue_34s_run():
  # Correct runs of the issue's sizes with no signal: the old rule (the
  # fitted theta more than 3.09 s / sqrt(23) below 0) warned on the first
  # that comes; the estimator now does not (rank-sum p >= 0.001).
  rng = np.random.default_rng(34)
  for _ in range(50):
    x = _maxima(rng, 0.0, np.ones(23, int), 8, trials=1)[0]
    y = _maxima(rng, 0.0, np.zeros(17, int), 8, trials=1)[0]
    lik = max_of_rounds._Likelihood(  # pylint: disable=protected-access
        np.concatenate([x, y]), np.r_[np.ones(23, int), np.zeros(17, int)], 8)
    s0 = y.std(ddof=1)
    *_, negative = max_of_rounds._fit(  # pylint: disable=protected-access
        lik, (x.mean() - y.mean()) / s0, math.log(s0))
    if negative is not None and -negative * math.sqrt(23) > 3.09:
      break
  else:
    raise AssertionError("no run the old rule warned on")
  result, fired = _warned(TWO_SAMPLE_CALLS["max model"], x, y, 8)
  assert result.inserted_below_null and not fired
  assert sign_tests.two_sample_p(x, y) >= LEVEL
