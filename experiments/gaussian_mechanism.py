"""One-shot estimates of the Gaussian mechanism (docs/method/reference-numbers.md, paper Table 2).

For each target epsilon, the Gaussian sum mechanism with sensitivity 1 and the
noise std calibrated to (epsilon, delta) by the exact analytical Gaussian
mechanism is run `--trials` times on `--dim`-dimensional random canaries
(`tff_canary.stats.simulation.gaussian_mechanism`), and each run is estimated in one shot:

* run A: `--num_canaries` inserted and as many held-out canaries ->
  epsilon-final with the mean-only fit and with the fitted variance
  (`tff_canary.stats.estimators.estimates.epsilon_final`), and epsilon_lo against the exact
  closed-form null and against the held-out canaries
  (`tff_canary.stats.bounds.lower_bounds.epsilon_lo`; the paper's construction, whose 95%
  is nominal only), plus the simultaneous (valid) epsilon_lo with the exact
  null;
* run B: 2 * `--num_canaries` candidates, each inserted by a fair coin ->
  the one-run bound of Steinke, Nasr & Jagielski (2023)
  (`tff_canary.stats.bounds.lower_bounds.one_run_bound`).

With `--remove_known_canaries` (the default) each canary's statistic in run A
is taken without the other inserted canaries (`tff_canary.stats.estimators.known_canaries`;
exact for this mechanism): the mean-only epsilon-final then estimates the
epsilon of the noise std sigma, not sqrt(sigma^2 + k / d). Run B (coin flips)
always uses the plain statistics, as the one-run bound assumes.

With `--simulator orthogonal` the canaries are orthonormal
(`tff_canary.stats.simulation.orthogonal_mechanism`, exact in O(m) per run)
and removal projects the other inserted canaries' directions out of rho.
That leaves a canary (inserted, or its counterfactual with the other k - 1
inserted) in dimension d - k + 1 (`orthogonal_mechanism.effective_dim`), the
dim given to run A's estimators and exact-null bounds (recorded as
`statistic_dim`). Run B's statistics are then the removal cosines.

The paper reports epsilon-final 0.99 +- 0.14, 2.96 +- 0.15 and 10.00 +- 0.23 for
targets 1, 3 and 10 at delta = 1e-6, d = 1e6, 1000 canaries, 50 runs.
epsilon_lo and the one-run bound are lower bounds that saturate with the number
of canaries (epsilon_lo near 6.2 with 1000 canaries), not estimates.

Writes the results to runs/gm.json and a figure to runs/gm.png (runs/ is
git-ignored); --output_json and --plot choose other paths, an empty value
skips the file.

Usage:
  .venv/bin/python experiments/gaussian_mechanism.py [--smoke]
"""

from __future__ import annotations

import collections
import os
import sys
import tempfile
import time
import warnings
from typing import Any, Callable, Sequence

from absl import app
from absl import flags
import numpy as np

from tff_canary.stats import atomic_files
from tff_canary.stats.estimators import estimates
from tff_canary.stats.accounting import gaussian_accounting
from tff_canary.stats.simulation import gaussian_mechanism
from tff_canary.stats.simulation import orthogonal_mechanism
from tff_canary.stats.bounds import lower_bounds
from tff_canary.stats import validation

_RESULT_KEYS = ("target_epsilon", "noise_std", "delta", "dim", "num_canaries",
                "trials", "epsilon_final_mean", "epsilon_final_std",
                "epsilon_final_fitted_mean", "epsilon_final_fitted_std",
                "epsilon_lo_mean", "one_run_bound_mean", "seconds")

# Paper, Table 2: mean and std of epsilon-final over 50 runs (d = 1e6, 1000
# canaries, delta = 1e-6), by target epsilon.
PAPER_EPSILON_FINAL = {1.0: (0.99, 0.14), 3.0: (2.96, 0.15),
                       10.0: (10.00, 0.23)}

_FLAGS = flags.FLAGS

# The simulators: gaussian_mechanism's ("fast", "brute"; i.i.d. canaries) and
# orthogonal_mechanism's ("orthogonal"; orthonormal canaries).
SIMULATORS = gaussian_mechanism.SIMULATORS + (orthogonal_mechanism.SIMULATOR,)

# The outputs, under the git-ignored runs/ like every experiment's.
DEFAULT_JSON = "runs/gm.json"
DEFAULT_PLOT = "runs/gm.png"


