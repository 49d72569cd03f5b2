"""Do the bounds keep their confidence? Measured on mechanisms with known epsilon.

  .venv/bin/python bench/validity.py [--trials 500] [--dim 1000000]
  .venv/bin/python bench/validity.py --smoke   # tiny sizes, seconds

Each trial is one run of the Gaussian sum mechanism with canaries (simulated
exactly, `tff_canary.stats.simulation.gaussian_mechanism`), noise calibrated so that the true
epsilon is known (the analytical one; the cosine statistics are
post-processing, so no valid bound may exceed it). Per setting (epsilon, delta)
the table gives the fraction of trials in which each bound exceeded the true
epsilon: 1000 inserted canaries for epsilon_lo (exact null and 1000 held-out
canaries as the null), 2000 coin-flipped candidates for the one-run bound. The
row "no canary" inserts nothing (true epsilon 0): every bound should be 0 in at
least 95% of trials.

Then the audit of a planted bug (Tramèr et al. 2022): an aggregator that
claims noise multiplier z but adds z / clients_per_round. One run is audited
(`audit.audit_coin_statistics`: the f-DP one-run bound and the simultaneous
epsilon_lo, Bonferroni between them) against the claimed epsilon; we report how
often the buggy run is refuted (detection) and how often a correct one is
(false refutation).

A second table does the same for the bounds of `bench/gaussian_bounds.py`
(the f-DP one-run, tight one-run and GDP bounds with each threshold strategy,
docs/method/lower-bounds.md) on the coin-flipped runs of the first `--new_trials` trials of
each setting (they cost about 1 s a run together).

With `--directions orthogonal` every run has orthonormal canaries instead
(`tff_canary.stats.simulation.orthogonal_mechanism`: the coin-flipped runs'
statistics are the removal cosines, each candidate's cosine with the other
inserted canaries' projections removed; run A's are the plain cosines, as in
the iid setting). Each bound of the second table is then marked valid when
its rate is at most 5% + 2 standard errors of a 5% rate over its trials, the
criterion for entering the audit with orthogonal canaries. The measured run:

  .venv/bin/python bench/validity.py --directions orthogonal --deltas 1e-6 \
      --trials 500 --new_trials 500

With orthogonal canaries a third table takes many inserted canaries, 10%
and 25% of d (`MANY_FRACTIONS`), whose projections the audit removes from
the final model (known_canaries_removed = "final_and_all_iterates"): the
audit's own final-model epsilon_lo (`audit.table_bounds`, "epsilon_lo
final", the exact null of `audit.final_dim`, d - |I| + 1) on those removal
cosines, at 95% and at its Bonferroni share of an audit of 4 bounds
(98.75%), with no leakage (the canaries drowned in noise, true epsilon 0)
and at true epsilons 1, 3 and 10; beside it, for contrast, the same bound
with the null of d, which ignores the removal (the audit's before issue 26).
The audit's bound is in the last line's worst rate.

With `--mechanism tree` the runs are DP-FTRL's instead, and the bounds those
of its audit (bench/ftrl_validity.py says how the truth is set).

The last line is the largest exceedance rate over every setting of the valid
bounds: the simultaneous epsilon_lo, Steinke et al.'s one-run bound and the
new ones the audit uses (`gaussian_bounds.IN_AUDIT`); the paper's
uncorrected epsilon_lo is reported beside it.
"""

from __future__ import annotations

import argparse
import time
import warnings

import numpy as np

import ftrl_validity
import gaussian_bounds
import smoke_mode
from tff_canary.mechanisms import registry
from tff_canary.stats.accounting import gaussian_accounting
from tff_canary.stats.audit import audit
from tff_canary.stats.bounds import lower_bounds
from tff_canary.stats.canaries.cosine_table import CosineTable
from tff_canary.stats.simulation import gaussian_mechanism
from tff_canary.stats.simulation import orthogonal_mechanism

# The mechanisms simulated here: the default (the Gaussian sum) and those
# scored per round in correlated noise, simulated as DP-FTRL's tree
# (bench/ftrl_validity.py).
SIMULATED = tuple(name for name in registry.names()
                  if name == registry.DEFAULT or registry.get(name).round_scores)
BOUNDS = ("epsilon_lo exact (simultaneous)", "epsilon_lo held-out (simultaneous)",
          "one-run bound", "epsilon_lo exact (paper)", "epsilon_lo held-out (paper)")
VALID = BOUNDS[:3]


