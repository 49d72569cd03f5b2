"""The experiment scripts' absl flags, one per `ExperimentConfig` field.

`define_flags(task, **defaults)` defines `--<field>` for every field of
`tff_canary.harness.config.experiment_config.ExperimentConfig` (same name, so a
flag, a config.json key and a run's report use one name per concept), with
per-script defaults; `config_from_flags()` turns the parsed flags into a
validated config (with `--smoke`, `SMOKE`'s tiny sizes); `help_text(doc)` is the scripts' `--help`: these flags in
`GROUPS`, without TensorFlow's and absl's own (`--helpfull` lists those).
Imports no TensorFlow (`experiment_config` is TF-free), so a bad flag is
answered before TensorFlow loads; `experiment_cli` runs the scripts.
"""

from __future__ import annotations

import dataclasses
import tempfile
import textwrap
from typing import Any

from absl import flags

from tff_canary.harness.config import experiment_config
from tff_canary.mechanisms import registry

FLAGS = flags.FLAGS

# The --help sections, in order; every ExperimentConfig field is in one.
GROUPS = (
    ("Data", ("task", "data", "cache_dir", "vocab_path", "num_clients",
              "examples_per_client")),
    ("Training", ("num_rounds", "epochs", "clients_per_round", "sampling",
                  "client_optimizer", "client_learning_rate",
                  "server_optimizer", "server_learning_rate",
                  "server_momentum", "batch_size", "client_epochs", "seed",
                  "eval_every", "eval_examples")),
    ("DP", ("noise_multiplier", "clip", "target_unclipped_quantile",
            "initial_clip", "zeroing", "seeded_noise", "noise_seed",
            "delta", "aggregator") + registry.setting_keys()),
    ("Canaries", ("insertion", "canary_norm", "num_inserted", "num_held_out",
                  "assignment", "directions", "placement",
                  "presentations", "allow_participation_mismatch",
                  "allow_large_canary_fraction",
                  "canary_seed", "record_aggregates", "memory_budget_gb")),
    ("Output", ("output_dir", "checkpoint_every", "resume")),
)

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
    "sampling": "shuffle (shuffled epochs), cyclic (the same order every "
                "epoch: each client exactly one epoch apart; banded and blt "
                "then run without restarts) or per_round (Poisson "
                "sampling).",
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
                     "clients_per_round rounds with shuffle or cyclic "
                     "sampling; the clients' per-round rate with "
                     "per_round). With "
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
    "allow_large_canary_fraction": "Run even when the canaries are more "
                                   "than 10% of the participants (the "
                                   "paper's are about 1%): they then change "
                                   "training itself.",
    "assignment": "coin (each of num_inserted + num_held_out candidates "
                  "inserted by a fair coin; needed for the one-run bound) or "
                  "fixed.",
    "directions": "orthogonal (rows of one seeded random orthogonal matrix, "
                  "scored inside each round: no recorded aggregates, no "
                  "pass after training) or gaussian (independent uniform "
                  "directions, the paper's).",
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
    "record_aggregates": "With --directions=gaussian, record every round's "
                         "noised aggregate in aggregates.npy for the pass "
                         "after training (needed for the all-iterates "
                         "statistics). Default: on for gaussian canaries, "
                         "off for orthogonal ones, which are scored in the "
                         "round (--record_aggregates with them is refused).",
    "memory_budget_gb": "Memory for the cosine pass after training of "
                        "gaussian canaries (canaries regenerated, and "
                        "aggregates read, at a time).",
    "resume": "Finish an interrupted run in --output_dir.",
    "insertion": "Where canaries enter: server (added to the DP sum at the "
                 "round's clip, this package's aggregator) or clients "
                 "(canary clients of norm --canary_norm through TFF's own "
                 "DP aggregator; needs --noseeded_noise and, with recorded "
                 "aggregates, --server_momentum=0).",
    "canary_norm": "L2 norm of a canary client's update, with "
                   "--insertion=clients (default 10, above the clip, so the "
                   "aggregator under test clips it).",
}
# Each mechanism's settings are fields and flags with their own help, and
# --aggregator's help is every registered mechanism's own line, one a line.
_HELP.update({name: setting.help
              for name, setting in registry.settings().items()})
_HELP["aggregator"] = "\n".join(
    ["The DP aggregator, one of:"]
    + [f"{name}: {text}" for name, text in registry.helps().items()])
# The mechanisms whose noise is correlated across rounds (their canaries'
# evidence is a score per round), from the registry.
_CORRELATED = [name for name in registry.names()
               if registry.get(name).round_scores]
_HELP["placement"] = (
    "random (canaries take part as the clients do: a drawn round of each "
    "epoch) or worst_case (with noise correlated across rounds, "
    f"--aggregator={', '.join(_CORRELATED[:-1])} or {_CORRELATED[-1]}: every "
    "canary in the rounds of the accounting's worst case, so the scheduled "
    "estimate targets the analytical epsilon, tested when the candidates can "
    "reach it (a warning before training names how many would); those "
    "rounds then carry every inserted canary, "
    "docs/method/matrix-mechanisms.md).")


