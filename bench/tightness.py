"""How close do one run's canaries get to the analytical ε of a correlated-noise mechanism?

  .venv/bin/python bench/tightness.py [--trials 100] [--trials_20000 20]
      [--smoke]

Each trial is one simulated DP-FTRL run (`tff_canary.stats.correlated.
tree_simulation`): 4 epochs of 64 rounds, the noise restarted after each
epoch, fair-coin orthogonal canaries, δ = 1e-5. Mechanisms:

* "tree": the plain tree, every canary (inserted and held-out) on the
  worst-case pattern a*, round 0 of every tree (`placement="worst_case"`);
* "blt": a BLT strategy fitted to one participation in 64 rounds
  (`blt_fit.fit_blt`, 3 buffers; or `--blt_scales/--blt_decays`), restarted
  every epoch (`strategy_noise`), canaries on its a* (round 0 of each epoch);
* "tree random": the plain tree with today's placement, a random round per
  epoch (for comparison: its canaries see less than the claim).

The noise multiplier z is set so that the analytical ε (the node release's,
exact GDP; for a square B the rounds' own) is 1, 3 or 10. On a*, every
inserted canary's GLS statistic T is N(μ, 1) with μ the analytical one
(docs/method/matrix-mechanisms.md), so the audit faces the claim itself.

Per setting: the audit's one-run bounds (`tree_audit`: Steinke et al. on T
and on the max statistic M, the tight one-run bound on T), each at 95%; the
truth a bound must not exceed, the ε of the most exposed candidate's
`schedule_mu` (the analytical ε on a*); each bound's exceedance rate (valid
when ≤ 5% + 2 SE of a 5% rate over the trials; a "no canary" row per
mechanism inserts nothing, truth 0); the strongest valid bound, the one with
the largest median among the valid ones (5% + 2 SE at that setting's
trials); and ε-all by the scheduled
statistic T (`tree_audit.ftrl_estimates`) against its target
(`TreeTargets.scheduled_target`: the analytical ε on a*; this run's
canaries' ε with random rounds): mean relative bias and the coverage of its
95% interval.

The last line is one JSON object: the median strongest valid bound at 2,000
candidates for ε = 1 / 3 / 10, its fraction of the analytical ε at 20,000
candidates for ε = 3 / 10, ε-all's mean relative bias and coverage at 2,000
candidates for ε = 1 / 3 / 10 (tree and blt), and the worst exceedance
rate of any bound in any setting:

  {"bounds_2000": {"tree": [e1, e3, e10], "blt": [...]}, "fraction_20000":
   {"tree": [f3, f10], "blt": [...]}, "eps_all_bias": {...}, "coverage":
   {...}, "worst_validity": v}
"""

from __future__ import annotations

import argparse
import json
import math
import time

import numpy as np

import smoke_mode
# The tree validity bench's bounds, each at 95%, and their delta (1e-5).
from ftrl_validity import BOUNDS, DELTA, bounds_of
from tff_canary.stats.accounting import gaussian_accounting
from tff_canary.stats.correlated import (gls_statistics, tree_audit,
                                         tree_simulation, tree_targets)
from tff_canary.stats.matrix import blt, blt_fit, strategy_noise

EPOCHS, ROUNDS_PER_EPOCH = 4, 64
EPSILONS = (1.0, 3.0, 10.0)
LARGE_EPSILONS = (3.0, 10.0)  # the 20,000-candidate runs
MECHANISMS = ("tree", "blt", "tree random")


def _blt_noise(args):
  """The fitted (or given) BLT restarted every epoch."""
  if args.blt_scales:
    strategy = blt.blt(args.blt_scales, args.blt_decays)
  else:
    strategy = blt_fit.fit_blt(rounds=ROUNDS_PER_EPOCH, participations=1,
                               separation=ROUNDS_PER_EPOCH,
                               num_buffers=3).strategy
  noise = strategy_noise.strategy_noise(
      strategy.coefficients(ROUNDS_PER_EPOCH), EPOCHS * ROUNDS_PER_EPOCH,
      restart_every=ROUNDS_PER_EPOCH)
  print(f"blt: {strategy}, restarted every epoch; sensitivity "
        f"{noise.release_mu(1.0):.5g} over the run, worst-case rounds "
        f"{noise.worst_case_rounds().tolist()}")
  return noise


# The settings whose claimed noise is not the setting's tree, and its maker.
OWN_NOISE = {"blt": _blt_noise}


