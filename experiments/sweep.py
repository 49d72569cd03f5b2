"""The shape of the paper's Table 3 and Figure 2, at reduced scale.

Runs the EMNIST experiment (built-in synthetic data) for every noise multiplier
in --noise_multipliers (noise 0 and the paper's three EMNIST levels by
default) and every number of presentations in --presentations, then writes

  <output_dir>/sweep.csv   one row per run: noise_multiplier, presentations,
                           analytical epsilon (one participation and the run's
                           presentations), epsilon_all, epsilon_lo_all,
                           epsilon_final (mean-only and fitted variance),
                           epsilon_lo_final, the one-run bounds, accuracy
  <output_dir>/sweep.png   left: Table 3's view (every epsilon per noise level
                           at the fewest presentations, beside the analytical
                           one for that many);
                           right: Figure 2's view (epsilon-final against the
                           number of presentations, one line per noise level)

and each run's own directory under <output_dir>/runs/. Reduced scale: the
defaults (16 runs of 64 rounds of 25 clients) take about 40 minutes on 2 cores,
and put far more canaries among the participants than the paper's 1% (50
inserted canaries beside 1,600 client participations: 3% at one
presentation, 20% at eight), which --allow_large_canary_fraction (on by
default here) accepts, so the estimates are noisier than the paper's; the
shape (epsilon falling with noise, epsilon-final rising with presentations,
epsilon-all far above epsilon-final) is what it shows. Every run's settings
are checked before the first one trains
(`experiment_config.check_before_tensorflow`), so a setting that cannot work
is refused before any training. Re-running with the same --output_dir
resumes: finished runs are read back, not redone.

  .venv/bin/python experiments/sweep.py --output_dir runs/sweep
  .venv/bin/python experiments/sweep.py --smoke   # seconds: does it run?

With --aggregator=tree the runs are DP-FTRL (docs/method/dp-ftrl.md): TFF's
tree aggregation at a fixed --clip, restarted every epoch, so a canary's
presentations are its epochs (one participation per tree). The noise
multipliers default to 0.5, 1, 2 and 4 (the tree refuses noise 0), and
sweep.csv's columns are the tree report's (`TREE_COLUMNS`; also for
--aggregator=banded and blt, the matrix mechanisms): both analytical
epsilons (exact and RDP; no RDP for a matrix mechanism), the exact epsilon
of what the rounds show about the worst-case participant and the one expected for the run's canaries
(`tree_targets`), epsilon-final, epsilon-all by the scheduled GLS statistic T
and by the max statistic M (each with its interval), and the strongest bound;
the figure has the same two views, with epsilon-all (T) on the right.

  .venv/bin/python experiments/sweep.py --aggregator=tree \
      --output_dir runs/ftrl_sweep --presentations=1,4
"""

from __future__ import annotations

import csv
import io
import os
import sys
import tempfile
import warnings

from absl import app
from absl import flags
from absl import logging

import experiment_cli  # first: its import runs quiet_start before TensorFlow loads
from tff_canary.harness.config import experiment_config
from tff_canary.harness.recording import run_dir as run_dir_lib
from tff_canary.harness.reporting import report as report_lib
from tff_canary.mechanisms import registry
from tff_canary.stats import atomic_files

flags.DEFINE_string("output_dir", "runs/sweep", "Where sweep.csv, sweep.png "
                    "and the runs go.")
# The mechanisms with sweep defaults (`protocol.SweepDefaults`), by name.
SWEPT = {name: registry.get(name).sweep for name in registry.names()
         if registry.get(name).sweep is not None}
flags.DEFINE_enum("aggregator", registry.DEFAULT, list(SWEPT),
                  "The mechanism (experiments/emnist.py --help describes "
                  "each), with its default noise multipliers and clip: "
                  + "; ".join(
                      f"{name} ({', '.join(s.noise_multipliers)}; "
                      + ("adaptive clipping" if s.clip is None
                         else f"clip {s.clip:g}") + ")"
                      for name, s in SWEPT.items()) + ".")
