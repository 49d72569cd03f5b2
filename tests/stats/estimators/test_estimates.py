"""epsilon-final and epsilon-all (docs/method/estimates.md)."""

import dataclasses
import json
import warnings

import numpy as np
import pytest

from tff_canary.stats import results
from tff_canary.stats.estimators import two_gaussians
from tff_canary.stats.estimators.estimates import epsilon_all, epsilon_final

DIM = 1_000_000
DELTA = 1e-6


def _draws(rng, mean_in_stds, n=1000, std_ratio=1.0, dim=DIM):
  """n cosines ~ N(mean_in_stds / sqrt(d), std_ratio^2 / d)."""
  return (mean_in_stds + std_ratio * rng.standard_normal(n)) / np.sqrt(dim)


def test_mean_only_recovers_the_epsilon_of_the_true_mean():
  rng = np.random.default_rng(0)
  z = 1.54  # noise multiplier of epsilon = 3 at delta = 1e-6 (docs/method/reference-numbers.md)
  truth = two_gaussians.epsilon_for_delta(DELTA, 0, 1, 1 / z, 1)
  estimates = [epsilon_final(_draws(rng, 1 / z), dim=DIM, delta=DELTA).epsilon
               for _ in range(200)]
  # 200 runs of 1000 canaries: the mean's std error is ~0.16/sqrt(200) ~ 0.011.
  assert np.mean(estimates) == pytest.approx(truth, abs=0.05)
  assert 0.10 < np.std(estimates) < 0.22  # the paper's spread is 0.15


@pytest.mark.parametrize("method", ["mean_only", "fitted_variance"])
def test_interval_covers_the_truth(method):
  rng = np.random.default_rng(1)
  z, ratio = 1.54, 1.0
  truth = two_gaussians.epsilon_for_delta(DELTA, 0, 1, 1 / z, ratio)
  hits = 0
  trials = 300
  for _ in range(trials):
    est = epsilon_final(_draws(rng, 1 / z, std_ratio=ratio), dim=DIM,
                        delta=DELTA, method=method)
    hits += est.interval.low <= truth <= est.interval.high
  # Nominal 95%: the mean-only interval is exact, so with 300 trials its
  # coverage lies in 0.95 +- 0.04 (a binomial 99.9% band). The projection
  # interval is conservative by construction: at least 0.91, and above 0.95
  # in expectation.
  coverage = hits / trials
  assert 0.91 <= coverage
  if method == "mean_only":
    assert coverage <= 0.99


def test_fitted_variance_is_biased_up_by_sampling_noise_of_the_std():
  # docs/method/estimates.md: with 1000 canaries the fitted variance inflates epsilon.
  rng = np.random.default_rng(2)
  z = 4.22  # epsilon = 1
  fitted = [epsilon_final(_draws(rng, 1 / z), dim=DIM, delta=DELTA,
                          method="fitted_variance").epsilon for _ in range(100)]
  mean_only = [epsilon_final(_draws(rng, 1 / z), dim=DIM, delta=DELTA).epsilon
               for _ in range(100)]
  assert np.mean(fitted) > np.mean(mean_only) + 0.2


def test_fitted_variance_tracks_a_real_variance_difference():
  rng = np.random.default_rng(3)
  x = _draws(rng, 2.0, n=20000, std_ratio=1.5)
  truth = two_gaussians.epsilon_for_delta(DELTA, 0, 1, 2.0, 1.5)
  with pytest.warns(results.VarianceMismatchWarning, match="fitted-variance"):
    mean_only = epsilon_final(x, dim=DIM, delta=DELTA)
  fitted = epsilon_final(x, dim=DIM, delta=DELTA, method="fitted_variance")
  # n = 20000 pins the std to ~0.5%; epsilon moves ~10x that.
  assert fitted.epsilon == pytest.approx(truth, rel=0.1)
  assert mean_only.epsilon < 0.8 * truth
  assert fitted.sample_std == pytest.approx(1.5 / np.sqrt(DIM), rel=0.02)


def test_negative_mean_warns_and_says_so_in_the_result():
  rng = np.random.default_rng(4)
  x = _draws(rng, -1 / 1.54)  # the sign-flip bug: u = theta_T - theta_0
  with pytest.warns(results.SignConventionWarning, match="sign-convention"):
    est = epsilon_final(x, dim=DIM, delta=DELTA)
  assert est.inserted_below_null
  assert "WARNING" in str(est) and "sign" in str(est)
  ok = epsilon_final(-x, dim=DIM, delta=DELTA)
  assert not ok.inserted_below_null and "WARNING" not in str(ok)


def test_no_signal_gives_small_epsilon_and_interval_from_zero():
  rng = np.random.default_rng(5)
  x = _draws(rng, 0.0)
  with warnings.catch_warnings():
    warnings.simplefilter("ignore", results.SignConventionWarning)
    est = epsilon_final(x, dim=DIM, delta=DELTA)
  # |mean| ~ 1/sqrt(1000) null stds: epsilon tiny, interval reaches 0.
  assert est.epsilon < 0.2 and est.interval.low == 0.0