def _noise(mechanism, args):
  """The mechanism's claimed noise: None for the setting's tree."""
  make = OWN_NOISE.get(mechanism)
  return None if make is None else make(args)


def setting_for(noise, epsilon, candidates):
  """The setting whose analytical ε is `epsilon`, and its claimed noise."""
  base = tree_simulation.FtrlSetting(
      epochs=EPOCHS, rounds_per_epoch=ROUNDS_PER_EPOCH, noise_multiplier=1.0,
      num_candidates=candidates, efficient=False, self_test_dim=2)
  claimed = base.claimed_noise() if noise is None else noise
  mu = 1.0 / gaussian_accounting.gaussian_noise_multiplier(epsilon, DELTA)
  z = claimed.release_mu(1.0) / mu
  setting = tree_simulation.FtrlSetting(
      epochs=EPOCHS, rounds_per_epoch=ROUNDS_PER_EPOCH, noise_multiplier=z,
      num_candidates=candidates, efficient=False, self_test_dim=2)
  return setting, claimed


def run_setting(mechanism, noise, epsilon, *, candidates, trials, seed,
                insert=True):
  """Per-trial truths, bounds, estimates and targets of one setting."""
  setting, claimed = setting_for(noise, epsilon, candidates)
  z = setting.noise_multiplier
  placement = "random" if mechanism == "tree random" else "worst_case"
  out = {"truth": [], "estimate": [], "target": [], "covered": [],
         **{name: [] for name in BOUNDS}}
  for trial in range(trials):
    run = tree_simulation.simulate(setting, seed=seed + trial, noise=noise,
                                   insert=insert, placement=placement)
    t_stat = gls_statistics.scheduled_statistic(run.scores, run.schedule,
                                                claimed)
    m_stat = gls_statistics.max_statistic(run.scores, claimed)
    for name, value in bounds_of(t_stat, m_stat, run.inserted).items():
      out[name].append(value)
    if not insert:
      out["truth"].append(0.0)
      continue
    mu = gls_statistics.schedule_mu(run.schedule, claimed,
                                    noise_multiplier=z).max()
    out["truth"].append(gaussian_accounting.gaussian_epsilon_of_mu(
        float(mu), DELTA))
    targets = tree_targets.tree_targets(
        claimed, run.schedule, run.inserted, rounds_per_epoch=ROUNDS_PER_EPOCH,
        noise_multiplier=z, delta=DELTA)
    target = targets.epsilons()[targets.scheduled_target]
    estimate = tree_audit.ftrl_estimates(
        run.scores, run.schedule, run.inserted, noise=claimed,
        noise_multiplier=z, delta=DELTA).scheduled
    out["estimate"].append(estimate.epsilon)
    out["target"].append(target)
    out["covered"].append(
        estimate.interval.low <= target <= estimate.interval.high)
  return {k: np.asarray(v, dtype=np.float64) for k, v in out.items()}


def summary(result, limit):
  """Exceedance per bound, the strongest valid bound's median, ε-all."""
  truth = result["truth"]
  rates = {n: float(np.mean(result[n] > truth + 1e-12)) for n in BOUNDS}
  medians = {n: float(np.median(result[n])) for n in BOUNDS}
  valid = [n for n in BOUNDS if rates[n] <= limit]
  strongest = max(valid, key=medians.get) if valid else None
  row = dict(rates=rates, medians=medians, strongest=strongest,
             strongest_median=medians[strongest] if strongest else math.nan)
  if result["estimate"].size:
    ratio = result["estimate"] / result["target"]
    row.update(bias=float(ratio.mean() - 1.0),
               bias_se=float(ratio.std(ddof=1) / math.sqrt(ratio.size))
               if ratio.size > 1 else math.nan,
               coverage=float(result["covered"].mean()),
               target=float(np.median(result["target"])))
  return row


# --smoke: one trial of every setting, few candidates.
SMOKE = dict(trials=1, trials_20000=1, candidates=200,
             large_candidates=400)