def define_flags() -> None:
  """Defines the script's flags.

  Called only when the file runs as a script, so that importing it for its
  functions (as the tests do) leaves absl's global flags alone.
  """
  flags.DEFINE_integer("dim", 1_000_000, "Dimension d of the canaries.")
  flags.DEFINE_integer("num_canaries", 1000,
                       "Inserted canaries per run (as many are held out; run B "
                       "has twice as many coin-flip candidates).")
  flags.DEFINE_list("target_epsilons", ["1", "3", "10"],
                    "Analytical epsilons the noise is calibrated to.")
  flags.DEFINE_float("delta", 1e-6, "Delta of every epsilon.")
  flags.DEFINE_integer("trials", 50, "Runs per target epsilon.")
  flags.DEFINE_integer("seed", 0, "Seed every run's seed derives from.")
  flags.DEFINE_enum("simulator", "fast", list(SIMULATORS),
                    "fast: exact in distribution via the Bartlett "
                    "decomposition; brute: materializes d-dim vectors (slow); "
                    "orthogonal: orthonormal canaries (exact, O(m)).")
  flags.DEFINE_bool("remove_known_canaries", True,
                    "Take each canary's cosine without the other inserted "
                    "canaries (exact for this mechanism); false: the paper's "
                    "plain cosines.")
  flags.DEFINE_string("output_json", DEFAULT_JSON,
                      "Where to write the results (JSON); empty: nowhere.")
  flags.DEFINE_string("plot", DEFAULT_PLOT,
                      "Where to write a PNG of the spread; empty: nowhere.")
  flags.DEFINE_bool("smoke", False,
                    "A few seconds: the sizes of `SMOKE` unless given, and "
                    "gm.json and gm.png in a new temporary directory unless "
                    "--output_json or --plot is given. Checks that the "
                    "command runs; not the study.")


# --smoke: the smallest study that still runs every estimate (two trials: a
# std needs two).
SMOKE = dict(dim=4000, num_canaries=40, target_epsilons=["3"], trials=2)


def apply_smoke() -> None:
  """--smoke's sizes and temporary outputs, for the flags not given."""
  for name, value in SMOKE.items():
    if not _FLAGS[name].present:
      setattr(_FLAGS, name, value)
  out = None
  for name, file in (("output_json", "gm.json"), ("plot", "gm.png")):
    if not _FLAGS[name].present:
      out = out or tempfile.mkdtemp(prefix="gaussian_mechanism-smoke-")
      setattr(_FLAGS, name, os.path.join(out, file))


def trial_seed(seed: int, target_index: int, trial: int, run: int) -> int:
  """The simulator seed of one run: distinct for every (target, trial, run)."""
  state = np.random.SeedSequence([seed, target_index, trial, run])
  return int(state.generate_state(1, np.uint32)[0])


def check_args(*, dim, num_canaries, target_epsilons, delta, trials, seed,
               simulator) -> tuple[Any, ...]:
  """Validates the arguments of `run_study`; returns them normalized."""
  dim = validation.as_dim(dim, "dim")
  num_canaries = validation.as_int(num_canaries, "num_canaries", minimum=2)
  if isinstance(target_epsilons, (str, bytes)):
    raise TypeError(f"target_epsilons must be a sequence of numbers, got "
                    f"{target_epsilons!r}.")
  targets = [validation.as_positive(e, "target_epsilons") for e in
             target_epsilons]
  if not targets:
    raise ValueError("target_epsilons must not be empty.")
  delta = validation.as_open_unit(delta, "delta")
  trials = validation.as_int(trials, "trials", minimum=2)
  seed = validation.as_int(seed, "seed", minimum=0)
  simulator = validation.as_choice(simulator, "simulator", SIMULATORS)
  if simulator == "orthogonal" and dim < 2 * num_canaries:
    raise ValueError(
        f"dim={dim} is too small for orthogonal canaries with num_canaries="
        f"{num_canaries}: runs A and B have 2 * num_canaries orthonormal "
        f"canaries, which needs dim >= {2 * num_canaries}.")
  if simulator == "fast" and dim < 2 * num_canaries + 1:
    raise ValueError(
        f"dim={dim} is too small for the fast simulator with num_canaries="
        f"{num_canaries}: run B may insert all 2 * num_canaries candidates, "
        f"which needs dim >= {2 * num_canaries + 1}; use simulator='brute'.")
  return dim, num_canaries, targets, delta, trials, seed, simulator


