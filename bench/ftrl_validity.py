"""Do the one-run bounds on DP-FTRL's statistics keep their confidence?

  .venv/bin/python bench/validity.py --mechanism tree [--trials 500]

Each trial is one simulated DP-FTRL run (`tff_canary.stats.correlated.
tree_simulation`: the efficient tree, 4 epochs of 64 rounds restarted after
each epoch, 2000 fair-coin orthogonal candidates, one participation per
epoch). The truth a bound must not exceed is what the released rounds
reveal about the most exposed candidate: epsilon at delta of the largest
`gls_statistics.schedule_mu` over the candidates (each candidate's scores
are independent and its GLS statistic is N(mu_j, 1) or N(0, 1), so no
canary is more private than that, and a valid bound stays below it); "no
canary" inserts nothing, truth 0. The bounds are those `tree_audit` uses:
Steinke, Nasr & Jagielski's one-run bound on the scheduled statistic T and
on the max statistic M, and the tight one-run bound on T ("bonferroni"), each
at 95%. A bound is valid when its exceedance rate is at most 5% + 2 SE of a
5% rate over the trials.

The last line: `largest exceedance rate of a tree bound over every setting:
R (limit L)`.
"""

from __future__ import annotations

import time

import numpy as np

from tff_canary.stats.accounting import gaussian_accounting
from tff_canary.stats.audit import audit
from tff_canary.stats.bounds import lower_bounds
from tff_canary.stats.correlated import gls_statistics, tree_simulation

DELTA = 1e-5
NOISE_MULTIPLIERS = (None, 8.0, 4.0, 2.0)  # None: no canary inserted
BOUNDS = ("one-run (T)", "one-run (M)", "tight one-run (T)")


def bounds_of(t_stat, m_stat, mask):
  """Each of `BOUNDS` at 95% on one run's T and M statistics."""
  return {
      BOUNDS[0]: lower_bounds.one_run_bound(t_stat, mask, delta=DELTA).epsilon,
      BOUNDS[1]: lower_bounds.one_run_bound(m_stat, mask, delta=DELTA).epsilon,
      BOUNDS[2]: audit.tight_bound(t_stat, mask, delta=DELTA,
                                   confidence=0.95).epsilon,
  }


def exceedance(noise_multiplier, trials, seed):
  """(rates per bound, median truth, median bounds) of one setting."""
  z = 4.0 if noise_multiplier is None else noise_multiplier
  setting = tree_simulation.FtrlSetting(
      epochs=4, rounds_per_epoch=64, noise_multiplier=z, num_candidates=2000,
      self_test_dim=2)
  noise = setting.claimed_noise()
  counts = dict.fromkeys(BOUNDS, 0)
  truths, values = [], {name: [] for name in BOUNDS}
  for trial in range(trials):
    run = tree_simulation.simulate(setting, seed=seed + trial,
                                   insert=noise_multiplier is not None)
    if noise_multiplier is None:
      truth = 0.0
    else:
      mu = gls_statistics.schedule_mu(run.schedule, noise,
                                      noise_multiplier=z).max()
      truth = gaussian_accounting.gaussian_epsilon_of_mu(float(mu), DELTA)
    t_stat = gls_statistics.scheduled_statistic(run.scores, run.schedule,
                                                noise)
    m_stat = gls_statistics.max_statistic(run.scores, noise)
    truths.append(truth)
    for name, value in bounds_of(t_stat, m_stat, run.inserted).items():
      counts[name] += value > truth
      values[name].append(value)
  return ({n: c / trials for n, c in counts.items()}, float(np.median(truths)),
          {n: float(np.median(v)) for n, v in values.items()})


def main(trials: int) -> None:
  start = time.perf_counter()
  limit = 0.05 + 2.0 * (0.05 * 0.95 / trials) ** 0.5
  print(f"DP-FTRL: exceedance of the true epsilon over {trials} seeded "
        "trials (efficient tree, 4 x 64 rounds, 2000 candidates); median "
        "bound in brackets. Valid bounds stay at or below "
        f"{limit:.3f} (5% + 2 SE).")
  print(f"{'z':>10} {'truth':>7} " + " ".join(f"{n:>24}" for n in BOUNDS))
  worst = 0.0
  for index, z in enumerate(NOISE_MULTIPLIERS):
    rates, truth, medians = exceedance(z, trials, 1_000_000 * index)
    label = "no canary" if z is None else f"{z:g}"
    print(f"{label:>10} {truth:>7.3f} " + " ".join(
        f"{rates[n]:>13.3f} [{medians[n]:>7.3f}]" for n in BOUNDS),
        flush=True)
    worst = max(worst, *rates.values())
  print(f"  ({time.perf_counter() - start:.0f} s in all)")
  print(f"largest exceedance rate of a tree bound over every setting: "
        f"{worst:.3f} (limit {limit:.3f})")