def _bounds(run, coin, dim, delta):
  lo = lower_bounds.epsilon_lo
  return {
      BOUNDS[0]: lo(run.inserted, dim=dim, delta=delta,
                    correction="simultaneous").epsilon,
      BOUNDS[1]: lo(run.inserted, held_out=run.held_out, delta=delta,
                    correction="simultaneous").epsilon,
      BOUNDS[2]: lower_bounds.one_run_bound(coin.statistics, coin.inserted_mask,
                                            delta=delta).epsilon,
      BOUNDS[3]: lo(run.inserted, dim=dim, delta=delta).epsilon,
      BOUNDS[4]: lo(run.inserted, held_out=run.held_out, delta=delta).epsilon,
  }


def _simulators(directions):
  """(simulate, simulate_coin) of i.i.d. or orthogonal canaries."""
  if directions == "orthogonal":
    return orthogonal_mechanism.simulate, orthogonal_mechanism.simulate_coin
  return gaussian_mechanism.simulate, gaussian_mechanism.simulate_coin


def exceedance(*, epsilon, delta, trials, dim, canaries, seed, new_trials=0,
               new_bounds=None, directions="iid"):
  """Fraction of trials each bound exceeded the true epsilon (0: no canary).

  The bounds of `gaussian_bounds.BOUNDS` are computed in the first
  `new_trials` trials and their rates are over those. `directions`: "iid"
  (uniform canaries) or "orthogonal" (orthonormal canaries).
  """
  simulate, simulate_coin = _simulators(directions)
  if epsilon > 0:
    noise = gaussian_accounting.gaussian_noise_multiplier(epsilon, delta)
    inserted, candidates = canaries, 2 * canaries
  else:  # nothing inserted: every statistic follows the null
    noise, inserted, candidates = 1.0, 0, 2 * canaries
  counts = dict.fromkeys(BOUNDS, 0)
  new_bounds = gaussian_bounds.BOUNDS if new_bounds is None else new_bounds
  new_counts = dict.fromkeys(new_bounds, 0)
  new_trials = min(new_trials, trials)
  for trial in range(trials):
    if inserted:
      run = simulate(
          dim=dim, num_inserted=inserted, num_held_out=canaries,
          noise_std=noise, seed=seed + 2 * trial,
          # The paper's plain cosines, as the README's numbers were measured.
          remove_known_canaries=False)
      coin = simulate_coin(
          dim=dim, num_candidates=candidates, noise_std=noise,
          seed=seed + 2 * trial + 1)
    else:
      run = simulate(
          dim=dim, num_inserted=0, num_held_out=2 * canaries, noise_std=noise,
          seed=seed + 2 * trial)
      # "Inserted" canaries that were never inserted: the null on both sides.
      run = _Split(run.held_out[:canaries], run.held_out[canaries:])
      rng = np.random.default_rng([seed, trial])
      coin = _Coin(run.inserted.tolist() + run.held_out.tolist(),
                   rng.random(candidates) < 0.5)
    for name, value in _bounds(run, coin, dim, delta).items():
      counts[name] += value > epsilon
    if trial < new_trials:
      s, mask = np.asarray(coin.statistics), np.asarray(coin.inserted_mask)
      for name, (fn, _) in new_bounds.items():
        new_counts[name] += fn(s, mask, delta) > epsilon
  rates = {name: count / trials for name, count in counts.items()}
  rates.update({name: count / max(new_trials, 1)
                for name, count in new_counts.items()})
  return rates


class _Split:
  def __init__(self, inserted, held_out):
    self.inserted, self.held_out = np.asarray(inserted), np.asarray(held_out)


class _Coin:
  def __init__(self, statistics, mask):
    self.statistics, self.inserted_mask = np.asarray(statistics), mask


# Inserted canaries as fractions of d in the table of many canaries.
MANY_FRACTIONS = (0.1, 0.25)
MANY_EPSILONS = (0.0, 1.0, 3.0, 10.0)  # 0: no leakage
# The noise that drowns the canaries: mu = 1e-9, true epsilon 0 at any delta
# >= 1e-9 (`gaussian_accounting.gaussian_epsilon`).
DROWNED = 1e9
# The audit's share for epsilon_lo final in an audit of 4 bounds.
AUDIT_SHARE = 1.0 - 0.05 / 4
MANY = ("audit's epsilon_lo final (95%)",
        f"audit's epsilon_lo final ({AUDIT_SHARE:.2%})",
        "same, null of d (95%; ignores removal)")


def _removal_table(run, dim):
  """The cosine table of a run of orthogonal canaries whose inserted
  canaries' projections were removed (inserted canaries only)."""
  n = run.inserted.size
  return CosineTable(
      id=np.arange(n), group=np.full(n, "inserted"),
      participation=np.ones(n, np.int64), final_cosine=run.inserted,
      max_cosine=np.full(n, np.nan), max_round=np.full(n, -1), seed=0,
      dim=dim, num_rounds=1, rounds_recorded=0,
      known_canaries_removed="final_and_all_iterates")


