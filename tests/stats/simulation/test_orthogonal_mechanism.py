"""Tests of the orthogonal-canary simulators (tff_canary.stats.simulation.orthogonal_mechanism).

The reference is a brute-force construction at small d: m orthonormal
canaries from numpy's QR of a d x m Gaussian matrix (signs fixed so the frame
is Haar), rho = sum of the inserted ones + sigma z with z ~ N(0, I_d), and the
cosines computed from the vectors, with the other inserted canaries'
projections removed explicitly (rho - sum_{i in I, i != j} <c_i, rho> c_i).
The O(m) simulator must agree with it in distribution, and both with the
exact laws of the module docstring: a held-out removal cosine has the null
law of docs/method/null-law.md in dimension d - |I|.

Statistical checks use fixed seeds. KS tests pass at p > 1e-3: under a correct
simulator the p-value is uniform, so a check fails by chance with probability
1e-3, and the power checks show the same tests reject errors of the size
they guard against. Within a run, cosines share the residual norm; they are
uncorrelated (the g_j are symmetric) and the shared norm's relative sd is
sqrt(2 / d) ~ 0.09 at d = 256, which inflates the variance of an empirical
CDF by a design effect of about 1 + (m - 1) * 1e-4 / 0.2 < 1.02 for m <= 32
per run: negligible for the KS test. Moment checks allow 4 standard errors.
"""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats

from tff_canary.stats.simulation import gaussian_mechanism as gm
from tff_canary.stats.simulation import orthogonal_mechanism as om

_P_MIN = 1e-3
_Z = 4.0


def _frame(rng, dim, size):
  """size orthonormal vectors of R^dim, Haar distributed: rows [size, dim]."""
  q, r = np.linalg.qr(rng.standard_normal((dim, size)))
  return (q * np.sign(np.diag(r))).T


def _brute(rng, dim, mask, noise_std, remove=True):
  """Cosines of every canary by the vectors; mask = which are inserted."""
  canaries = _frame(rng, dim, mask.size)
  rho = canaries[mask].sum(axis=0) + noise_std * rng.standard_normal(dim)
  proj = canaries @ rho
  out = np.empty(mask.size)
  for j in range(mask.size):
    others = mask.copy()
    others[j] = False
    b = rho - proj[others] @ canaries[others] if remove else rho
    out[j] = canaries[j] @ b / np.linalg.norm(b)
  return out, float(np.linalg.norm(rho))


def _null_cdf(dim):
  """Exact CDF of a null cosine in R^dim: (1 + T)/2 ~ Beta((d-1)/2, (d-1)/2)."""
  law = stats.beta((dim - 1) / 2, (dim - 1) / 2)
  return lambda t: law.cdf((1 + np.asarray(t)) / 2)


# ---------------------------------------------------------------- validation


_GOOD = dict(dim=100, num_inserted=5, num_held_out=5, noise_std=1.0, seed=0)


@pytest.mark.parametrize("kwargs, error, needle", [
    (dict(dim="100"), TypeError, "dim"),
    (dict(dim=1), ValueError, "dim"),
    (dict(num_inserted=-1), ValueError, "num_inserted"),
    (dict(num_inserted=2.5), TypeError, "num_inserted"),
    (dict(num_held_out=True), TypeError, "num_held_out"),
    (dict(num_inserted=0, num_held_out=0), ValueError, "num_held_out"),
    (dict(num_inserted=60, num_held_out=41), ValueError,
     r"num_inserted \+ num_held_out"),
    (dict(noise_std=0.0), ValueError, "noise_std"),
    (dict(noise_std=float("nan")), ValueError, "noise_std"),
    (dict(noise_std="1"), TypeError, "noise_std"),
    (dict(seed=-1), ValueError, "seed"),
    (dict(remove_known_canaries=1), TypeError, "remove_known_canaries"),
])
def test_simulate_errors_name_the_argument(kwargs, error, needle):
  with pytest.raises(error, match=needle):
    om.simulate(**{**_GOOD, **kwargs})


@pytest.mark.parametrize("kwargs, error, needle", [
    (dict(num_candidates=0), ValueError, "num_candidates"),
    (dict(num_candidates=101), ValueError, "num_candidates"),
    (dict(noise_std=-1.0), ValueError, "noise_std"),
    (dict(dim=None), TypeError, "dim"),
])
def test_simulate_coin_errors_name_the_argument(kwargs, error, needle):
  good = dict(dim=100, num_candidates=10, noise_std=1.0, seed=0)
  with pytest.raises(error, match=needle):
    om.simulate_coin(**{**good, **kwargs})


