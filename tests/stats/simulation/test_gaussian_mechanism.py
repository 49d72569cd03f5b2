"""Tests of the Gaussian-mechanism simulators (tff_canary.stats.simulation.gaussian_mechanism).

The brute-force simulator materializes the vectors and is the reference; the
fast one (Bartlett decomposition) must agree with it in distribution, and both
must match the exact theory: held-out cosines follow the null law of docs/method/null-law.md; |rho|^2 = |sum of inserted|^2 + 2 sigma <S, z> + sigma^2 |z|^2 has mean
k + sigma^2 d and variance 2k(k-1)/d + 4 sigma^2 k + 2 sigma^4 d (the cross
terms <c_i, c_j> are pairwise uncorrelated with variance 1/d; odd moments of z
vanish); inserted cosines have mean 1/sqrt(sigma^2 d + k) up to relative O(1/d)
and variance (sigma^2 d + k - 1) / (d (sigma^2 d + k)) up to relative O(1/d).

Statistical tests use fixed seeds. Two-sample and one-sample KS tests pass at
p > 1e-3: if the laws agree the p-value is uniform, so a correct simulator
fails a given check with probability 1e-3 a priori, while the power checks
below show the same tests reject the kind of error they guard against. Moment
checks allow 4 standard errors (two-sided probability 6e-5 under a normal
approximation, which the sample sizes here make accurate).
"""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats

from tff_canary.stats.simulation import gaussian_mechanism as gm

_P_MIN = 1e-3
_Z = 4.0


def _runs(reps, simulator, seed0=0, **kwargs):
  # The mechanism's own statistics cos(c_j, rho), which the theory below is
  # about; the corrected ones are tested in test_known_canaries.py.
  kwargs.setdefault("remove_known_canaries", False)
  return [gm.simulate(seed=seed0 + r, simulator=simulator, **kwargs)
          for r in range(reps)]


def _null_cdf(dim):
  """Exact CDF of a held-out cosine: (1 + T)/2 ~ Beta((d-1)/2, (d-1)/2)."""
  law = stats.beta((dim - 1) / 2, (dim - 1) / 2)
  return lambda t: law.cdf((1 + np.asarray(t)) / 2)


def _norm2_moments(dim, k, sigma):
  mean = k + sigma**2 * dim
  var = 2 * k * (k - 1) / dim + 4 * sigma**2 * k + 2 * sigma**4 * dim
  return mean, var


def _check_mean(sample, mean, what):
  sample = np.asarray(sample)
  se = sample.std(ddof=1) / np.sqrt(sample.size)
  assert abs(sample.mean() - mean) < _Z * se, (
      f"{what}: mean {sample.mean():.6g} vs theory {mean:.6g} (se {se:.3g})")


def _check_variance(sample, var, what):
  """Sample variance against `var`, by the chi2 interval of a normal sample."""
  sample = np.asarray(sample)
  df = sample.size - 1
  ratio = sample.var(ddof=1) / var
  low, high = stats.chi2.ppf([1e-4, 1 - 1e-4], df) / df
  assert low < ratio < high, f"{what}: variance ratio {ratio:.4f} not in " \
                             f"({low:.4f}, {high:.4f})"


# ---------------------------------------------------------------- validation


