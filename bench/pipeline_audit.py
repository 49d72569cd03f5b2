"""Planted pipeline bugs of distributed DP: caught in one run, how often?

  .venv/bin/python bench/pipeline_audit.py [--trials 60] [--workers 2]
      [--ddp_only] [--smoke]

On the fast simulator (`tff_canary.stats.simulation.pipeline_simulator`: clip, scale,
randomized rounding, noise shares, modular sum of TFF's
DistributedDpSumFactory with distributed Skellam, b = 16 bits, 40
participants per round, 20 rounds, d = 4096, 1000 coin-flipped candidate
canaries, delta = 1e-5, noise multiplier 4 so the claim is epsilon ~ 1), each
cell runs `--trials` seeded runs of one (bug, size, mode) and reports how
often

  tool      the tool as a whole caught it: the audit refuted the claim (any
            of 4 bounds, Bonferroni, 95%) or the noise self-test failed;
  audit     the audit alone refuted the claim;
  flag      the 95% interval of epsilon-final or of epsilon-all lies wholly
            above the claim: a flag with no guarantee, not a refutation;
  point     a point estimate (epsilon-final or epsilon-all) exceeded the
            claim (weaker still: the correct pipeline does it too);
  self-test the noise self-test (zero client values, same participants)
            failed,

with binomial standard errors, the mean estimates and the fraction of
coordinates the modular sum wrapped. 60 trials resolve the targets: if all 60
are caught, the one-sided 95% Clopper-Pearson lower limit on the rate is
0.05^(1/60) = 95.1%; if none of 60 correct runs is flagged, the upper limit on
the false alarm is 4.9% (the columns "tool lo" / "tool hi" give these limits
for every cell). Bugs: clip (clients clipped at 10 C,
claim at C), shortfall (noise shares for k x the participants: k = 2, 4, 10,
20), reuse (the second tensor's noise repeats the first's); "none" is the
correct pipeline, whose "tool" rate is the false alarm. Cells marked * are the
stated sizes: the clip bug in client mode (server canaries are not expected
to see it), every shortfall and reuse cell.

Second table: one correct run per row and seeds (client canaries) across
mechanism, bits, beta and modclip_prob, the measured epsilon-final and
epsilon-all beside the analytical bound (`ddp_accounting`: Prop. 14 of
arXiv 2102.06387 for distributed_dgauss, Theorem 3.5 of arXiv 2110.04995 for
distributed_skellam), the nominal Gaussian epsilon (z, sensitivity C), a
continuous Gaussian with the inflated sensitivity and the same noise
("Gauss@infl"), the wrapped fraction, and after each estimate its reference
("ref"): the exact Gaussian epsilon of a canary at C under the noise the
clients actually add, over all R rounds of noise for the final model and one
round for all iterates (what a random canary can at best reveal, without the
worst-case rounding the analytical bound pays for).

The last line: `pipeline audit: worst detection D, worst false alarm F`, D the
lowest "tool" rate over the stated cells, F the highest over the correct ones.
"""

from __future__ import annotations

import argparse
import math
import multiprocessing
import time

import numpy as np

import detection_rates
import smoke_mode
from tff_canary.stats.accounting import gaussian_accounting
from tff_canary.stats.simulation import pipeline_simulator as sim

BASE = dict(noise_multiplier=4.0, bits=16, mechanism="distributed_skellam")
CELLS = ([("none", 1.0)] + [("clip", 10.0)]
         + [("shortfall", float(k)) for k in (2, 4, 10, 20)] + [("reuse", 1.0)])


def _stated(bug, mode):
  return bug in ("shortfall", "reuse") or (bug == "clip" and mode == "client")


def _summary(task):
  config, seed = task
  r = sim.simulate(config, seed)
  point = max(r.epsilon_final.epsilon,
              r.epsilon_all.epsilon) > r.claimed.epsilon
  return (r.detected, r.verdict.refuted, r.estimate_flags,
          not r.noise_check.passed, r.epsilon_final.epsilon,
          r.epsilon_all.epsilon, r.wrapped_fraction, r.claimed.epsilon, point)


def detection_table(trials, seed, pool, sizes=None):
  rows = []
  for bug, size in CELLS:
    for mode in sim.MODES:
      config = sim.PipelineConfig(mode=mode, bug=bug, bug_size=size, **BASE,
                                  **(sizes or {}))
      out = np.array(pool.map(_summary, [(config, seed + i)
                                         for i in range(trials)]), dtype=float)
      tool = out[:, 0].astype(bool)
      rows.append(dict(
          bug=bug, size=size, mode=mode, stated=_stated(bug, mode),
          claimed=out[0, 7], tool=detection_rates.rate(tool), limits=detection_rates.limits(tool),
          audit=detection_rates.rate(out[:, 1]), flag=detection_rates.rate(out[:, 2]),
          point=detection_rates.rate(out[:, 8]),
          selftest=detection_rates.rate(out[:, 3]), final=out[:, 4].mean(),
          all=out[:, 5].mean(), wrapped=out[:, 6].mean()))
      print(_row_text(rows[-1]), flush=True)
  return rows


def _pct(rate):
  return f"{rate[0]:6.1%} ±{rate[1]:4.1%}"


HEADER = (f"{'bug':10} {'size':>5} {'mode':6}  {'claim ε':>7}  "
          f"{'tool':>13} {'tool lo':>7} {'tool hi':>7} "
          f"{'audit':>13} {'flag':>13} {'point':>13} {'self-test':>13}  "
          f"{'ε-final':>7} {'ε-all':>7} {'wrapped':>8}")