@pytest.mark.parametrize("kwargs, error, needle", [
    (dict(num_rounds=0), ValueError, "num_rounds"),
    (dict(participations=0), ValueError, "participations"),
    (dict(participations=11), ValueError, "participations"),
    (dict(participations=2.0), TypeError, "participations"),
    (dict(num_candidates=101), ValueError, "num_candidates"),
    (dict(noise_std=0), ValueError, "noise_std"),
])
def test_simulate_scheduled_errors_name_the_argument(kwargs, error, needle):
  good = dict(dim=100, num_candidates=10, num_rounds=10, participations=2,
              noise_std=1.0, seed=0)
  with pytest.raises(error, match=needle):
    om.simulate_scheduled(**{**good, **kwargs})


def test_effective_dim():
  assert om.effective_dim(1000, 100) == 901
  with pytest.raises(ValueError, match="num_inserted"):
    om.effective_dim(10, 11)


# ------------------------------------------------------------------ basics


def test_results_are_reproducible_frozen_and_named():
  run = om.simulate(**_GOOD)
  again = om.simulate(**_GOOD)
  np.testing.assert_array_equal(run.inserted, again.inserted)
  assert isinstance(run, gm.GaussianMechanismRun)
  assert run.simulator == "orthogonal" and run.block_size is None
  with pytest.raises(ValueError):
    run.inserted[0] = 0.0
  coin = om.simulate_coin(dim=100, num_candidates=50, noise_std=1.0, seed=3)
  assert isinstance(coin, gm.CoinRun) and coin.simulator == "orthogonal"
  # The same coins as the i.i.d. simulator for the same seed.
  np.testing.assert_array_equal(
      coin.inserted_mask,
      gm.simulate_coin(dim=100, num_candidates=50, noise_std=1.0,
                       seed=3).inserted_mask)


def test_m_equal_to_d_is_allowed():
  run = om.simulate(dim=20, num_inserted=10, num_held_out=10, noise_std=1.0,
                    seed=0)
  assert np.all(np.isfinite(run.inserted)) and np.all(np.isfinite(
      run.held_out))


def test_schedule_is_p_distinct_rounds():
  run = om.simulate_scheduled(dim=1000, num_candidates=300, num_rounds=20,
                              participations=4, noise_std=1.0, seed=0)
  assert run.schedule.shape == (300, 4)
  assert np.all(np.diff(run.schedule, axis=1) > 0)  # sorted, distinct
  # Uniform over rounds: 1200 slots over 20 rounds, 60 each on average; the
  # counts are near multinomial (sd sqrt(60) ~ 7.7), so chi-square p > 1e-3.
  counts = np.bincount(run.schedule.ravel(), minlength=20)
  assert stats.chisquare(counts).pvalue > _P_MIN


# --------------------------------------------- simulator vs brute force


@pytest.fixture(scope="module")
def brute_256():
  """d = 256, 6 inserted + 6 held-out, sigma = 0.1: 3000 brute runs (~2 s)."""
  dim, k, h, sigma = 256, 6, 6, 0.1
  mask = np.arange(k + h) < k
  rng = np.random.default_rng(12345)
  out = {True: [], False: []}
  norms = {True: [], False: []}
  for _ in range(3000):
    for remove in (True, False):
      cos, norm = _brute(rng, dim, mask, sigma, remove)
      out[remove].append(cos)
      norms[remove].append(norm)
  return dict(dim=dim, k=k, h=h, sigma=sigma,
              cosines={r: np.array(v) for r, v in out.items()},
              norms={r: np.array(v) for r, v in norms.items()})