@pytest.mark.parametrize("kwargs, error, needle", [
    (dict(dim="100"), TypeError, "dim"),
    (dict(dim=1), ValueError, "dim"),
    (dict(dim=100.0), TypeError, "dim"),
    (dict(num_inserted=-1), ValueError, "num_inserted"),
    (dict(num_inserted=2.5), TypeError, "num_inserted"),
    (dict(num_held_out=True), TypeError, "num_held_out"),
    (dict(noise_std=-0.1), ValueError, "noise_std"),
    (dict(noise_std=float("nan")), ValueError, "noise_std"),
    (dict(noise_std="1"), TypeError, "noise_std"),
    (dict(seed=-1), ValueError, "seed"),
    (dict(seed=None), TypeError, "seed"),
    (dict(simulator="slow"), ValueError, "simulator"),
    (dict(simulator="brute", block_size=0), ValueError, "block_size"),
    (dict(num_inserted=0, num_held_out=0), ValueError, "num_held_out"),
    (dict(num_inserted=0, noise_std=0.0), ValueError, "noise_std"),
    (dict(dim=10, num_inserted=10), ValueError, "brute"),
])
def test_simulate_refuses_bad_arguments(kwargs, error, needle):
  args = dict(dim=100, num_inserted=3, num_held_out=2, noise_std=1.0, seed=0)
  args.update(kwargs)
  with pytest.raises(error, match=needle):
    gm.simulate(**args)


@pytest.mark.parametrize("kwargs, error, needle", [
    (dict(num_candidates=0), ValueError, "num_candidates"),
    (dict(num_candidates=np.float64(4)), TypeError, "num_candidates"),
    (dict(dim=10, num_candidates=40), ValueError, "brute"),
    (dict(simulator=None), ValueError, "simulator"),
])
def test_simulate_coin_refuses_bad_arguments(kwargs, error, needle):
  args = dict(dim=100, num_candidates=6, noise_std=1.0, seed=0)
  args.update(kwargs)
  with pytest.raises(error, match=needle):
    gm.simulate_coin(**args)


def test_fast_works_at_the_smallest_allowed_dim():
  # d = k + 1 is the boundary of the Bartlett decomposition (L_kk^2 ~ chi2(1)).
  run = gm.simulate(dim=6, num_inserted=5, num_held_out=4, noise_std=0.5,
                    seed=3)
  assert run.inserted.shape == (5,) and run.held_out.shape == (4,)
  assert np.all(np.abs(run.inserted) <= 1) and np.all(np.abs(run.held_out) <= 1)


# ------------------------------------------------------- exact small cases


@pytest.mark.parametrize("simulator", gm.SIMULATORS)
def test_one_noiseless_canary_is_the_output(simulator):
  # rho = c_1 exactly: cosine 1 and |rho| = 1.
  run = gm.simulate(dim=50, num_inserted=1, num_held_out=3, noise_std=0.0,
                    seed=7, simulator=simulator)
  np.testing.assert_allclose(run.inserted, [1.0], rtol=0, atol=1e-14)
  assert run.output_norm == pytest.approx(1.0, abs=1e-14)


@pytest.mark.parametrize("simulator", gm.SIMULATORS)
def test_two_noiseless_canaries_have_cosine_half_the_norm(simulator):
  # rho = c_1 + c_2 with a = <c_1, c_2>: |rho|^2 = 2 (1 + a) and
  # cos(c_i, rho) = (1 + a) / |rho| = |rho| / 2 for both canaries.
  for seed in range(5):
    run = gm.simulate(dim=30, num_inserted=2, num_held_out=0, noise_std=0.0,
                      seed=seed, simulator=simulator,
                      remove_known_canaries=False)
    np.testing.assert_allclose(run.inserted, run.output_norm / 2, rtol=1e-12)


# -------------------------------------------------- determinism and records


@pytest.mark.parametrize("simulator", gm.SIMULATORS)
def test_same_seed_gives_identical_arrays(simulator):
  args = dict(dim=2000, num_inserted=20, num_held_out=15, noise_std=0.7,
              simulator=simulator)
  one, two = gm.simulate(seed=11, **args), gm.simulate(seed=11, **args)
  np.testing.assert_array_equal(one.inserted, two.inserted)
  np.testing.assert_array_equal(one.held_out, two.held_out)
  assert one.output_norm == two.output_norm
  other = gm.simulate(seed=12, **args)
  assert not np.array_equal(one.inserted, other.inserted)
  assert not np.array_equal(one.held_out, other.held_out)
  coin = dict(dim=2000, num_candidates=30, noise_std=0.7, simulator=simulator)
  one, two = gm.simulate_coin(seed=5, **coin), gm.simulate_coin(seed=5, **coin)
  np.testing.assert_array_equal(one.statistics, two.statistics)
  np.testing.assert_array_equal(one.inserted_mask, two.inserted_mask)