def main(argv=None):
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--trials", type=int, default=100,
                      help="trials per setting at --candidates")
  parser.add_argument("--trials_20000", type=int, default=20,
                      help="trials per setting at --large_candidates")
  parser.add_argument("--candidates", type=int, default=2000)
  parser.add_argument("--large_candidates", type=int, default=20000)
  parser.add_argument("--blt_scales", type=float, nargs="*", default=None,
                      help="a given BLT's output scales (default: fitted)")
  parser.add_argument("--blt_decays", type=float, nargs="*", default=None)
  parser.add_argument("--seed", type=int, default=0)
  args = smoke_mode.parse_args(
      parser, argv, SMOKE, "one trial per setting, 200 and 400 candidates")
  start = time.time()
  noises = {m: _noise(m, args) for m in MECHANISMS}
  print(f"{EPOCHS} epochs x {ROUNDS_PER_EPOCH} rounds, δ = {DELTA:g}; "
        "bounds at 95% each: median [exceedance rate of the truth]; "
        "ε-all by T: mean relative bias to its target ± SE, coverage of "
        "its 95% interval")
  print(f"{'mechanism':<12} {'ε':>4} {'cands':>6} {'truth':>7} "
        + " ".join(f"{n:>22}" for n in BOUNDS)
        + f" {'strongest/ε':>12} {'ε-all bias':>16} {'coverage':>9}")
  rows = {}
  worst, worst_at = 0.0, ""
  runs = [(c, eps, n) for c, epsilons, n in (
      (args.candidates, EPSILONS, args.trials),
      (args.large_candidates, LARGE_EPSILONS, args.trials_20000))
          for eps in epsilons]
  for index, (candidates, epsilon, trials) in enumerate(runs):
    limit = 0.05 + 2.0 * math.sqrt(0.05 * 0.95 / trials)
    for mechanism in MECHANISMS:
      result = run_setting(mechanism, noises[mechanism], epsilon,
                           candidates=candidates, trials=trials,
                           seed=args.seed + 1_000_000 * index)
      row = rows[mechanism, epsilon, candidates] = summary(result, limit)
      if max(row["rates"].values()) > worst or not worst_at:
        worst = max(row["rates"].values())
        worst_at = (f"{mechanism}, ε = {epsilon:g}, {candidates} candidates "
                    f"(limit {limit:.3f} at {trials} trials)")
      print(f"{mechanism:<12} {epsilon:>4g} {candidates:>6} "
            f"{np.median(result['truth']):>7.3f} " + " ".join(
                f"{row['medians'][n]:>13.3f} [{row['rates'][n]:.3f}]"
                for n in BOUNDS)
            + f" {row['strongest_median'] / epsilon:>12.3f} "
            f"{row['bias']:>+8.3f} ± {row['bias_se']:.3f} "
            f"{row['coverage']:>9.3f}", flush=True)
  # No canary inserted: every bound must stay at 0 (truth 0).
  limit = 0.05 + 2.0 * math.sqrt(0.05 * 0.95 / args.trials)
  for mechanism in MECHANISMS:
    result = run_setting(mechanism, noises[mechanism], 3.0,
                         candidates=args.candidates, trials=args.trials,
                         seed=args.seed + 9_000_000, insert=False)
    row = summary(result, limit)
    if max(row["rates"].values()) > worst:
      worst = max(row["rates"].values())
      worst_at = (f"{mechanism}, no canary, {args.candidates} candidates "
                  f"(limit {limit:.3f} at {args.trials} trials)")
    print(f"{mechanism:<12} {'none':>4} {args.candidates:>6} {0.0:>7.3f} "
          + " ".join(f"{row['medians'][n]:>13.3f} [{row['rates'][n]:.3f}]"
                     for n in BOUNDS), flush=True)
  print(f"worst exceedance rate {worst:.3f}: {worst_at}; every bound valid "
        f"when its rate is at most 5% + 2 SE over its trials; "
        f"{time.time() - start:.0f} s")
  small, large = args.candidates, args.large_candidates
  keys = ("tree", "blt")

  def rounded(values):
    return [round(v, 4) for v in values]

  print(json.dumps({
      "bounds_2000": {m: rounded(rows[m, e, small]["strongest_median"]
                                 for e in EPSILONS) for m in keys},
      "fraction_20000": {m: rounded(rows[m, e, large]["strongest_median"] / e
                                    for e in LARGE_EPSILONS) for m in keys},
      "eps_all_bias": {m: rounded(rows[m, e, small]["bias"] for e in EPSILONS)
                       for m in keys},
      "coverage": {m: rounded(rows[m, e, small]["coverage"] for e in EPSILONS)
                   for m in keys},
      "worst_validity": round(worst, 4)}))


if __name__ == "__main__":
  main()