@pytest.mark.parametrize("remove", [True, False])
def test_simulate_agrees_with_brute_force(brute_256, remove):
  b = brute_256
  runs = [om.simulate(dim=b["dim"], num_inserted=b["k"], num_held_out=b["h"],
                      noise_std=b["sigma"], seed=s,
                      remove_known_canaries=remove) for s in range(3000)]
  ins = np.concatenate([r.inserted for r in runs])
  held = np.concatenate([r.held_out for r in runs])
  brute = b["cosines"][remove]
  assert stats.ks_2samp(ins, brute[:, :b["k"]].ravel()).pvalue > _P_MIN
  assert stats.ks_2samp(held, brute[:, b["k"]:].ravel()).pvalue > _P_MIN
  norms = np.array([r.output_norm for r in runs])
  assert stats.ks_2samp(norms, b["norms"][remove]).pvalue > _P_MIN
  # Power: the same test tells a 1% error in |rho|: |rho|^2 ~ 8.6 with sd
  # ~0.54 here, so |rho| has a relative sd of ~3% and a 1% shift is a third
  # of an sd, which 3000 values per side resolve (KS p ~ 1e-6 or less).
  assert stats.ks_2samp(norms * 1.01, b["norms"][remove]).pvalue < _P_MIN


def test_held_out_removal_cosines_have_the_null_law_of_d_minus_inserted(
    brute_256):
  b = brute_256
  d_eff = b["dim"] - b["k"]
  brute_held = b["cosines"][True][:, b["k"]:].ravel()
  assert stats.kstest(brute_held, _null_cdf(d_eff)).pvalue > _P_MIN
  sim = np.concatenate([
      om.simulate(dim=b["dim"], num_inserted=b["k"], num_held_out=b["h"],
                  noise_std=b["sigma"], seed=s).held_out
      for s in range(3000)])
  assert stats.kstest(sim, _null_cdf(d_eff)).pvalue > _P_MIN
  # Exact variance 1 / (d - |I|); the chi-square band at 1e-4 either side.
  df = sim.size - 1
  low, high = stats.chi2.ppf([1e-4, 1 - 1e-4], df) / df
  assert low < sim.var(ddof=1) * d_eff < high


def test_ks_has_power_against_a_wrong_dimension():
  # A held-out law in d - |I| = 192 against d = 256 (sd 15% larger): the
  # 9600 values resolve it at once (KS distance about 0.05, p ~ 1e-20).
  rng = np.random.default_rng(7)
  mask = np.arange(96) < 64
  brute = np.concatenate([_brute(rng, 256, mask, 0.1)[0][64:]
                          for _ in range(300)])
  assert stats.kstest(brute, _null_cdf(192)).pvalue > _P_MIN
  assert stats.kstest(brute, _null_cdf(256)).pvalue < _P_MIN


def test_simulate_coin_agrees_with_brute_force():
  dim, m, sigma, reps = 128, 10, 0.2, 3000
  rng = np.random.default_rng(99)
  brute = {True: [], False: []}
  sim = {True: [], False: []}
  for s in range(reps):
    run = om.simulate_coin(dim=dim, num_candidates=m, noise_std=sigma, seed=s)
    cos, _ = _brute(rng, dim, np.asarray(run.inserted_mask), sigma)
    for flag in (True, False):
      brute[flag].append(cos[run.inserted_mask == flag])
      sim[flag].append(run.statistics[run.inserted_mask == flag])
  for flag in (True, False):
    p = stats.ks_2samp(np.concatenate(brute[flag]),
                       np.concatenate(sim[flag])).pvalue
    assert p > _P_MIN, f"inserted={flag}: KS p = {p:.2e}"


def test_simulate_scheduled_agrees_with_brute_force():
  """Every round by the vectors: same canaries, fresh noise, removal of the
  round's other inserted canaries; T and the max compared by KS."""
  dim, m, rounds, p, sigma, reps = 64, 8, 6, 2, 0.3, 1500
  rng = np.random.default_rng(2024)
  brute = {"T": {True: [], False: []}, "max": {True: [], False: []}}
  sim = {"T": {True: [], False: []}, "max": {True: [], False: []}}
  for s in range(reps):
    run = om.simulate_scheduled(dim=dim, num_candidates=m, num_rounds=rounds,
                                participations=p, noise_std=sigma, seed=s)
    mask = np.asarray(run.inserted_mask)
    # The brute force reuses the simulator's coins and schedules (their law
    # is checked elsewhere) and draws its own frame and noise.
    scheduled = np.zeros((m, rounds), bool)
    scheduled[np.arange(m)[:, None], run.schedule] = True
    canaries = _frame(rng, dim, m)
    x = np.empty((m, rounds))
    for r in range(rounds):
      own = scheduled[:, r] & mask
      rho = canaries[own].sum(axis=0) + sigma * rng.standard_normal(dim)
      proj = canaries @ rho
      for j in range(m):
        others = own.copy()
        others[j] = False
        b = rho - proj[others] @ canaries[others]
        x[j, r] = proj[j] / np.linalg.norm(b)
    t = np.sqrt(dim / p) * np.where(scheduled, x, 0.0).sum(axis=1)
    for flag in (True, False):
      brute["T"][flag].append(t[mask == flag])
      brute["max"][flag].append(x.max(axis=1)[mask == flag])
      sim["T"][flag].append(run.statistics[mask == flag])
      sim["max"][flag].append(run.max_cosines[mask == flag])
  for name in ("T", "max"):
    for flag in (True, False):
      pv = stats.ks_2samp(np.concatenate(brute[name][flag]),
                          np.concatenate(sim[name][flag])).pvalue
      assert pv > _P_MIN, f"{name}, inserted={flag}: KS p = {pv:.2e}"