def test_run_keeps_its_inputs_and_is_read_only():
  run = gm.simulate(dim=np.int64(500), num_inserted=4, num_held_out=6,
                    noise_std=1, seed=2, simulator="brute", block_size=3)
  assert (run.dim, run.num_inserted, run.num_held_out, run.noise_std,
          run.seed, run.simulator, run.block_size) == (500, 4, 6, 1.0, 2,
                                                       "brute", 3)
  assert type(run.dim) is int and type(run.noise_std) is float
  with pytest.raises(ValueError):
    run.inserted[0] = 0.0
  with pytest.raises(AttributeError):
    run.noise_std = 2.0  # frozen
  coin = gm.simulate_coin(dim=500, num_candidates=9, noise_std=1.0, seed=2)
  assert coin.inserted_mask.dtype == bool and coin.statistics.shape == (9,)
  with pytest.raises(ValueError):
    coin.inserted_mask[0] = True


def test_brute_block_size_only_changes_rounding():
  args = dict(dim=3000, num_inserted=13, num_held_out=8, noise_std=0.3,
              seed=4, simulator="brute")
  reference = gm.simulate(**args)
  for block_size in (1, 5, 100):
    run = gm.simulate(block_size=block_size, **args)
    np.testing.assert_allclose(run.inserted, reference.inserted, rtol=1e-12)
    np.testing.assert_allclose(run.held_out, reference.held_out, rtol=1e-12,
                               atol=1e-15)


def test_coin_mask_is_shared_by_simulators_and_fair():
  masks = []
  for seed in range(40):
    fast = gm.simulate_coin(dim=1000, num_candidates=50, noise_std=1.0,
                            seed=seed)
    brute = gm.simulate_coin(dim=1000, num_candidates=50, noise_std=1.0,
                             seed=seed, simulator="brute", block_size=50)
    np.testing.assert_array_equal(fast.inserted_mask, brute.inserted_mask)
    masks.append(fast.inserted_mask)
  # 2000 fair coins: the count of heads has sd sqrt(2000)/2 = 22.4, so 4 sd
  # around 1000 is [910, 1090].
  heads = int(np.sum(masks))
  assert 910 < heads < 1090


def test_coin_statistics_separate_inserted_from_held_out():
  # sigma = 0.5 at d = 4e4: inserted mean 1/sqrt(1e4 + ~150) ~ 0.0099, held-out
  # mean 0, both with sd ~ 1/sqrt(d) = 0.005, so with ~150 of each the group
  # means differ by ~15 standard errors; a mask misaligned with the statistics
  # would make them equal.
  run = gm.simulate_coin(dim=40000, num_candidates=300, noise_std=0.5, seed=1)
  inserted = run.statistics[run.inserted_mask]
  held_out = run.statistics[~run.inserted_mask]
  k = inserted.size
  _check_mean(inserted, 1 / np.sqrt(0.25 * 40000 + k), "coin inserted")
  _check_mean(held_out, 0.0, "coin held-out")


# ------------------------------------------- fast vs brute, in distribution


@pytest.fixture(scope="module")
def runs_2e4():
  """d = 2e4, 30 + 30 canaries, sigma = 0.5: 150 brute runs, 1500 fast runs.

  The brute-force runs are the expensive part of this file (~13 s).
  """
  args = dict(dim=20000, num_inserted=30, num_held_out=30, noise_std=0.5)
  return {"brute": _runs(150, "brute", **args),
          "fast": _runs(1500, "fast", seed0=10000, **args), "args": args}


def _pool(runs, field):
  return np.concatenate([getattr(run, field) for run in runs])