flags.DEFINE_list("noise_multipliers", None,
                  "Noise multipliers (default: the --aggregator's).")
flags.DEFINE_float("clip", None, "Fixed clip (default: the --aggregator's).")
flags.DEFINE_list("presentations", ["1", "2", "4", "8"],
                  "Presentations per canary (Figure 2).")
flags.DEFINE_integer("num_rounds", 64, "Rounds per run.")
flags.DEFINE_integer("clients_per_round", 25, "Clients per round.")
flags.DEFINE_integer("examples_per_client", 32, "Synthetic examples per client.")
flags.DEFINE_integer("num_inserted", 50, "Inserted canaries (coin assignment: "
                     "expected).")
flags.DEFINE_integer("num_held_out", 50, "Held-out canaries.")
flags.DEFINE_integer("seed", 0, "Seed of every run.")
flags.DEFINE_bool("allow_large_canary_fraction", True,
                  "Accept runs whose canaries are above 10% of the "
                  "participants (the defaults' eight presentations are 20%; "
                  "--noallow_large_canary_fraction refuses them).")

flags.DEFINE_bool("smoke", False,
                  "Seconds per run, not the sweep: the sizes of `SMOKE` "
                  "(2 presentations; noise " + "; ".join(
                      f"{', '.join(s.smoke_noise_multipliers)} for {name}"
                      for name, s in SWEPT.items()) + ") for "
                  "the flags not given, and --output_dir a new temporary directory unless "
                  "given. Checks that the command runs.")

FLAGS = flags.FLAGS
# --smoke: the smallest sweep that trains, writes sweep.csv and plots it;
# two presentations (the composed analytical column differs from one's) and,
# with the Gaussian aggregator, noise 0 too (infinite epsilons in the CSV and
# the figure; the tree refuses noise 0).
SMOKE = dict(num_rounds=2, clients_per_round=4, examples_per_client=8,
             num_inserted=4, num_held_out=4, presentations=["2"])
# The noise multipliers and clip of each mechanism: its
# `protocol.SweepDefaults` (`registry.get(name).sweep`).

COLUMNS = ("noise_multiplier", "presentations", "analytical_epsilon",
           "analytical_epsilon_presentations", "epsilon_all", "epsilon_lo_all",
           "epsilon_final", "epsilon_final_fitted", "epsilon_lo_final",
           "epsilon_lo_final_paper", "one_run_bound_final", "one_run_bound_all",
           "accuracy", "delta", "num_inserted", "run_dir")
TREE_COLUMNS = (
    "noise_multiplier", "presentations", "analytical_epsilon",
    "analytical_epsilon_rdp", "epsilon_final", "epsilon_final_low",
    "epsilon_final_high", "epsilon_all_scheduled", "epsilon_all_scheduled_low",
    "epsilon_all_scheduled_high", "epsilon_all_max", "epsilon_all_max_low",
    "epsilon_all_max_high", "rounds_epsilon_worst_case",
    "rounds_epsilon_canaries", "strongest_bound",
    "strongest_bound_name", "accuracy", "delta", "num_inserted", "run_dir")


def run_path(output_dir: str, noise_multiplier: float,
             presentations: int) -> str:
  """The directory of one run of the sweep."""
  return os.path.join(output_dir, "runs",
                      f"noise{noise_multiplier:g}_presentations{presentations}")


def config_of(output_dir: str, noise_multiplier: float, presentations: int,
              **settings) -> experiment_config.ExperimentConfig:
  """One run's config (resumed if its directory holds a started run)."""
  path = run_path(output_dir, noise_multiplier, presentations)
  return experiment_config.ExperimentConfig(
      task="emnist", output_dir=path, noise_multiplier=noise_multiplier,
      presentations=presentations, client_learning_rate=0.1,
      eval_every=settings["num_rounds"], checkpoint_every=16,
      resume=os.path.exists(os.path.join(path, run_dir_lib.CONFIG)),
      **settings)


