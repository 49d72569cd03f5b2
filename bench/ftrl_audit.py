"""Does the DP-FTRL audit catch planted bugs, and only them? Seeded simulator trials.

  .venv/bin/python bench/ftrl_audit.py [--trials 200] [--noise_multiplier 2.5]
      [--smoke]

Each trial is one DP-FTRL run with fair-coin orthogonal canaries, simulated
exactly in the canaries' scores (`tff_canary.stats.correlated.tree_simulation`):
4 epochs of 64 rounds, the tree restarted after each epoch, every inserted
canary in one drawn round per epoch, plus the mechanism run on zero values
for the self-test. Each run is audited (`tree_audit.audit_ftrl`, family-wise
level 0.05: the whitened noise self-test, the contribution check and the
one-run bounds, each at 0.05 / 3) against the claim: the exact epsilon of the
tree's node release (`tree_accounting`).

Mechanisms: the correct plain and efficient trees (an alarm is a false
alarm), and each planted bug of `tree_simulation.BUGS` (an alarm is a
detection) on the tree it concerns: noise reused after a restart and a
client counted twice in an epoch on both trees, one level's noise missing
on both, the efficient tree's node noise mis-scaled on the efficient one.
The table gives each rate with its binomial standard error and how often
each check fired. The last line:

  DP-FTRL audit: worst detection D, worst false alarm F
"""

from __future__ import annotations

import argparse
import math
import time


import smoke_mode
from tff_canary.stats.correlated import tree_audit, tree_simulation

DELTA = 1e-5
SETTINGS = [  # (bug, efficient)
    ("none", False), ("none", True),
    ("restart_reuse", False), ("restart_reuse", True),
    ("double_participation", False), ("double_participation", True),
    ("missing_level", False), ("missing_level", True),
    ("efficient_scale", True),
]


def run_setting(bug, efficient, *, trials, noise_multiplier, candidates,
                self_test_dim, seed):
  setting = tree_simulation.FtrlSetting(
      epochs=4, rounds_per_epoch=64, noise_multiplier=noise_multiplier,
      num_candidates=candidates, efficient=efficient,
      self_test_dim=self_test_dim)
  claimed = setting.claimed_noise()
  alarms = 0
  fired = {name: 0 for name in tree_audit.CHECKS}
  for trial in range(trials):
    run = tree_simulation.simulate(setting, bug=bug, seed=seed + trial)
    verdict = tree_audit.audit_ftrl(
        run.scores, run.schedule, run.inserted, noise=claimed,
        rounds_per_epoch=setting.rounds_per_epoch,
        noise_multiplier=noise_multiplier, delta=DELTA,
        self_test_noise=run.self_test_noise)
    alarms += verdict.refuted
    for name in verdict.caught_by:
      fired[name] += 1
  return alarms / trials, fired, verdict.claim


# --smoke: one trial of every setting, few candidates.
SMOKE = dict(trials=1, candidates=100, self_test_dim=20)


def audit_parser(description: str) -> argparse.ArgumentParser:
  """The planted-bug benches' flags (this one's and matrix_audit.py's)."""
  parser = argparse.ArgumentParser(description=description)
  parser.add_argument("--trials", type=int, default=200)
  parser.add_argument("--noise_multiplier", type=float, default=2.5)
  parser.add_argument("--candidates", type=int, default=1000)
  parser.add_argument("--self_test_dim", type=int, default=1000)
  parser.add_argument("--seed", type=int, default=0)
  return parser


def main(argv=None):
  parser = audit_parser(__doc__.splitlines()[0])
  args = smoke_mode.parse_args(
      parser, argv, SMOKE,
      "one trial per setting, 100 candidates")
  start = time.time()
  print(f"{'mechanism':<34} {'alarms':>15}  " +
        "  ".join(f"{c:>14}" for c in tree_audit.CHECKS))
  worst_detection, worst_false = 1.0, 0.0
  claim = None
  for bug, efficient in SETTINGS:
    rate, fired, claim = run_setting(
        bug, efficient, trials=args.trials,
        noise_multiplier=args.noise_multiplier, candidates=args.candidates,
        self_test_dim=args.self_test_dim, seed=args.seed)
    se = math.sqrt(max(rate * (1 - rate), 1e-12) / args.trials)
    tree = "efficient" if efficient else "plain"
    name = f"{'correct' if bug == 'none' else bug} ({tree})"
    print(f"{name:<34} {rate:>8.3f} ± {se:.3f}  " +
          "  ".join(f"{fired[c] / args.trials:>14.3f}"
                    for c in tree_audit.CHECKS), flush=True)
    if bug == "none":
      worst_false = max(worst_false, rate)
    else:
      worst_detection = min(worst_detection, rate)
  print(f"claim: {claim}; {args.candidates} candidates, {args.trials} "
        f"trials per row, {time.time() - start:.0f} s")
  print(f"DP-FTRL audit: worst detection {worst_detection:.3f}, worst false "
        f"alarm {worst_false:.3f}")


if __name__ == "__main__":
  main()