def many_canaries(*, fraction, epsilon, delta, trials, dim, seed):
  """Exceedance rates of the `MANY` bounds with inserted canaries at
  `fraction` of d, removal cosines (epsilon 0: drowned canaries)."""
  noise = (DROWNED if epsilon == 0 else
           gaussian_accounting.gaussian_noise_multiplier(epsilon, delta))
  truth = gaussian_accounting.gaussian_epsilon(noise, delta)
  inserted = max(2, int(round(fraction * dim)))
  counts = dict.fromkeys(MANY, 0)
  for trial in range(trials):
    run = orthogonal_mechanism.simulate(
        dim=dim, num_inserted=inserted, num_held_out=0, noise_std=noise,
        seed=seed + trial, remove_known_canaries=True)
    final = audit.table_bounds(_removal_table(run, dim), delta)[
        "epsilon_lo final"]
    values = (final(0.95).epsilon, final(AUDIT_SHARE).epsilon,
              lower_bounds.epsilon_lo(run.inserted, dim=dim, delta=delta,
                                      correction="simultaneous").epsilon)
    for name, value in zip(MANY, values):
      counts[name] += value > truth
  return {name: count / trials for name, count in counts.items()}


def planted_bug(*, claimed_epsilon, delta, clients_per_round, trials, dim,
                candidates, seed, directions="iid"):
  """(detection rate, false refutation rate) of one-run audits."""
  _, simulate_coin = _simulators(directions)
  z = gaussian_accounting.gaussian_noise_multiplier(claimed_epsilon, delta)
  rates = []
  for noise in (z / clients_per_round, z):  # buggy, then correct
    refuted = 0
    for trial in range(trials):
      coin = simulate_coin(
          dim=dim, num_candidates=candidates, noise_std=noise,
          seed=seed + trial)
      verdict = audit.audit_coin_statistics(
          coin.statistics, coin.inserted_mask, dim=dim,
          claimed_epsilon=claimed_epsilon, delta=delta)
      refuted += verdict.refuted
    rates.append(refuted / trials)
  return tuple(rates)