def run_study(*,
              dim: int,
              num_canaries: int,
              target_epsilons: Sequence[float],
              delta: float,
              trials: int,
              seed: int,
              simulator: str = "fast",
              remove_known_canaries: bool = True,
              progress: Callable[[str], None] | None = None,
              on_result: Callable[[dict[str, Any]], None] | None = None
              ) -> dict[str, Any]:
  """Runs the study; returns {"config": ..., "results": [one per target]}.

  Args:
    dim: Dimension d.
    num_canaries: Inserted canaries per run A (and held-out ones); run B has
      2 * num_canaries coin-flip candidates.
    target_epsilons: Positive analytical epsilons.
    delta: Delta in (0, 1).
    trials: Runs per target, at least 2 (a std needs two).
    seed: Nonnegative seed.
    simulator: "fast" or "brute" (i.i.d. canaries) or "orthogonal".
    remove_known_canaries: Run A's statistics without the other inserted
      canaries (module docstring); recorded in the config.
    progress: Called with a short status string after every trial.
    on_result: Called with each target's result as soon as it is done.

  Returns:
    A JSON-ready dict. Each result has the keys of `_RESULT_KEYS` plus
    `epsilon_lo_held_out_mean` (epsilon_lo against the held-out canaries
    instead of the exact null), `epsilon_lo_simultaneous_mean` (the valid,
    simultaneous epsilon_lo with the exact null), `one_run_bound_ceiling` (the mean largest
    value the one-run bound could have reached), `epsilon_final_coverage` and
    `epsilon_final_fitted_coverage` (the fraction of runs whose confidence
    interval contains the target), `warnings` (counts of the estimators'
    warnings by class), `statistic_dim` (the dim given to run A's estimators:
    d, or d - k + 1 for orthogonal canaries with removal), and the per-trial
    values (`<name>_trials`).
  """
  dim, num_canaries, targets, delta, trials, seed, simulator = check_args(
      dim=dim, num_canaries=num_canaries, target_epsilons=target_epsilons,
      delta=delta, trials=trials, seed=seed, simulator=simulator)
  if not isinstance(remove_known_canaries, (bool, np.bool_)):
    raise TypeError(f"remove_known_canaries must be a bool, got "
                    f"{validation.show(remove_known_canaries)}.")
  config = dict(dim=dim, num_canaries=num_canaries, target_epsilons=targets,
                delta=delta, trials=trials, seed=seed, simulator=simulator,
                remove_known_canaries=bool(remove_known_canaries),
                trial_seeds="numpy SeedSequence([seed, target_index, trial, "
                            "run]).generate_state(1)[0]; run 0 = A, 1 = B")
  orthogonal = simulator == orthogonal_mechanism.SIMULATOR
  # The dimension of run A's statistics (module docstring).
  stat_dim = (orthogonal_mechanism.effective_dim(dim, num_canaries)
              if orthogonal and remove_known_canaries else dim)
  results = []
  for index, target in enumerate(targets):
    start = time.perf_counter()
    noise_std = float(gaussian_accounting.gaussian_noise_multiplier(target,
                                                                    delta))
    values = {name: [] for name in ("epsilon_final", "epsilon_final_fitted",
                                    "epsilon_lo", "epsilon_lo_held_out",
                                    "epsilon_lo_simultaneous",
                                    "one_run_bound")}
    covered = {"epsilon_final": 0, "epsilon_final_fitted": 0}
    ceilings = []
    warned = collections.Counter()
    for trial in range(trials):
      with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        # SciPy 1.9 on NumPy 1.25 deprecation noise, not about the estimates.
        warnings.simplefilter("ignore", DeprecationWarning)
        if orthogonal:
          run_a = orthogonal_mechanism.simulate(
              dim=dim, num_inserted=num_canaries, num_held_out=num_canaries,
              noise_std=noise_std, seed=trial_seed(seed, index, trial, 0),
              remove_known_canaries=bool(remove_known_canaries))
        else:
          run_a = gaussian_mechanism.simulate(
              dim=dim, num_inserted=num_canaries, num_held_out=num_canaries,
              noise_std=noise_std, seed=trial_seed(seed, index, trial, 0),
              simulator=simulator,
              remove_known_canaries=bool(remove_known_canaries))
        for name, method in (("epsilon_final", "mean_only"),
                             ("epsilon_final_fitted", "fitted_variance")):
          estimate = estimates.epsilon_final(run_a.inserted, dim=stat_dim,
                                             delta=delta, method=method)
          values[name].append(estimate.epsilon)
          low, high = estimate.interval
          covered[name] += int(low <= target <= high)
        values["epsilon_lo"].append(lower_bounds.epsilon_lo(
            run_a.inserted, delta=delta, dim=stat_dim).epsilon)
        values["epsilon_lo_held_out"].append(lower_bounds.epsilon_lo(
            run_a.inserted, delta=delta, held_out=run_a.held_out).epsilon)
        values["epsilon_lo_simultaneous"].append(lower_bounds.epsilon_lo(
            run_a.inserted, delta=delta, dim=stat_dim,
            correction="simultaneous").epsilon)
        if orthogonal:
          run_b = orthogonal_mechanism.simulate_coin(
              dim=dim, num_candidates=2 * num_canaries, noise_std=noise_std,
              seed=trial_seed(seed, index, trial, 1))
        else:
          run_b = gaussian_mechanism.simulate_coin(
              dim=dim, num_candidates=2 * num_canaries, noise_std=noise_std,
              seed=trial_seed(seed, index, trial, 1), simulator=simulator)
        bound = lower_bounds.one_run_bound(run_b.statistics,
                                           run_b.inserted_mask, delta=delta)
        values["one_run_bound"].append(bound.epsilon)
        ceilings.append(bound.ceiling)
      warned.update(type(w.message).__name__ for w in caught)
      if progress is not None:
        progress(f"target epsilon {target:g} ({index + 1}/{len(targets)}): "
                 f"trial {trial + 1}/{trials}")
    arrays = {name: np.asarray(v, dtype=np.float64)
              for name, v in values.items()}
    result = dict(
        target_epsilon=target, noise_std=noise_std, delta=delta, dim=dim,
        num_canaries=num_canaries, trials=trials,
        epsilon_final_mean=float(arrays["epsilon_final"].mean()),
        epsilon_final_std=float(arrays["epsilon_final"].std(ddof=1)),
        epsilon_final_fitted_mean=float(
            arrays["epsilon_final_fitted"].mean()),
        epsilon_final_fitted_std=float(
            arrays["epsilon_final_fitted"].std(ddof=1)),
        epsilon_lo_mean=float(arrays["epsilon_lo"].mean()),
        one_run_bound_mean=float(arrays["one_run_bound"].mean()),
        seconds=time.perf_counter() - start,
        epsilon_lo_held_out_mean=float(arrays["epsilon_lo_held_out"].mean()),
        epsilon_lo_simultaneous_mean=float(
            arrays["epsilon_lo_simultaneous"].mean()),
        one_run_bound_ceiling=float(np.mean(ceilings)),
        epsilon_final_coverage=covered["epsilon_final"] / trials,
        epsilon_final_fitted_coverage=covered["epsilon_final_fitted"] / trials,
        warnings=dict(sorted(warned.items())),
        statistic_dim=stat_dim,
    )
    assert set(_RESULT_KEYS) <= set(result)
    for name, array in arrays.items():
      result[f"{name}_trials"] = array.tolist()
    results.append(result)
    if on_result is not None:
      on_result(result)
  return {"config": config, "results": results}