def finished(config: experiment_config.ExperimentConfig) -> bool:
  return os.path.exists(os.path.join(config.output_dir,
                                     run_dir_lib.REPORT_JSON))


def run_one(config: experiment_config.ExperimentConfig
            ) -> report_lib.RunReport:
  """One run of the sweep (reread if it finished)."""
  if finished(config):
    return report_lib.build_report(config.output_dir)
  # TensorFlow loads here, once every run's settings were checked (the
  # script does not use app.run, after which TensorFlow 2.14 breaks Keras's
  # Sequential: experiment_cli.run says why).
  from tff_canary.harness.runner import experiment  # pylint: disable=g-import-not-at-top
  with warnings.catch_warnings():
    warnings.simplefilter("ignore", experiment.CanaryFractionWarning)
    return experiment.run_experiment(config, progress=sys.stderr.isatty())


def tree_row_of(report) -> dict:
  """A DP-FTRL run's row (`TREE_COLUMNS`; its section a
  `tree_report.TreeSection`)."""
  e, claim, bounds = report.estimates, report.audit.claim, report.audit.bounds
  targets = report.targets
  row = dict(noise_multiplier=report.config["noise_multiplier"],
             presentations=report.config["presentations"],
             analytical_epsilon=claim.epsilon,
             # None (an empty cell) for a matrix mechanism: no RDP account.
             analytical_epsilon_rdp=claim.rdp_epsilon,
             rounds_epsilon_worst_case=targets.worst_case_epsilon,
             rounds_epsilon_canaries=targets.schedules_epsilon,
             strongest_bound=bounds.largest_bound,
             strongest_bound_name=bounds.strongest, accuracy=report.accuracy,
             delta=report.delta, num_inserted=report.num_inserted,
             run_dir=report.run_dir)
  for key, result in (("epsilon_final", e.final),
                      ("epsilon_all_scheduled", e.scheduled),
                      ("epsilon_all_max", e.max)):
    row.update({key: result.epsilon, f"{key}_low": result.interval.low,
                f"{key}_high": result.interval.high})
  return row


def row_of(report: report_lib.RunReport) -> dict:
  if registry.of_config(report.config).round_scores:
    return tree_row_of(report)
  e = report.estimates
  analytical = report.analytical
  eps = lambda r: None if r is None else r.epsilon  # pylint: disable=unnecessary-lambda-assignment
  presentations = report.config["presentations"]
  many = analytical.get(f"{report.max_participation} participations",
                        analytical["one participation"])
  return dict(
      noise_multiplier=report.config["noise_multiplier"],
      presentations=presentations,
      analytical_epsilon=analytical["one participation"],
      analytical_epsilon_presentations=many,
      epsilon_all=eps(e.all_iterates), epsilon_lo_all=eps(e.lo_all),
      epsilon_final=e.final_mean_only.epsilon,
      epsilon_final_fitted=e.final_fitted.epsilon,
      epsilon_lo_final=e.lo_final.epsilon,
      epsilon_lo_final_paper=e.lo_final_paper.epsilon,
      one_run_bound_final=eps(e.one_run_final),
      one_run_bound_all=eps(e.one_run_all), accuracy=report.accuracy,
      delta=report.delta, num_inserted=e.num_inserted, run_dir=report.run_dir)


def write_csv(path: str, rows: list[dict], columns=COLUMNS) -> None:
  buffer = io.StringIO()
  writer = csv.DictWriter(buffer, fieldnames=columns, lineterminator="\n")
  writer.writeheader()
  for row in rows:
    writer.writerow({k: "" if row[k] is None else row[k] for k in columns})
  atomic_files.write_text(path, buffer.getvalue())