def main(argv=None):
  parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
  parser.add_argument("--trials", type=int, default=500)
  parser.add_argument("--dim", type=int, default=1_000_000)
  parser.add_argument("--canaries", type=int, default=1000)
  parser.add_argument("--new_trials", type=int, default=100)
  parser.add_argument("--only", default=None,
                      help="only the docs/method/lower-bounds.md bounds whose name has this")
  parser.add_argument("--directions", choices=("iid", "orthogonal"),
                      default="iid",
                      help="i.i.d. uniform canaries, or orthonormal ones "
                           "(orthogonal_mechanism; removal cosines for the "
                           "coin-flipped runs)")
  parser.add_argument("--deltas", default="1e-6,1e-4",
                      help="comma-separated deltas of the settings")
  parser.add_argument("--skip_planted_bug", action="store_true")
  # The Gaussian sum mechanism's simulation, or that of a mechanism scored
  # per round in correlated noise (DP-FTRL's tree, bench/ftrl_validity.py).
  parser.add_argument("--mechanism", choices=SIMULATED, default=registry.DEFAULT,
                      help="the Gaussian sum mechanism, or DP-FTRL's tree "
                           "(bench/ftrl_validity.py; only --trials applies)")
  args = smoke_mode.parse_args(
      parser, argv, dict(trials=4, dim=2000, canaries=40, new_trials=2,
                         deltas="1e-6", only="fixed"),
      "4 trials per setting, d = 2000, 40 canaries")
  if registry.get(args.mechanism).round_scores:
    warnings.simplefilter("ignore")
    ftrl_validity.main(args.trials)
    return
  warnings.simplefilter("ignore")
  deltas = [float(d) for d in args.deltas.split(",")]
  settings = [(0.0, 1e-6)] + [(e, d) for d in deltas for e in (1, 3, 10)]
  start = time.perf_counter()
  print(f"Exceedance rates over {args.trials} seeded trials (d = {args.dim}, "
        f"{args.canaries} inserted canaries; one-run: {2 * args.canaries} "
        f"coin-flipped candidates; {args.directions} canaries). Valid bounds "
        "must stay at or below 0.05.")
  header = f"{'true epsilon':>12} {'delta':>7} " + " ".join(
      f"{name:>36}" for name in BOUNDS)
  print(header)
  worst_valid, worst_paper = 0.0, 0.0
  all_rates = []
  new_bounds = gaussian_bounds.selected(args.only)
  in_audit = (gaussian_bounds.IN_AUDIT_ORTHOGONAL
              if args.directions == "orthogonal" else gaussian_bounds.IN_AUDIT)
  for index, (epsilon, delta) in enumerate(settings):
    rates = exceedance(epsilon=epsilon, delta=delta, trials=args.trials,
                       dim=args.dim, canaries=args.canaries,
                       seed=1_000_000 * index, new_trials=args.new_trials,
                       new_bounds=new_bounds, directions=args.directions)
    all_rates.append(rates)
    label = "no canary" if epsilon == 0 else f"{epsilon:g}"
    print(f"{label:>12} {delta:7.0e} " + " ".join(
        f"{rates[name]:36.3f}" for name in BOUNDS), flush=True)
    worst_valid = max(worst_valid, *(rates[n] for n in VALID),
                      *(rates[n] for n in in_audit if n in rates))
    worst_paper = max(worst_paper, *(rates[n] for n in BOUNDS[3:]))
  print()
  print(f"docs/method/lower-bounds.md bounds on the same coin-flipped runs ({2 * args.canaries}"
        f" candidates), exceedance over the first "
        f"{min(args.new_trials, args.trials)} trials of each setting; worst "
        "over the settings last:")
  new_trials = min(args.new_trials, args.trials)
  # A 5% rate over n trials has standard error sqrt(0.05 * 0.95 / n).
  limit = 0.05 + 2.0 * (0.05 * 0.95 / new_trials) ** 0.5
  for name in new_bounds:
    row = [r[name] for r in all_rates]
    mark = " (audit)" if name in in_audit else ""
    verdict = "valid" if max(row) <= limit else "EXCEEDS"
    print(f"  {name + mark:48s} " + " ".join(f"{v:6.3f}" for v in row)
          + f"   worst {max(row):.3f} {verdict}", flush=True)
  print(f"  (valid: worst rate at most 0.05 + 2 SE = {limit:.3f} over "
        f"{new_trials} trials)")
  print()
  if args.directions == "orthogonal":
    print(f"Many orthogonal canaries, removal cosines (d = {args.dim}), "
          f"exceedance over {args.trials} trials of each setting; valid: at "
          f"most the level + 2 SE:")
    print(f"{'inserted':>9} {'true eps':>9} " + " ".join(
        f"{name:>42}" for name in MANY))
    for index, fraction in enumerate(MANY_FRACTIONS):
      for epsilon in MANY_EPSILONS:
        rates = many_canaries(
            fraction=fraction, epsilon=epsilon, delta=1e-6,
            trials=args.trials, dim=args.dim,
            seed=500_000_000 + 1_000_000 * (4 * index + int(epsilon)))
        label = "0 (none)" if epsilon == 0 else f"{epsilon:g}"
        print(f"{fraction:>8.0%}  {label:>9} " + " ".join(
            f"{rates[name]:42.3f}" for name in MANY), flush=True)
        worst_valid = max(worst_valid, rates[MANY[0]])
    print()
  if args.skip_planted_bug:
    print(f"  ({time.perf_counter() - start:.0f} s in all)")
    print(f"largest exceedance rate of a valid bound over every setting: "
          f"{worst_valid:.3f} (the paper's uncorrected epsilon_lo: "
          f"{worst_paper:.3f})")
    return
  trials = args.trials if args.smoke else max(100, args.trials // 2)
  detection, false_refutation = planted_bug(
      claimed_epsilon=1.0, delta=1e-6, clients_per_round=20, trials=trials,
      dim=args.dim, candidates=2 * args.canaries, seed=7,
      directions=args.directions)
  noise = gaussian_accounting.gaussian_noise_multiplier(1.0, 1e-6)
  print(f"Planted bug (Tramèr et al. 2022): claimed epsilon 1 at delta 1e-6 "
        f"(noise multiplier {noise:.3f}"
        "), actual noise divided by 20 clients per round; one run of "
        f"{2 * args.canaries} coin-flipped canaries audited at 95%, "
        f"{trials} trials each:")
  print(f"  detection (buggy run refuted): {detection:.3f}   false refutation "
        f"(correct run refuted): {false_refutation:.3f}")
  print(f"  ({time.perf_counter() - start:.0f} s in all)")
  print(f"largest exceedance rate of a valid bound over every setting: "
        f"{worst_valid:.3f} (the paper's uncorrected epsilon_lo: "
        f"{worst_paper:.3f})")


if __name__ == "__main__":
  main()
