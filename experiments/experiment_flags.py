"""The experiment scripts' absl flags, one per `ExperimentConfig` field.

`define_flags(task, **defaults)` defines `--<field>` for every field of
`tff_canary.harness.experiment.ExperimentConfig` (same name, so a flag, a config.json
key and a run's report use one name per concept), with per-script defaults;
`config_from_flags()` turns the parsed flags into a validated config. The
scripts in experiments/ are just these two calls and `run_experiment`.
"""

from __future__ import annotations

import dataclasses
import os
import sys
from typing import Any

from absl import app
from absl import flags

from tff_canary.harness import experiment

FLAGS = flags.FLAGS

_HELP = {
    "task": "Task: emnist or stackoverflow.",
    "output_dir": "Run directory (config, metrics, cosines, report, plots).",
    "data": "synthetic (built in, no download) or tff (TFF's files in "
            "--cache_dir).",
    "cache_dir": "Where TFF's dataset files are (default ~/.tff).",
    "vocab_path": "StackOverflow word-count file (default "
                  "<cache_dir>/stackoverflow.word_count).",
    "num_clients": "Synthetic clients (default: clients_per_round x "
                   "num_rounds // presentations, so that every client takes "
                   "part --presentations times, default once).",
    "examples_per_client": "Synthetic examples (sentences) per client.",
    "clients_per_round": "Clients per round (expected, with per_round "
                         "sampling); at most the number of clients (checked "
                         "before training).",
    "num_rounds": "Rounds (or give --epochs).",
    "epochs": "Epochs over the clients (instead of --num_rounds): "
              "num_rounds = epochs x (num_clients // clients_per_round); "
              "canaries then take part once per epoch too.",
    "sampling": "shuffle (shuffled epochs) or per_round (Poisson sampling).",
    "noise_multiplier": "DP noise multiplier z.",
    "clip": "Fixed clip norm; unset for adaptive clipping.",
    "target_unclipped_quantile": "Adaptive clipping's target quantile.",
    "initial_clip": "Adaptive clipping's initial clip norm.",
    "zeroing": "Wrap the aggregator in TFF's adaptive zeroing.",
    "client_optimizer": "sgd or adam.",
    "client_learning_rate": "Client learning rate.",
    "server_optimizer": "sgd (with --server_momentum) or adam.",
    "server_learning_rate": "Server learning rate.",
    "server_momentum": "Server SGD momentum.",
    "batch_size": "Client batch size.",
    "client_epochs": "Local epochs per client.",
    "num_inserted": "Inserted canaries (with --assignment=coin: half of the "
                    "candidates, in expectation).",
    "num_held_out": "Held-out canaries (never inserted; see --assignment).",
    "presentations": "How often each inserted canary takes part. Canaries "
                     "take part as clients do: unset, it is derived from "
                     "the client sampler (once per epoch of num_clients // "
                     "clients_per_round rounds with shuffle sampling; the "
                     "clients' per-round rate with per_round). With "
                     "synthetic data, --num_rounds and no --num_clients it "
                     "sets the clients' epochs too (clients_per_round x "
                     "num_rounds // presentations clients). A value that "
                     "contradicts the client sampler (e.g. with --epochs, a "
                     "value other than --epochs) is refused before "
                     "training unless --allow_participation_mismatch.",
    "allow_participation_mismatch": "Accept a --presentations that "
                                    "contradicts the client sampler: each "
                                    "canary then takes part exactly that "
                                    "often, whatever the clients do, and the "
                                    "report says so prominently.",
    "assignment": "coin (each of num_inserted + num_held_out candidates "
                  "inserted by a fair coin; needed for the one-run bound) or "
                  "fixed.",
    "seed": "Seed of the data, initial weights, client sampling.",
    "canary_seed": "Seed of the canaries (default seed + 1).",
    "noise_seed": "Seed of the simulated DP noise (default derived from "
                  "seed).",
    "seeded_noise": "Draw the DP noise from --noise_seed (reproducible "
                    "simulation); false: TFF's unseeded noise.",
    "delta": "Delta of every epsilon (default num_clients^-1.1).",
    "eval_every": "Evaluate every N rounds and after the last (0: never).",
    "eval_examples": "Test examples per evaluation.",
    "checkpoint_every": "Checkpoint every N rounds.",
    "record_aggregates": "Record every round's noised aggregate (needed for "
                         "the all-iterates statistics).",
    "memory_budget_gb": "Memory for the post-training cosine computation.",
    "resume": "Finish an interrupted run in --output_dir.",
}


def define_flags(task: str, **defaults: Any) -> None:
  """Defines one flag per ExperimentConfig field, with these defaults."""
  base = experiment.ExperimentConfig(task=task, **{
      k: v for k, v in defaults.items() if k in ("num_rounds", "epochs")})
  for field in dataclasses.fields(experiment.ExperimentConfig):
    name = field.name
    default = defaults.get(name, getattr(base, name))
    help_text = _HELP[name]
    kind = field.type
    if name == "task":
      flags.DEFINE_enum(name, default, ["emnist", "stackoverflow"], help_text)
    elif kind in ("bool",):
      flags.DEFINE_bool(name, default, help_text)
    elif kind in ("int", "Optional[int]"):
      flags.DEFINE_integer(name, default, help_text)
    elif kind in ("float", "Optional[float]"):
      flags.DEFINE_float(name, default, help_text)
    else:
      flags.DEFINE_string(name, default, help_text)


def config_from_flags() -> experiment.ExperimentConfig:
  """The parsed flags as a config.

  `--epochs` given on the command line without `--num_rounds` replaces the
  script's default number of rounds (num_rounds is then derived from the
  epochs), so the paper's `--epochs=15` works as documented.
  """
  values = {f.name: FLAGS[f.name].value
            for f in dataclasses.fields(experiment.ExperimentConfig)}
  if FLAGS["epochs"].present and not FLAGS["num_rounds"].present:
    values["num_rounds"] = None
  return experiment.ExperimentConfig(**values)


def main_for(task: str):
  """The `main` of an experiment script: run, print the table, exit 2 on bad input."""

  def main(argv):
    if len(argv) > 1:
      raise app.UsageError(f"unexpected arguments: {argv[1:]}")
    from tff_canary.harness import run_dir  # pylint: disable=g-import-not-at-top
    try:
      config = config_from_flags()
      if config.task != task:
        raise ValueError(f"--task={config.task} in the {task} script.")
      report = experiment.run_experiment(config)
    except (FileNotFoundError, FileExistsError, ValueError, TypeError,
            run_dir.RunDirError) as e:
      print(f"error: {e}", file=sys.stderr)
      return 2
    print()
    print(report.table_text())
    print(f"\nreport: {os.path.join(report.run_dir, run_dir.REPORT_MD)}")
    return 0

  return main
