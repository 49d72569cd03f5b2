"""Bias and interval coverage of epsilon-final and epsilon-all, with many canaries.

  .venv/bin/python bench/coverage.py [--dim 10000] [--trials 200]
      [--all_trials 100] [--rounds 5] [--tightness_trials 5] [--smoke]

NumPy/SciPy only. On the Gaussian mechanism with noise calibrated to a known
epsilon (delta = 1e-6 by default; `tff_canary.stats.simulation.gaussian_mechanism`), for
k / d in {0.1%, 1%, 10%} and epsilon in {1, 3, 10}, with and without removing
the other inserted canaries from each canary's statistic
(`tff_canary.stats.estimators.known_canaries`):

Part 1, epsilon-final (one aggregate, k inserted canaries): mean bias of the
  mean-only and fitted-variance estimates against the analytical epsilon, and
  the fraction of trials whose 95% interval contains it (+- its standard
  error).
Part 2, epsilon-all (`tff_canary.stats.simulation.round_simulation`: R rounds of k
  canaries each, max over rounds; as many held-out canaries as inserted): the
  estimate fits Gaussians to both maxima, so what its interval claims to cover
  is the epsilon of the Gaussians with the maxima's population moments (the
  "estimand"), computed here by Monte Carlo from the exact laws of the
  corrected statistics (one canary alone in its round). Bias and coverage are
  against the estimand; with R = 1 the estimand is close to the analytical
  epsilon. With R > 1 it is not: the maxima are skewed and the held-out max
  has the smaller spread, so the estimand can exceed the analytical epsilon
  (which no attack on the mechanism can); each line also gives the fraction
  of intervals entirely above the analytical epsilon. At R in
  --max_model_rounds (default --rounds) each cell also has a "max model"
  line: `max_of_rounds.epsilon_all_max_model` (each canary's max modelled as
  the max of its own round's Gaussian and R - 1 nulls), whose bias and
  coverage are against the analytical epsilon itself.
Part 3, tightness: one run at d = 10^6 with 10,000 inserted canaries,
  estimated from all of them and from the first 1,000; the ratio of the 95%
  interval widths of the mean-only epsilon-final (expected sqrt(10) = 3.16 if
  the extra canaries are as informative as the first) and both estimates'
  bias.

Coverage standard errors are binomial, sqrt(p (1 - p) / trials) at the
nominal p = 0.95; "ok" marks coverage >= 0.95 - 2 SE.
"""

from __future__ import annotations

import argparse
import contextlib
import time
import warnings

import numpy as np

import smoke_mode
from tff_canary.stats.estimators import estimates
from tff_canary.stats.accounting import gaussian_accounting
from tff_canary.stats.simulation import gaussian_mechanism
from tff_canary.stats.estimators import max_of_rounds
from tff_canary.stats.simulation import round_simulation
from tff_canary.stats.estimators import two_gaussians

CONFIDENCE = 0.95


def _seed(*parts):
  return int(np.random.SeedSequence(list(parts)).generate_state(1, np.uint32)[0])


@contextlib.contextmanager
def _quiet():
  # The estimators' warnings (variance mismatch, ...) would repeat per trial.
  with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    yield


def estimand_all(*, dim, noise_std, num_rounds, delta, samples, seed):
  """(epsilon, mc_se) of Gaussians with the corrected maxima's moments.

  Inserted: max(own, R - 1 nulls) with own = cos(c, c + sigma z) =
  (1 + sigma |z| t) / sqrt(1 + 2 sigma |z| t + sigma^2 |z|^2), t ~ null,
  |z|^2 ~ chi2(d): the lone-canary law. Held-out: max of R nulls. mc_se: the
  standard deviation of the estimand over 10 independent tenths.
  """
  rng = np.random.default_rng(seed)
  values = []
  for _ in range(10):
    n = samples // 10
    t = round_simulation.null_cosines(dim, (n,), rng)
    z = np.sqrt(rng.chisquare(dim, n)) * noise_std
    own = (1 + z * t) / np.sqrt(1 + 2 * z * t + z * z)
    ins = own
    if num_rounds > 1:
      ins = np.maximum(own, round_simulation.null_cosines(
          dim, (n, num_rounds - 1), rng).max(axis=1))
    held = round_simulation.null_cosines(dim, (n, num_rounds), rng).max(axis=1)
    values.append((ins.mean(), ins.std(), held.mean(), held.std()))
  mean = np.mean(values, axis=0)
  eps = [two_gaussians.epsilon_for_delta(delta, v[2], v[3], v[0], v[1])
         for v in values]
  full = two_gaussians.epsilon_for_delta(delta, mean[2], mean[3], mean[0],
                                         mean[1])
  return full, float(np.std(eps, ddof=1) / np.sqrt(10))