_COLUMNS = (("target", 7), ("noise_std", 10), ("eps_final mean-only", 20),
            ("eps_final fitted-var", 21), ("eps_lo", 7),
            ("eps_lo held-out", 16), ("eps_lo simult.", 15),
            ("one-run", 8), ("seconds", 8))


def table_header() -> str:
  line = " ".join(f"{name:>{width}}" for name, width in _COLUMNS)
  return line + "\n" + "-" * len(line)


def table_row(result: dict[str, Any]) -> str:
  cells = (f"{result['target_epsilon']:g}", f"{result['noise_std']:.4f}",
           f"{result['epsilon_final_mean']:.3f} +- "
           f"{result['epsilon_final_std']:.3f}",
           f"{result['epsilon_final_fitted_mean']:.3f} +- "
           f"{result['epsilon_final_fitted_std']:.3f}",
           f"{result['epsilon_lo_mean']:.3f}",
           f"{result['epsilon_lo_held_out_mean']:.3f}",
           f"{result['epsilon_lo_simultaneous_mean']:.3f}",
           f"{result['one_run_bound_mean']:.3f}", f"{result['seconds']:.1f}")
  return " ".join(f"{cell:>{width}}" for cell, (_, width) in zip(cells,
                                                                  _COLUMNS))


def write_json(study: dict[str, Any], path: str) -> None:
  """Writes `study` to `path` atomically (temp file, then os.replace)."""
  atomic_files.write_json(path, study)