def test_result_keeps_its_inputs_and_is_frozen():
  rng = np.random.default_rng(6)
  x = _draws(rng, 0.5, n=500)
  est = epsilon_final(x, dim=DIM, delta=1e-5, method="fitted_variance",
                      confidence=0.9)
  assert (est.num_inserted, est.dim, est.delta, est.confidence, est.method,
          est.interval_method, est.statistic) == (
              500, DIM, 1e-5, 0.9, "fitted_variance", "projection", "final")
  assert est.inserted_mean == pytest.approx(x.mean())
  with pytest.raises(dataclasses.FrozenInstanceError):
    est.epsilon = 0.0
  line = str(est)
  assert "\n" not in line and "ε-final" in line and "fitted-variance" in line
  assert f"{est.epsilon:.4g}" in line
  json.dumps(est.as_dict())  # JSON-ready
  # Deterministic: the same input gives the same result.
  assert epsilon_final(x, dim=DIM, delta=1e-5, method="fitted_variance",
                       confidence=0.9) == est


def test_epsilon_all_interval_covers_the_truth():
  rng = np.random.default_rng(9)
  truth = two_gaussians.epsilon_for_delta(DELTA, 0.004, 0.001, 0.007, 0.0011)
  hits = 0
  for _ in range(200):
    est = epsilon_all(0.007 + 0.0011 * rng.standard_normal(1000),
                      0.004 + 0.001 * rng.standard_normal(1000), delta=DELTA)
    hits += est.interval.low <= truth <= est.interval.high
  # Conservative by construction (joint region at 95%): a 200-trial binomial
  # lower 99.9% limit for a 95% coverage is ~0.90.
  assert hits / 200 >= 0.90


def test_epsilon_all_matches_the_two_fitted_gaussians():
  rng = np.random.default_rng(7)
  held_out = 0.004 + 0.001 * rng.standard_normal(1000)
  inserted = 0.009 + 0.0012 * rng.standard_normal(1000)
  est = epsilon_all(inserted, held_out, delta=DELTA)
  expected = two_gaussians.epsilon_for_delta(
      DELTA, held_out.mean(), held_out.std(ddof=1), inserted.mean(),
      inserted.std(ddof=1))
  assert est.epsilon == pytest.approx(expected, rel=1e-12)
  assert est.interval.low < est.epsilon < est.interval.high
  assert est.statistic == "all" and est.num_held_out == 1000 and est.dim is None
  assert "ε-all" in str(est)
  with pytest.warns(results.SignConventionWarning):
    swapped = epsilon_all(held_out, inserted, delta=DELTA)
  assert swapped.inserted_below_null


def test_epsilon_all_handles_huge_separation():
  # The paper's noise-free StackOverflow run reports epsilon-all = 45800.
  rng = np.random.default_rng(8)
  held_out = 0.0035 + 0.0003 * rng.standard_normal(1000)
  inserted = 0.09 + 0.0004 * rng.standard_normal(1000)
  est = epsilon_all(inserted, held_out, delta=DELTA)
  assert 1e4 < est.epsilon < 1e6 and np.isfinite(est.interval.high)


BAD = [
    (dict(inserted=[]), ValueError, "inserted"),
    (dict(inserted=[0.1]), ValueError, "inserted"),
    (dict(inserted=np.zeros((3, 3))), ValueError, "inserted"),
    (dict(inserted=[0.1, np.nan, 0.2]), ValueError, r"inserted\[1\]"),
    (dict(inserted=[0.1, np.inf]), ValueError, "inserted"),
    (dict(inserted=[0.1, 1.5]), ValueError, "inserted"),
    (dict(inserted=[0.01, 0.01, 0.01]), ValueError, "zero variance"),
    (dict(inserted="0.1,0.2"), TypeError, "inserted"),
    (dict(inserted=[True, False]), TypeError, "inserted"),
    (dict(dim=1), ValueError, "dim"),
    (dict(dim=1000.0), TypeError, "dim"),
    (dict(delta=0.0), ValueError, "delta"),
    (dict(delta=1.5), ValueError, "delta"),
    (dict(confidence=1.0), ValueError, "confidence"),
    (dict(confidence=-0.1), ValueError, "confidence"),
    (dict(method="mean"), ValueError, "method"),
    (dict(method=None), ValueError, "method"),
]


@pytest.mark.parametrize("kwargs, error, match", BAD)
def test_epsilon_final_bad_input(kwargs, error, match):
  args = dict(inserted=[0.001, 0.002, 0.0015], dim=DIM, delta=DELTA)
  args.update(kwargs)
  with pytest.raises(error, match=match):
    epsilon_final(**args)


@pytest.mark.parametrize("kwargs, error, match", [
    (dict(held_out=[0.1]), ValueError, "held_out"),
    (dict(held_out=[[0.1, 0.2]]), ValueError, "held_out"),
    (dict(held_out=[0.2, 0.2]), ValueError, "held_out has zero variance"),
    (dict(inserted=None), TypeError, "inserted"),
    (dict(delta=-1e-6), ValueError, "delta"),
])
def test_epsilon_all_bad_input(kwargs, error, match):
  args = dict(inserted=[0.3, 0.31, 0.33], held_out=[0.1, 0.12, 0.11], delta=DELTA)
  args.update(kwargs)
  with pytest.raises(error, match=match):
    epsilon_all(**args)