def _summary(values, covered, truth):
  """Bias +- SE and coverage +- SE at the nominal level, "ok" if >= -2 SE."""
  values = np.asarray(values)
  bias = values.mean() - truth
  se = values.std(ddof=1) / np.sqrt(values.size)
  cover = np.mean(covered)
  cover_se = np.sqrt(CONFIDENCE * (1 - CONFIDENCE) / values.size)
  ok = "ok" if cover >= CONFIDENCE - 2 * cover_se else "SHORT"
  return (f"{bias:+8.3f} +- {se:5.3f} ({100 * bias / truth:+6.1f}%)  "
          f"coverage {cover:.3f} +- {cover_se:.3f} {ok}")


def part_final(args, epsilon, ratio, remove):
  noise = gaussian_accounting.gaussian_noise_multiplier(epsilon, args.delta)
  k = max(2, int(round(ratio * args.dim)))
  got = {"mean_only": ([], []), "fitted_variance": ([], [])}
  for trial in range(args.trials):
    run = gaussian_mechanism.simulate(
        dim=args.dim, num_inserted=k, num_held_out=0, noise_std=noise,
        seed=_seed(args.seed, 1, int(epsilon * 10), k, trial),
        remove_known_canaries=remove)
    for method, (values, covered) in got.items():
      with _quiet():
        est = estimates.epsilon_final(run.inserted, dim=args.dim,
                                      delta=args.delta, method=method)
      values.append(est.epsilon)
      covered.append(est.interval.low <= epsilon <= est.interval.high)
  return {m: _summary(v, c, epsilon) for m, (v, c) in got.items()}


def part_all(args, epsilon, ratio, remove, rounds, estimand, max_model):
  """(Gaussian-fit line, max-model line or None) for one cell."""
  noise = gaussian_accounting.gaussian_noise_multiplier(epsilon, args.delta)
  k = max(2, int(round(ratio * args.dim)))
  values, covered, above = [], [], []
  model_values, model_covered, model_above = [], [], []
  for trial in range(args.all_trials):
    run = round_simulation.simulate_rounds(
        dim=args.dim, num_rounds=rounds, inserted_per_round=k,
        num_held_out=k * rounds, noise_std=noise,
        seed=_seed(args.seed, 2, int(epsilon * 10), k, rounds, trial),
        remove_known_canaries=remove)
    with _quiet():
      est = estimates.epsilon_all(run.inserted, run.held_out,
                                  delta=args.delta)
    values.append(est.epsilon)
    covered.append(est.interval.low <= estimand <= est.interval.high)
    above.append(est.interval.low > epsilon)
    if max_model:
      with _quiet():
        est = max_of_rounds.epsilon_all_max_model(
            run.inserted, run.held_out,
            inserted_participation=np.ones(run.inserted.size, np.int64),
            num_rounds=rounds, delta=args.delta)
      model_values.append(est.epsilon)
      model_covered.append(est.interval.low <= epsilon <= est.interval.high)
      model_above.append(est.interval.low > epsilon)
  line = (_summary(values, covered, estimand)
          + f"; interval above the analytical eps in {np.mean(above):.2f}")
  model_line = None
  if max_model:
    model_line = (_summary(model_values, model_covered, epsilon)
                  + "; interval above the analytical eps in "
                  f"{np.mean(model_above):.2f}")
  return line, model_line


def part_tightness(args, epsilon, remove):
  dim, big, small = args.tightness_sizes
  noise = gaussian_accounting.gaussian_noise_multiplier(epsilon, args.delta)
  ratios, eps_big, eps_small = [], [], []
  for trial in range(args.tightness_trials):
    run = gaussian_mechanism.simulate(
        dim=dim, num_inserted=big, num_held_out=0, noise_std=noise,
        seed=_seed(args.seed, 3, int(epsilon * 10), trial),
        remove_known_canaries=remove)
    with _quiet():
      a = estimates.epsilon_final(run.inserted, dim=dim, delta=args.delta)
      b = estimates.epsilon_final(run.inserted[:small], dim=dim,
                                  delta=args.delta)
    ratios.append((b.interval.high - b.interval.low)
                  / (a.interval.high - a.interval.low))
    eps_big.append(a.epsilon)
    eps_small.append(b.epsilon)
  ratios = np.asarray(ratios)
  n = ratios.size
  return (f"width({small:,}) / width({big:,}) = {ratios.mean():.3f} +- "
          f"{ratios.std(ddof=1) / np.sqrt(n):.3f}; epsilon {big:,} "
          f"{np.mean(eps_big):.3f} +- {np.std(eps_big, ddof=1):.3f}, {small:,} "
          f"{np.mean(eps_small):.3f} +- {np.std(eps_small, ddof=1):.3f} "
          f"(mean +- sd over {n} runs)")


