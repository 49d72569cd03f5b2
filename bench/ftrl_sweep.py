"""Analytical and empirical epsilon of DP-FTRL over noise multipliers (simulated).

  .venv/bin/python bench/ftrl_sweep.py [--trials 5] [--efficient 1]
      [--candidates 2000] [--smoke]

For each noise multiplier z, `trials` seeded DP-FTRL runs with 2000 fair-coin
orthogonal canaries (`tff_canary.stats.correlated.tree_simulation`: 4 epochs of
64 rounds, the tree restarted after each epoch, one participation per epoch)
and, per run, the estimates of `tree_audit.ftrl_estimates`. The table gives,
at delta = 1e-5:

  analytical   the exact epsilon of the tree's node release, and
               dp-accounting's RDP epsilon (`tree_accounting`);
  worst        the exact epsilon of what the released rounds reveal about
               the worst-case participant (`tree_targets`): no attack on
               the rounds can exceed it;
  canaries     the epsilon of the mean `schedule_mu` of the inserted
               canaries' schedules, what `scheduled` estimates (median over
               the trials; not a ceiling);
  final        epsilon-final, from the final model's scores (it targets the
               final model's own epsilon, below these);
  scheduled    epsilon-all, the GLS statistic over each canary's schedule;
  max          epsilon-all, the max over rounds of the per-round GLS score
               tests (two Gaussians fitted, the paper's epsilon-all: it
               targets none of the above);
  independent  epsilon-all by the statistic of independent rounds.

Estimates are medians over the trials, with the median interval.
"""

from __future__ import annotations

import argparse
import time

import numpy as np

import smoke_mode
from tff_canary.stats.correlated import (tree_accounting, tree_audit,
                                         tree_simulation, tree_targets)

DELTA = 1e-5


# --smoke: one trial at one noise multiplier, few candidates.
SMOKE = dict(trials=1, noise_multipliers="2", candidates=200)


def main(argv=None):
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--trials", type=int, default=5)
  parser.add_argument("--efficient", type=int, choices=(0, 1), default=1)
  parser.add_argument("--noise_multipliers", default="1,2,4,8")
  parser.add_argument("--candidates", type=int, default=2000,
                      help="fair-coin orthogonal candidate canaries per run")
  args = smoke_mode.parse_args(
      parser, argv, SMOKE,
      "one trial at z = 2 with 200 candidates")
  start = time.time()
  print(f"{'z':>4} {'analytical':>10} {'RDP':>7} {'worst':>7} "
        f"{'canaries':>8} {'final':>16} {'scheduled':>18} {'max':>18} "
        f"{'independent':>16}")
  for z in [float(v) for v in args.noise_multipliers.split(",")]:
    setting = tree_simulation.FtrlSetting(
        epochs=4, rounds_per_epoch=64, noise_multiplier=z,
        num_candidates=args.candidates, efficient=bool(args.efficient))
    noise = setting.claimed_noise()
    claim = tree_accounting.tree_epsilons(z, [64] * 4, delta=DELTA)
    rows = []
    for trial in range(args.trials):
      run = tree_simulation.simulate(setting, seed=trial)
      est = tree_audit.ftrl_estimates(run.scores, run.schedule, run.inserted,
                                      noise=noise, noise_multiplier=z,
                                      delta=DELTA)
      targets = tree_targets.tree_targets(
          noise, run.schedule, run.inserted, rounds_per_epoch=64,
          noise_multiplier=z, delta=DELTA)
      rows.append([targets.worst_case_epsilon, targets.schedules_epsilon] + [
          v for e in (est.final, est.scheduled, est.max, est.independent)
          for v in (e.epsilon, e.interval[0], e.interval[1])])
    med = np.median(np.array(rows), axis=0)

    def cell(i):
      return f"{med[i]:.2f} [{med[i + 1]:.2f}, {med[i + 2]:.2f}]"

    print(f"{z:>4g} {claim.epsilon:>10.2f} {claim.rdp_epsilon:>7.2f} "
          f"{med[0]:>7.2f} {med[1]:>8.2f} {cell(2):>16} {cell(5):>18} "
          f"{cell(8):>18} {cell(11):>16}", flush=True)
  tree = "efficient" if args.efficient else "plain"
  print(f"{tree} tree, 4 epochs of 64 rounds, {args.candidates} candidates, "
        f"{args.trials} trials, δ = {DELTA:g}; {time.time() - start:.0f} s")


if __name__ == "__main__":
  main()