def plot_study(study: dict[str, Any], path: str) -> None:
  """Writes a PNG: per target, both epsilon-final variants against the target.

  One panel per target epsilon (their scales differ), each with the per-trial
  estimates of the mean-only and fitted-variance variants as jittered points
  over a box plot, and the analytical epsilon as a horizontal line.
  """
  import matplotlib  # pylint: disable=g-import-not-at-top
  matplotlib.use("Agg")
  from matplotlib import pyplot as plt  # pylint: disable=g-import-not-at-top

  results = study["results"]
  config = study["config"]
  fig, axes = plt.subplots(1, len(results), figsize=(3.2 * len(results), 3.6),
                           squeeze=False)
  jitter = np.random.default_rng(0)
  for ax, result in zip(axes[0], results):
    data = [result["epsilon_final_trials"],
            result["epsilon_final_fitted_trials"]]
    ax.boxplot(data, widths=0.5, showfliers=False)
    for position, values in enumerate(data, start=1):
      ax.plot(position + jitter.uniform(-0.12, 0.12, len(values)), values,
              "o", ms=3, alpha=0.5, color=("C0", "C1")[position - 1])
    ax.axhline(result["target_epsilon"], color="k", ls="--", lw=1,
               label="analytical")
    ax.set_xticks([1, 2], ["mean-only", "fitted var."])
    ax.set_title(f"target epsilon = {result['target_epsilon']:g}\n"
                 f"noise_std = {result['noise_std']:.3f}", fontsize=9)
  axes[0][0].set_ylabel("epsilon-final")
  axes[0][0].legend(fontsize=8, loc="upper left")
  fig.suptitle(f"Gaussian mechanism, d = {config['dim']:g}, "
               f"{config['num_canaries']} canaries, delta = "
               f"{config['delta']:g}, {config['trials']} runs", fontsize=9)
  fig.tight_layout()
  try:
    with atomic_files.replacing(path, suffix=".png") as temp:
      fig.savefig(temp, format="png", dpi=120)
  finally:
    plt.close(fig)


def _progress(message: str) -> None:
  if sys.stderr.isatty():
    sys.stderr.write(f"\r  {message}   ")
    sys.stderr.flush()


def _print_result(result: dict[str, Any]) -> None:
  if sys.stderr.isatty():
    sys.stderr.write("\r" + " " * 70 + "\r")
  print(table_row(result), flush=True)


def main(argv: Sequence[str]) -> None:
  if len(argv) > 1:
    raise app.UsageError(f"Unexpected arguments: {argv[1:]}")
  if _FLAGS.smoke:
    apply_smoke()
  try:
    targets = [float(e) for e in _FLAGS.target_epsilons]
  except ValueError as e:
    raise app.UsageError(f"--target_epsilons must be numbers, got "
                         f"{_FLAGS.target_epsilons}: {e}") from None
  try:
    check_args(dim=_FLAGS.dim, num_canaries=_FLAGS.num_canaries,
               target_epsilons=targets, delta=_FLAGS.delta,
               trials=_FLAGS.trials, seed=_FLAGS.seed,
               simulator=_FLAGS.simulator)
  except (TypeError, ValueError) as e:
    raise app.UsageError(str(e)) from None
  print(f"Gaussian mechanism, d = {_FLAGS.dim}, {_FLAGS.num_canaries} "
        f"canaries, delta = {_FLAGS.delta:g}, {_FLAGS.trials} runs per "
        f"target, simulator {_FLAGS.simulator}, seed {_FLAGS.seed}, "
        + ("other inserted canaries removed" if _FLAGS.remove_known_canaries
           else "plain cosines"))
  print(table_header(), flush=True)
  start = time.perf_counter()
  study = run_study(dim=_FLAGS.dim, num_canaries=_FLAGS.num_canaries,
                    target_epsilons=targets, delta=_FLAGS.delta,
                    trials=_FLAGS.trials, seed=_FLAGS.seed,
                    simulator=_FLAGS.simulator,
                    remove_known_canaries=_FLAGS.remove_known_canaries,
                    progress=_progress,
                    on_result=_print_result)
  print(f"total {time.perf_counter() - start:.1f} s. Mean +- std over runs; "
        f"eps_lo and one-run are lower bounds that saturate with the number "
        f"of canaries, not estimates.")
  for result in study["results"]:
    paper = PAPER_EPSILON_FINAL.get(result["target_epsilon"])
    if paper is not None:
      print(f"  paper, target {result['target_epsilon']:g}: epsilon-final "
            f"{paper[0]:.2f} +- {paper[1]:.2f}")
  if _FLAGS.output_json:
    write_json(study, _FLAGS.output_json)
    print(f"wrote {_FLAGS.output_json}")
  if _FLAGS.plot:
    plot_study(study, _FLAGS.plot)
    print(f"wrote {_FLAGS.plot}")


if __name__ == "__main__":
  define_flags()
  app.run(main)