def plot(path: str, rows: list[dict]) -> None:
  """Writes `figure(rows)` to `path` (PNG, atomically)."""
  from matplotlib import pyplot as plt  # pylint: disable=g-import-not-at-top
  fig = figure(rows)
  with atomic_files.replacing(path, suffix=".png") as temp:
    fig.savefig(temp, dpi=110)
  plt.close(fig)


def figure(rows: list[dict]):
  """Table 3's and Figure 2's views side by side (a matplotlib Figure)."""
  import matplotlib  # pylint: disable=g-import-not-at-top
  matplotlib.use("Agg")
  from matplotlib import pyplot as plt  # pylint: disable=g-import-not-at-top
  import numpy as np  # pylint: disable=g-import-not-at-top

  fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4.2))
  noises = sorted({r["noise_multiplier"] for r in rows})
  first = min(r["presentations"] for r in rows)
  tree = "epsilon_all_scheduled" in rows[0]
  # The analytical epsilon of the row's own presentations, so that the bars
  # compare like with like when the smallest count is not 1.
  kinds = [("analytical_epsilon_presentations", "analytical", "k"),
           ("epsilon_all", "ε-all", "C3"), ("epsilon_lo_all", "ε_lo-all", "C1"),
           ("epsilon_final", "ε-final", "C0"),
           ("epsilon_lo_final", "ε_lo-final", "C2")]
  if tree:
    kinds = [("analytical_epsilon", "analytical (exact)", "k"),
             ("rounds_epsilon_worst_case", "rounds, worst case", "0.4"),
             ("rounds_epsilon_canaries", "rounds, run's canaries", "0.7"),
             ("epsilon_all_scheduled", "ε-all (T)", "C3"),
             ("epsilon_all_max", "ε-all (M)", "C1"),
             ("epsilon_final", "ε-final", "C0"),
             ("strongest_bound", "lower bound", "C2")]
  right_key, right_label = (("epsilon_all_scheduled", "ε-all (scheduled T)")
                            if tree else ("epsilon_final",
                                          "ε-final (mean-only)"))
  width = 0.8 / len(kinds)
  labelled = set()
  infinite = []  # x of the bars whose epsilon is infinite (noise 0)
  for i, noise in enumerate(noises):
    row = next((r for r in rows if r["noise_multiplier"] == noise
                and r["presentations"] == first), None)
    if row is None:
      continue
    for j, (key, label, color) in enumerate(kinds):
      value = row[key]
      x = i + (j - len(kinds) / 2 + 0.5) * width
      if value is not None and np.isposinf(value):
        infinite.append(x)
      if value is None or not np.isfinite(value):
        continue
      low, high = row.get(f"{key}_low"), row.get(f"{key}_high")
      errors = (None if low is None else
                [[max(0.0, value - max(low, 1e-3))], [high - value]])
      left.bar(x, max(value, 1e-3),
               width, color=color, yerr=errors, capsize=2,
               label=None if label in labelled else label)
      labelled.add(label)
  left.set_yscale("log")
  for x in infinite:  # at the top of the axes, whatever the y range
    left.annotate("∞", (x, 1), xycoords=("data", "axes fraction"),
                  xytext=(0, -3), textcoords="offset points", ha="center",
                  va="top", fontsize=14, fontweight="bold")
  left.set_xticks(range(len(noises)), [f"{n:g}" for n in noises])
  left.set_xlabel("noise multiplier")
  left.set_ylabel("epsilon (0 drawn at 1e-3, ∞ as a mark)")
  left.set_title(("DP-FTRL, " if tree else "Table 3's view (")
                 + f"{first} presentation{'' if first == 1 else 's'}"
                 + (", 95% CIs" if tree else ")"), fontsize=10)
  if tree:  # six bars: the legend below the axes, not over them
    left.legend(fontsize=8, ncol=3, loc="upper center",
                bbox_to_anchor=(0.5, -0.18))
  else:
    left.legend(fontsize=8)
  for noise in noises:
    points = sorted((r["presentations"], r[right_key]) for r in rows
                    if r["noise_multiplier"] == noise)
    if points:
      line, = right.plot(*zip(*points), "o-", label=f"noise {noise:g}")
    if points and tree:
      right.plot(*zip(*sorted(
          (r["presentations"], r["analytical_epsilon"]) for r in rows
          if r["noise_multiplier"] == noise)), "--", color=line.get_color(),
                 label=f"analytical, noise {noise:g}")
  right.set_xscale("log", base=2)
  right.set_yscale("log")
  right.set_xlabel("presentations per canary")
  right.set_ylabel(right_label)
  right.set_title("epochs (one tree each)" if tree else "Figure 2's view",
                  fontsize=10)
  right.legend(fontsize=8)
  fig.tight_layout()
  return fig