def test_fast_and_brute_agree_at_d_2e4(runs_2e4):
  # Held-out cosines are exactly i.i.d. (independent of rho); inserted cosines
  # of one run are correlated only through shared terms of relative size
  # 1/(sigma^2 d + k) = 1/5030, a design effect of 1 + 29/5030 on 30 per run,
  # negligible for the KS test. |rho| is one value per run, i.i.d.
  brute, fast = runs_2e4["brute"], runs_2e4["fast"]
  for field in ("inserted", "held_out"):
    p = stats.ks_2samp(_pool(brute, field), _pool(fast, field)).pvalue
    assert p > _P_MIN, f"{field}: KS p = {p:.2e}"
  norms = [np.array([run.output_norm for run in runs]) for runs in (brute,
                                                                    fast)]
  assert stats.ks_2samp(*norms).pvalue > _P_MIN
  # Power: the same test tells inserted from held-out cosines at once (the
  # means differ by 0.014, 2 sd of a cosine), and a 1% error in |rho|.
  assert stats.ks_2samp(_pool(brute, "inserted"),
                        _pool(fast, "held_out")).pvalue < 1e-100
  assert stats.ks_2samp(norms[0] * 1.01, norms[1]).pvalue < _P_MIN


@pytest.mark.parametrize("simulator", gm.SIMULATORS)
def test_moments_match_theory_at_d_2e4(runs_2e4, simulator):
  runs, args = runs_2e4[simulator], runs_2e4["args"]
  d, k, sigma = args["dim"], args["num_inserted"], args["noise_std"]
  held_out = _pool(runs, "held_out")
  _check_mean(held_out, 0.0, "held-out")
  _check_variance(held_out, 1 / d, "held-out")
  # One mean per run: i.i.d. across runs whatever the dependence within one.
  run_means = [run.inserted.mean() for run in runs]
  _check_mean(run_means, 1 / np.sqrt(sigma**2 * d + k), "inserted")
  within = np.mean([run.inserted.var(ddof=1) for run in runs])
  expected = (sigma**2 * d + k - 1) / (d * (sigma**2 * d + k))
  # The pooled within-run variance has len(runs) * 29 degrees of freedom:
  # relative sd sqrt(2 / 4350) = 2.1% for brute, 0.7% for fast.
  df = len(runs) * (k - 1)
  assert abs(within / expected - 1) < _Z * np.sqrt(2 / df)
  mean, var = _norm2_moments(d, k, sigma)
  norm2 = [run.output_norm**2 for run in runs]
  _check_mean(norm2, mean, "|rho|^2")
  _check_variance(norm2, var, "|rho|^2")


def test_fast_and_brute_agree_where_no_approximation_holds():
  # d = 6 with k = 4: cosines are far from Gaussian, (1+T)/2 ~ Beta(2.5, 2.5),
  # |rho|^2 is strongly skewed; any shortcut in the fast simulator beyond the
  # exact Bartlett decomposition would show. Brute runs are cheap at d = 6.
  args = dict(dim=6, num_inserted=4, num_held_out=4, noise_std=0.3)
  brute = _runs(1500, "brute", **args)
  fast = _runs(1500, "fast", seed0=50000, **args)
  # Within one run the 4 inserted cosines are strongly dependent here, so the
  # two-sample test takes one canary per run (the first and the last, which
  # sit in different positions of the Bartlett factor).
  for column in (0, 3):
    a = [run.inserted[column] for run in brute]
    b = [run.inserted[column] for run in fast]
    assert stats.ks_2samp(a, b).pvalue > _P_MIN
  a = [run.output_norm for run in brute]
  b = [run.output_norm for run in fast]
  assert stats.ks_2samp(a, b).pvalue > _P_MIN
  mean, var = _norm2_moments(6, 4, 0.3)
  for runs in (brute, fast):
    norm2 = np.array([run.output_norm**2 for run in runs])
    _check_mean(norm2, mean, "|rho|^2 at d=6")
    # Held-out cosines against the exact null law, one-sample.
    assert stats.kstest(_pool(runs, "held_out"), _null_cdf(6)).pvalue > _P_MIN
  # Power: the N(0, 1/d) approximation of the null is rejected at d = 6.
  assert stats.kstest(_pool(brute, "held_out"),
                      stats.norm(0, 1 / np.sqrt(6)).cdf).pvalue < _P_MIN