# ----------------------------------------- the schedule-aware statistic


@pytest.fixture(scope="module")
def scheduled_runs():
  """d = 1e6, 2000 candidates, 100 rounds, P = 9, sigma = 2: 10 runs."""
  args = dict(dim=1_000_000, num_candidates=2000, num_rounds=100,
              participations=9, noise_std=2.0)
  return args, [om.simulate_scheduled(seed=s, **args) for s in range(10)]


def test_held_out_t_is_standard_normal(scheduled_runs):
  # ~10000 held-out T_j; exact law N(0, d / (d - |I_r|)) up to O(1/d) in the
  # limit of a Gaussian, variance 1 + 1e-4 here: invisible at this size.
  _, runs = scheduled_runs
  held = np.concatenate([r.statistics[~r.inserted_mask] for r in runs])
  assert stats.kstest(held, "norm").pvalue > _P_MIN
  # Power: a 10% scale error is rejected (KS distance ~0.03 on ~10000).
  assert stats.kstest(held * 1.1, "norm").pvalue < _P_MIN


def test_inserted_t_has_mean_sqrt_p_over_sigma(scheduled_runs):
  # Mean sqrt(P) / sigma = 1.5 up to relative O(1 / (sigma^2 d) + |I_r| / d)
  # < 1e-3 (0.0015), against a standard error of 1 / sqrt(10000) = 0.01:
  # 4 standard errors.
  args, runs = scheduled_runs
  ins = np.concatenate([r.statistics[r.inserted_mask] for r in runs])
  mean = np.sqrt(args["participations"]) / args["noise_std"]
  se = ins.std(ddof=1) / np.sqrt(ins.size)
  assert abs(ins.mean() - mean) < _Z * se, (ins.mean(), mean, se)
  # Unit variance, by the chi-square band at 1e-4 either side.
  df = ins.size - 1
  low, high = stats.chi2.ppf([1e-4, 1 - 1e-4], df) / df
  assert low < ins.var(ddof=1) < high


# ----------------------------------- experiments/gaussian_mechanism.py option


def test_study_with_orthogonal_canaries_at_ten_percent_of_d():
  import experiment_scripts  # pylint: disable=g-import-not-at-top
  study = experiment_scripts.load("gaussian_mechanism",
                                  "gaussian_mechanism_orthogonal")
  with pytest.raises(ValueError, match="orthogonal"):
    study.check_args(dim=100, num_canaries=51, target_epsilons=[1.0],
                     delta=1e-6, trials=2, seed=0, simulator="orthogonal")
  # d = 2e4 with 2000 inserted canaries (10% of d) at epsilon 10: mu-hat
  # has sd 1/sqrt(2000) = 0.022 around 1/sigma = 1.85 per run (1.2%), so
  # one run's epsilon-final has sd ~0.15 and the mean of 10 runs ~0.05; 0.25
  # is 5 of those. Estimated at dim d (no effective dim) it would be ~+6%,
  # 10.6, outside.
  got = study.run_study(dim=20000, num_canaries=2000, target_epsilons=[10.0],
                        delta=1e-6, trials=10, seed=0,
                        simulator="orthogonal")
  result = got["results"][0]
  assert got["config"]["simulator"] == "orthogonal"
  assert result["statistic_dim"] == 20000 - 2000 + 1
  assert abs(result["epsilon_final_mean"] - 10.0) < 0.25