# --smoke: the smallest run that still trains, evaluates, checkpoints and
# reports: 1 round of 8 clients (adaptive clipping's count noise, 0.05 per
# client, must exceed z / 2: 8 clients hold stackoverflow's z = 0.5), 8
# candidates. A flag given on the command line keeps its value.
SMOKE = dict(num_rounds=1, clients_per_round=8, examples_per_client=4,
             num_inserted=4, num_held_out=4, eval_every=1, checkpoint_every=1,
             eval_examples=16, allow_large_canary_fraction=True)
SMOKE_HELP = ("A run of seconds, not an experiment: " + ", ".join(
    f"--{k}={v}" for k, v in SMOKE.items()) + " unless given, and "
              "--output_dir a new temporary directory unless given. Checks "
              "that the command runs.")


def _fields() -> tuple[str, ...]:
  return tuple(f.name for f in
               dataclasses.fields(experiment_config.ExperimentConfig))


def _check_groups() -> None:
  grouped = [name for _, names in GROUPS for name in names]
  missing = sorted(set(_fields()) - set(grouped))
  extra = sorted(set(grouped) - set(_fields()))
  twice = sorted({n for n in grouped if grouped.count(n) > 1})
  if missing or extra or twice or set(_HELP) != set(_fields()):
    raise ValueError(f"experiment_flags.GROUPS and _HELP must hold every "
                     f"ExperimentConfig field once: missing {missing}, "
                     f"unknown {extra}, twice {twice}, without help "
                     f"{sorted(set(_fields()) - set(_HELP))}.")


def define_flags(task: str, **defaults: Any) -> None:
  """Defines one flag per ExperimentConfig field, with these defaults."""
  _check_groups()
  base = experiment_config.ExperimentConfig(task=task, **{
      k: v for k, v in defaults.items() if k in ("num_rounds", "epochs")})
  for field in dataclasses.fields(experiment_config.ExperimentConfig):
    name = field.name
    # A field whose default is None ("derive") keeps None as the flag's
    # default: `base` has it derived for its own settings, not the flags'.
    default = defaults.get(name, None if field.default is None
                           else getattr(base, name))
    help_text = _HELP[name]
    kind = field.type
    if name == "task":
      flags.DEFINE_enum(name, default, list(experiment_config.TASKS),
                        help_text)
    elif kind in ("bool", "Optional[bool]"):
      flags.DEFINE_bool(name, default, help_text)
    elif kind in ("int", "Optional[int]"):
      flags.DEFINE_integer(name, default, help_text)
    elif kind in ("float", "Optional[float]"):
      flags.DEFINE_float(name, default, help_text)
    else:
      flags.DEFINE_string(name, default, help_text)
  flags.DEFINE_bool("smoke", False, SMOKE_HELP)


def config_from_flags() -> experiment_config.ExperimentConfig:
  """The parsed flags as a config.

  `--epochs` given on the command line without `--num_rounds` replaces the
  script's default number of rounds (num_rounds is then derived from the
  epochs), so the paper's `--epochs=15` works as documented.
  """
  values = {name: FLAGS[name].value for name in _fields()}
  if FLAGS.smoke:
    values.update({k: v for k, v in SMOKE.items() if not FLAGS[k].present})
    if not FLAGS["output_dir"].present:
      values["output_dir"] = tempfile.mkdtemp(prefix=f"{values['task']}-"
                                              "smoke-")
  if FLAGS["epochs"].present and not FLAGS["num_rounds"].present:
    values["num_rounds"] = None
  return experiment_config.ExperimentConfig(**values)


def _flag_line(name: str) -> str:
  flag = FLAGS[name]
  shown = f"--[no]{name}" if flag.boolean else f"--{name}"
  text = f"{shown}: {flag.help}"
  default = flag.default
  if isinstance(default, bool):
    text += f" (default: {str(default).lower()})"
  elif isinstance(default, str):
    text += f" (default: {default!r})"
  elif default is not None:
    text += f" (default: {default})"
  # A help of several lines (--aggregator's, one a mechanism) wraps each
  # line under its own start; no break inside "matrix-mechanisms.md".
  first, *rest = text.split("\n")
  return "\n".join(
      [textwrap.fill(first, 80, initial_indent="  ",
                     subsequent_indent="      ", break_on_hyphens=False)]
      + [textwrap.fill(line, 80, initial_indent="      ",
                       subsequent_indent="        ", break_on_hyphens=False)
         for line in rest])


def help_text(doc: str) -> str:
  """The scripts' --help: `doc`, then the flags in `GROUPS`, in order."""
  parts = [doc.strip(), "",
           "Flags (--helpfull also lists TensorFlow's and absl's):"]
  for heading, names in GROUPS:
    parts += ["", f"{heading}:"] + [_flag_line(name) for name in names]
  parts += ["", "Testing:", _flag_line("smoke")]
  return "\n".join(parts) + "\n"