# --smoke: the tiniest sizes that still run every part and both R.
SMOKE = dict(dim=2000, ratios="0.01", epsilons="3", trials=2, all_trials=2,
             rounds=2, tightness_trials=2, estimand_samples=20_000)


def main(argv=None):
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("--dim", type=int, default=10000)
  parser.add_argument("--ratios", default="0.001,0.01,0.1")
  parser.add_argument("--epsilons", default="1,3,10")
  parser.add_argument("--delta", type=float, default=1e-6)
  parser.add_argument("--trials", type=int, default=200)
  parser.add_argument("--all_trials", type=int, default=100)
  parser.add_argument("--rounds", type=int, default=5)
  parser.add_argument("--tightness_trials", type=int, default=5)
  parser.add_argument("--max_model_rounds", default=None,
                      help="R values at which part 2 also runs the max "
                      "model (comma-separated; default --rounds)")
  parser.add_argument("--estimand_samples", type=int, default=4_000_000)
  parser.add_argument("--seed", type=int, default=0)
  parser.add_argument("--parts", default="final,all,tightness")
  args = smoke_mode.parse_args(
      parser, argv, SMOKE,
      "tiny sizes")
  # Part 3's d, and its many and few canaries (module docstring).
  args.tightness_sizes = (10**4, 200, 20) if args.smoke else (10**6, 10_000,
                                                             1_000)
  ratios = [float(v) for v in args.ratios.split(",")]
  epsilons = [float(v) for v in args.epsilons.split(",")]
  parts = args.parts.split(",")
  max_model_rounds = ({args.rounds} if args.max_model_rounds is None else
                      {int(v) for v in args.max_model_rounds.split(",")})
  start = time.perf_counter()
  print(f"d = {args.dim}, delta = {args.delta:g}, {args.trials} trials per "
        f"cell, 95% intervals; bias = mean - truth +- its SE")
  if "final" in parts:
    print("\nPart 1: epsilon-final (one aggregate), truth = analytical epsilon")
    for epsilon in epsilons:
      for ratio in ratios:
        for remove in (False, True):
          got = part_final(args, epsilon, ratio, remove)
          for method, line in got.items():
            print(f"  eps {epsilon:4g}  k/d {ratio:6.1%}  "
                  f"{'corrected  ' if remove else 'uncorrected'}  "
                  f"{method:15s} {line}", flush=True)
  if "all" in parts:
    for rounds in sorted({1, args.rounds}):
      print(f"\nPart 2: epsilon-all ({args.all_trials} trials per cell), "
            f"R = {rounds} round(s), k per round, "
            f"truth = estimand (Gaussians with the corrected maxima's moments)"
            + ("; max model (max_of_rounds): truth = analytical epsilon"
               if rounds in max_model_rounds else ""))
      for epsilon in epsilons:
        noise = gaussian_accounting.gaussian_noise_multiplier(epsilon,
                                                              args.delta)
        estimand, mc_se = estimand_all(
            dim=args.dim, noise_std=noise, num_rounds=rounds,
            delta=args.delta, samples=args.estimand_samples,
            seed=_seed(args.seed, 4, int(epsilon * 10), rounds))
        print(f"  eps {epsilon:g}: estimand {estimand:.3f} (Monte Carlo SE "
              f"{mc_se:.3f})")
        for ratio in ratios:
          for remove in (False, True):
            line, model_line = part_all(args, epsilon, ratio, remove, rounds,
                                        estimand, rounds in max_model_rounds)
            head = (f"  eps {epsilon:4g}  k/d {ratio:6.1%}  "
                    f"{'corrected  ' if remove else 'uncorrected'}  ")
            print(f"{head}epsilon_all     {line}", flush=True)
            if model_line is not None:
              print(f"{head}max model       {model_line}", flush=True)
  if "tightness" in parts:
    dim, big, small = args.tightness_sizes
    print(f"\nPart 3: {big:,} vs the first {small:,} inserted canaries of one "
          f"run, d = {dim:,} (k/d = {big / dim:.0%}), mean-only epsilon-final")
    for epsilon in epsilons:
      for remove in (False, True):
        print(f"  eps {epsilon:4g}  "
              f"{'corrected  ' if remove else 'uncorrected'}  "
              f"{part_tightness(args, epsilon, remove)}", flush=True)
  print(f"\ntotal {time.perf_counter() - start:.0f} s")


if __name__ == "__main__":
  main()
