"""How strong is each lower bound? Medians on the Gaussian mechanism.

  .venv/bin/python bench/power.py [--trials 20] [--dim 1000000] [--smoke]

Per true epsilon (1, 3, 10 at delta = 1e-6) and per bound, the median over
seeded trials of the bound, in two settings of 2000 coin-flipped candidate
canaries:

  one run      our setting: one run of the Gaussian sum mechanism, all canaries
               sharing one noise vector (`gaussian_mechanism.simulate_coin`,
               statistic = cosine);
  independent  independent scores, N(mu, 1) if inserted and N(0, 1) if not,
               mu = 1/z of the Gaussian mechanism with that epsilon (the
               setting of the reference figures of issue 12, measured with
               another library: Steinke et al. 0.13 / 0.88 / 2.91, f-DP
               one-run 0.19 / 1.22 / 4.27).

The last line gives the medians (one run) of the strongest one-run bound that
`bench/validity.py` found valid (Steinke et al.'s, and those of
`gaussian_bounds.IN_AUDIT`, which the audit uses): the one with the largest
median at epsilon = 10.

With `--directions orthogonal` the "one run" setting has orthonormal canaries
(`orthogonal_mechanism.simulate_coin`, statistic = the removal cosine), the
valid bounds are those of `gaussian_bounds.IN_AUDIT_ORTHOGONAL`
(`bench/validity.py --directions orthogonal`), and the last line is for
orthogonal canaries (the line before it says which). Measured with
`--directions orthogonal --skip_independent --only tight --trials 100`: the
tight one-run bound (Xiang et al. 2025) "bonferroni" 0.415 / 2.379 / 8.757,
"split" 0.108 / 2.093 / 8.252 ("fixed", not valid there, 0.432 / 2.413 /
8.884); over 20 trials the f-DP one-run "fixed" had 0.347 / 1.762 / 5.892.
"""

from __future__ import annotations

import argparse
import time
import warnings

import numpy as np

import gaussian_bounds
import smoke_mode
from tff_canary.stats.accounting import gaussian_accounting
from tff_canary.stats.simulation import gaussian_mechanism
from tff_canary.stats.simulation import orthogonal_mechanism

EPSILONS = (1.0, 3.0, 10.0)
DELTA = 1e-6


def medians(*, setting, trials, dim, candidates, bounds, directions="iid"):
  """{bound name: [median at each epsilon]}; `directions` "iid" or
  "orthogonal" chooses the canaries of the "one run" setting."""
  simulate_coin = (orthogonal_mechanism.simulate_coin
                   if directions == "orthogonal"
                   else gaussian_mechanism.simulate_coin)
  values = {name: [[] for _ in EPSILONS] for name in bounds}
  for e, epsilon in enumerate(EPSILONS):
    z = gaussian_accounting.gaussian_noise_multiplier(epsilon, DELTA)
    for trial in range(trials):
      seed = 1000 * e + trial
      if setting == "one run":
        run = simulate_coin(
            dim=dim, num_candidates=candidates, noise_std=z, seed=seed)
        s, mask = np.asarray(run.statistics), np.asarray(run.inserted_mask)
      else:
        s, mask = gaussian_bounds.independent_scores(
            epsilon=epsilon, delta=DELTA, candidates=candidates, seed=seed)
      for name, (fn, _) in bounds.items():
        values[name][e].append(fn(s, mask, DELTA))
  return {name: [float(np.median(v)) for v in per] for name, per in
          values.items()}


# --smoke: one trial of few candidates in a small dimension.
SMOKE = dict(trials=1, dim=10_000, candidates=200)


def main(argv=None):
  parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  parser.add_argument("--trials", type=int, default=20)
  parser.add_argument("--dim", type=int, default=1_000_000)
  parser.add_argument("--candidates", type=int, default=2000)
  parser.add_argument("--only", default=None,
                      help="only the bounds whose name has this")
  parser.add_argument("--directions", choices=("iid", "orthogonal"),
                      default="iid",
                      help="canaries of the one-run setting: i.i.d. uniform "
                           "or orthonormal (orthogonal_mechanism)")
  parser.add_argument("--skip_independent", action="store_true",
                      help="only the one-run setting")
  args = smoke_mode.parse_args(
      parser, argv, SMOKE,
      "one trial, 200 candidates, d = 10^4")
  warnings.simplefilter("ignore")
  start = time.perf_counter()
  print(f"Median lower bound over {args.trials} seeded trials, "
        f"{args.candidates} coin-flipped canaries, delta = {DELTA:g} "
        f"(true epsilon 1 / 3 / 10).")
  found = {}
  settings = ("one run",) if args.skip_independent else ("one run",
                                                         "independent")
  for setting in settings:
    found[setting] = medians(setting=setting, trials=args.trials,
                             dim=args.dim, candidates=args.candidates,
                             bounds=gaussian_bounds.selected(args.only),
                             directions=args.directions)
    print(f"\n{setting}" + (f" (d = {args.dim}, {args.directions} canaries)"
                           if setting == "one run"
                           else " (N(mu, 1) vs N(0, 1) scores)"))
    for name, row in found[setting].items():
      print(f"  {name:40s} " + " ".join(f"{v:7.3f}" for v in row))
  one_run = found["one run"]
  in_audit = (gaussian_bounds.IN_AUDIT_ORTHOGONAL
              if args.directions == "orthogonal" else gaussian_bounds.IN_AUDIT)
  valid = [n for n in ("Steinke et al. one-run",) + in_audit if n in one_run]
  if not valid:
    return
  best = max(valid, key=lambda n: one_run[n][-1])
  print(f"\n({time.perf_counter() - start:.0f} s in all; strongest valid "
        f"one-run bound: {best}; {args.directions} canaries)")
  print("one-run power at epsilon 1/3/10: " + " ".join(
      f"{v:.3f}" for v in one_run[best]))


if __name__ == "__main__":
  main()