def test_fast_and_brute_agree_across_bartlett_blocks():
  # k = 300 > 256 rows per Bartlett block, so the fast simulator's second
  # block is used. Here inserted cosines of one run are correlated (design
  # effect ~ 1 + 299/(0.04*1000 + 300) = 1.9), so only per-run values (mean of
  # the inserted cosines, |rho|, and the last canary, in the second block)
  # are compared.
  args = dict(dim=1000, num_inserted=300, num_held_out=1, noise_std=0.2)
  brute = _runs(60, "brute", block_size=300, **args)
  fast = _runs(600, "fast", seed0=70000, **args)
  for value in (lambda run: run.inserted.mean(), lambda run: run.output_norm,
                lambda run: run.inserted[-1]):
    a, b = [value(run) for run in brute], [value(run) for run in fast]
    assert stats.ks_2samp(a, b).pvalue > _P_MIN
  mean, var = _norm2_moments(1000, 300, 0.2)
  for runs in (brute, fast):
    norm2 = [run.output_norm**2 for run in runs]
    _check_mean(norm2, mean, "|rho|^2, k=300")
    _check_variance(norm2, var, "|rho|^2, k=300")


# --------------------------------------------- fast simulator at d = 1e6


def test_fast_matches_exact_theory_at_d_1e6():
  # The paper's setting at epsilon = 10 (sigma = 0.541): 30 runs of 1000 + 1000
  # canaries take about a second.
  d, k, sigma = 10**6, 1000, 0.541
  runs = _runs(30, "fast", dim=d, num_inserted=k, num_held_out=k,
               noise_std=sigma)
  held_out = _pool(runs, "held_out")
  assert stats.kstest(held_out, _null_cdf(d)).pvalue > _P_MIN
  _check_variance(held_out, 1 / d, "held-out at 1e6")
  _check_mean([run.inserted.mean() for run in runs],
              1 / np.sqrt(sigma**2 * d + k), "inserted at 1e6")
  within = np.mean([run.inserted.var(ddof=1) for run in runs])
  expected = (sigma**2 * d + k - 1) / (d * (sigma**2 * d + k))
  assert abs(within / expected - 1) < _Z * np.sqrt(2 / (30 * (k - 1)))
  # Power of the mean check: the mean differs from the held-out's by ~60 se.
  assert abs(np.mean([run.inserted.mean() for run in runs])) > 0.0017
  mean, var = _norm2_moments(d, k, sigma)
  norm2 = [run.output_norm**2 for run in runs]
  _check_mean(norm2, mean, "|rho|^2 at 1e6")
  _check_variance(norm2, var, "|rho|^2 at 1e6")


def test_fast_noiseless_sum_at_d_1e6():
  # sigma = 0: |S|^2 = k + 2 sum_{i<j} <c_i, c_j> has mean k and variance
  # 2k(k-1)/d = 2.0 at k = 1000: this checks the canaries' pairwise inner
  # products (~1e-3 each) to about 1e-6 relative to |S|^2, the precision the
  # float64 formulation must keep.
  d, k = 10**6, 1000
  norm2 = [run.output_norm**2 for run in _runs(40, "fast", dim=d,
                                               num_inserted=k, num_held_out=0,
                                               noise_std=0.0)]
  mean, var = _norm2_moments(d, k, 0.0)
  _check_mean(norm2, mean, "|S|^2")
  _check_variance(norm2, var, "|S|^2")