def _row_text(r):
  mark = "*" if r["stated"] else " "
  return (f"{r['bug']:10} {r['size']:5g} {r['mode']:6}{mark} {r['claimed']:7.3f}"
          f"  {_pct(r['tool'])} {r['limits'][0]:7.1%} {r['limits'][1]:7.1%} "
          f"{_pct(r['audit'])} {_pct(r['flag'])} {_pct(r['point'])} "
          f"{_pct(r['selftest'])}  {r['final']:7.3f} {r['all']:7.3f} "
          f"{r['wrapped']:8.1e}")


DDP_ROWS = [dict(mechanism=m, bits=b, beta=beta, noise_multiplier=1.0,
                 modclip_prob=1e-4)
            for m in ("distributed_skellam", "distributed_dgauss")
            for b in (8, 12, 16) for beta in (0.0, math.exp(-0.5))]
DDP_ROWS += [dict(mechanism="distributed_skellam", bits=b, beta=0.0,
                  noise_multiplier=1.0, modclip_prob=p)
             for b in (8, 16) for p in (0.05, 0.3)]
DDP_ROWS += [dict(mechanism=m, bits=16, beta=0.0, noise_multiplier=z,
                  modclip_prob=1e-4)
             for m in ("distributed_skellam", "distributed_dgauss")
             for z in (0.5, 2.0, 4.0)]


def _ddp_summary(task):
  config, seed = task
  r = sim.simulate(config, seed)
  c = r.claimed
  # The noise actually added, in units of the canary's norm C (the DDG
  # ceiling adds more than z asks for); the canary sits exactly at C.
  z = c.noise_std / (c.parameters.scale * c.parameters.l2_clip)
  ref_final = gaussian_accounting.gaussian_epsilon(
      z * math.sqrt(config.num_rounds), config.delta)
  ref_all = gaussian_accounting.gaussian_epsilon(z, config.delta)
  return (c.epsilon, c.nominal_epsilon, c.gaussian_epsilon,
          r.epsilon_final.epsilon, r.epsilon_all.epsilon, r.wrapped_fraction,
          ref_final, ref_all)


def ddp_table(seeds, seed, pool, sizes=None):
  print("\nDDP epsilon (client canaries, correct pipeline, mean of "
        f"{seeds} runs; δ = 1e-5, one participation)")
  print(f"{'mechanism':20} {'z':>4} {'bits':>4} {'beta':>5} {'modclip':>7}  "
        f"{'analytical':>10} {'nominal':>7} {'Gauss@infl':>10}  "
        f"{'ε-final':>7} {'ref':>6} {'ε-all':>7} {'ref':>6} {'wrapped':>8}  "
        "theorem")
  for row in DDP_ROWS:
    config = sim.PipelineConfig(mode="client", **row, **(sizes or {}))
    out = np.array(pool.map(_ddp_summary, [(config, seed + i)
                                           for i in range(seeds)]))
    theorem = ("KLS21 Prop. 14" if row["mechanism"] == "distributed_dgauss"
               else "AKL21 Thm 3.5")
    print(f"{row['mechanism']:20} {row['noise_multiplier']:4g} "
          f"{row['bits']:4d} {row['beta']:5.3f} "
          f"{row['modclip_prob']:7g}  {out[0, 0]:10.3f} {out[0, 1]:7.3f} "
          f"{out[0, 2]:10.3f}  {out[:, 3].mean():7.3f} {out[0, 6]:6.3f} "
          f"{out[:, 4].mean():7.3f} {out[0, 7]:6.3f} "
          f"{out[:, 5].mean():8.1e}  {theorem}", flush=True)


# --smoke: one run per cell and row, on a small pipeline.
SMOKE_SIZES = dict(dim=256, num_rounds=4, participants=40, num_candidates=100)


def main(argv=None):
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--trials", type=int, default=60)
  parser.add_argument("--workers", type=int, default=1)
  parser.add_argument("--ddp_seeds", type=int, default=3)
  parser.add_argument("--seed", type=int, default=0)
  parser.add_argument("--ddp_only", action="store_true",
                      help="only the DDP epsilon table (no detection table, "
                           "no last line)")
  args = smoke_mode.parse_args(
      parser, argv, dict(trials=1, ddp_seeds=1),
      f"one trial per cell and one seed per DDP row on a small "
      f"pipeline ({SMOKE_SIZES})")
  sizes = SMOKE_SIZES if args.smoke else None
  start = time.time()
  if args.ddp_only:
    with multiprocessing.Pool(args.workers) as pool:
      ddp_table(args.ddp_seeds, args.seed + 10**6, pool, sizes)
    return
  print(HEADER)
  with multiprocessing.Pool(args.workers) as pool:
    rows = detection_table(args.trials, args.seed, pool, sizes)
    ddp_table(args.ddp_seeds, args.seed + 10**6, pool, sizes)
  worst_d = min(r["tool"][0] for r in rows if r["stated"])
  worst_f = max(r["tool"][0] for r in rows if r["bug"] == "none")
  print(f"\n{args.trials} trials per cell; {time.time() - start:.0f} s")
  print(f"pipeline audit: worst detection {worst_d:.3f}, worst false alarm "
        f"{worst_f:.3f}")


if __name__ == "__main__":
  main()