def _sweep():
  """The swept mechanism's defaults (`protocol.SweepDefaults`)."""
  return registry.get(FLAGS.aggregator).sweep


def apply_smoke() -> None:
  """--smoke's sizes and temporary output, for the flags not given."""
  smoke = dict(SMOKE, noise_multipliers=list(
      _sweep().smoke_noise_multipliers))
  for name, value in smoke.items():
    if not FLAGS[name].present:
      setattr(FLAGS, name, value)
  if not FLAGS["output_dir"].present:
    FLAGS.output_dir = tempfile.mkdtemp(prefix="sweep-smoke-")


def main(argv):
  if len(argv) > 1:
    print(f"error: unexpected arguments {argv[1:]}; flags are --name=value "
          "(--help lists them).", file=sys.stderr)
    return 2
  if FLAGS.smoke:
    apply_smoke()
  try:
    noises = [float(v) for v in (FLAGS.noise_multipliers
                                 or _sweep().noise_multipliers)]
    presentations = [int(v) for v in FLAGS.presentations]
  except ValueError as e:
    print(f"error: --noise_multipliers and --presentations must be numbers: "
          f"{e}", file=sys.stderr)
    return 2
  settings = dict(num_rounds=FLAGS.num_rounds,
                  clients_per_round=FLAGS.clients_per_round,
                  examples_per_client=FLAGS.examples_per_client,
                  num_inserted=FLAGS.num_inserted,
                  num_held_out=FLAGS.num_held_out, seed=FLAGS.seed,
                  allow_large_canary_fraction=(
                      FLAGS.allow_large_canary_fraction),
                  aggregator=FLAGS.aggregator, clip=FLAGS.clip)
  if FLAGS.clip is None:
    settings["clip"] = _sweep().clip
  try:  # every run's settings, before any of them trains
    configs = [config_of(FLAGS.output_dir, noise, count, **settings)
               for noise in noises for count in presentations]
    for config in configs:
      if not finished(config):
        experiment_config.check_before_tensorflow(config)
  except (ValueError, TypeError, OSError) as e:
    print(f"error: {e}", file=sys.stderr)
    return 2
  experiment_cli.quiet_logs()
  rows = []
  try:
    for config in configs:
      print(f"sweep: noise {config.noise_multiplier:g}, "
            f"{config.presentations} presentation(s)", flush=True)
      rows.append(row_of(run_one(config)))
  except (ValueError, TypeError, FileNotFoundError, FileExistsError,
          run_dir_lib.RunDirError) as e:
    print(f"error: {e}", file=sys.stderr)
    return 2
  csv_path = os.path.join(FLAGS.output_dir, "sweep.csv")
  png_path = os.path.join(FLAGS.output_dir, "sweep.png")
  write_csv(csv_path, rows, TREE_COLUMNS
            if registry.get(FLAGS.aggregator).round_scores else COLUMNS)
  plot(png_path, rows)
  with open(csv_path) as f:
    print(f.read())
  print(f"wrote {csv_path} and {png_path}")
  return 0


if __name__ == "__main__":
  # As experiment_cli.run: absl's parser and help flags, not app.run.
  app.define_help_flags()
  logging.use_absl_handler()
  sys.exit(main(app.parse_flags_with_usage(sys.argv)))
