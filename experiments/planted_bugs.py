"""Each planted DP bug once in a real TFF training run (issue 10).

  .venv/bin/python experiments/planted_bugs.py [--output_json FILE] [--smoke]

One `tff.learning` run per row (`tff_canary.harness.runner.planted_bug_runs`):
a 2-layer MLP (d = 2410) on synthetic Gaussian-class clients, 50 participants
per round, 20 rounds, 1000 coin-flipped candidate canaries each inserted
once, noise multiplier 4, delta 1e-5. The rows are each registered
mechanism's with planted bugs (`PlantedBugs.table`), in registry order:

  none       gaussian client/server  the correct central-DP aggregator
  clip       gaussian client/server  clients clipped at --clip_factor x C
                                     while params and DpEvent say C
  reuse      gaussian client         every tensor's noise a prefix of one
                                     draw (the seeded-noise defect)
  none       ddp client              TFF's distributed-DP chain (Skellam,
                                     --bits), told the real participants
  clip       ddp client              clients clipped at --clip_factor x C,
                                     the query's norm bounds to match, the
                                     noise and the claim for C
  reuse      ddp client              each client's noise share repeated
                                     between the halves of its rotated vector
  shortfall  ddp client              the correct chain told k x the
                                     participants
                                     (--shortfall_sizes)

and prints for each the claimed epsilon, epsilon_lo (final / all iterates),
the largest valid bound, the audit's verdict at 95%, the point estimates
(epsilon-final / epsilon-all), the noise self-test's verdict and whether the
tool (a refutation or a failed self-test) caught it.
"""

from __future__ import annotations

import sys

from absl import app
from absl import flags

from tff_canary.federated.runtime import quiet_start

_FLAGS = flags.FLAGS


def define_flags() -> None:
  """The script's flags (defined only when run as a script)."""
  flags.DEFINE_list("shortfall_sizes", ["2", "4", "10", "20"],
                    "k: the DDP factory is told k x the participants.")
  flags.DEFINE_float("clip_factor", 10.0,
                     "The clip bug clips clients at this x C.")
  flags.DEFINE_integer("num_rounds", 20, "Training rounds per run.")
  flags.DEFINE_integer("clients_per_round", 50,
                       "Participants per round (canary clients included).")
  flags.DEFINE_integer("num_candidates", 1000,
                       "Candidate canaries, each inserted by a fair coin.")
  flags.DEFINE_float("noise_multiplier", 4.0, "Claimed noise multiplier z.")
  flags.DEFINE_integer("bits", 16, "Bit width of the DDP runs.")
  flags.DEFINE_float("delta", 1e-5, "Delta of the claim and the bounds.")
  flags.DEFINE_integer("seed", 0, "Seed of data, canaries and noise.")
  flags.DEFINE_string("output_json", None, "Where to write every run (JSON).")
  flags.DEFINE_bool("smoke", False,
                    "Seconds, not the table: one row (the DDP shortfall) at "
                    "the sizes of `SMOKE` for the flags not given. Checks "
                    "that the command runs (tests/harness/runner/test_planted_bug_runs.py "
                    "runs every bug).")


# --smoke: the smallest sizes (2 rounds of 10 participants, 20 candidates,
# one shortfall size), and only the last row (distributed DP, a bug; the
# central-DP rows share its code up to the aggregator): each TFF run costs
# seconds to build.
SMOKE = dict(num_rounds=2, clients_per_round=10, num_candidates=20,
             shortfall_sizes=["2"])


def configs(*, shortfall_sizes, clip_factor, **common):
  """The runs, in table order (module docstring): each mechanism's rows
  (`PlantedBugs.table`), the clip bug at `clip_factor`, the shortfall at
  each of `shortfall_sizes`; `common` goes to each."""
  from tff_canary.harness.runner import planted_bug_runs as runs  # pylint: disable=g-import-not-at-top
  sizes = {"clip": [clip_factor], "shortfall": shortfall_sizes}
  out = []
  for name in runs.aggregator_names():
    for bug, mode in runs.planted(name).table:
      out += [runs.BugRunConfig(bug=bug, bug_size=float(size), mode=mode,
                                aggregator=name, **common)
              for size in sizes.get(bug, [1.0])]
  return out


def main(argv) -> int:
  if len(argv) > 1:
    raise app.UsageError(f"unexpected arguments: {argv[1:]}")
  quiet_start.quiet_tensorflow()  # before TensorFlow loads, below
  if _FLAGS.smoke:
    for name, value in SMOKE.items():
      if not _FLAGS[name].present:
        setattr(_FLAGS, name, value)
  from tff_canary.harness.runner import planted_bug_runs as runs  # pylint: disable=g-import-not-at-top
  from tff_canary.stats import atomic_files  # pylint: disable=g-import-not-at-top
  planned = configs(
      shortfall_sizes=_FLAGS.shortfall_sizes, clip_factor=_FLAGS.clip_factor,
      num_rounds=_FLAGS.num_rounds,
      clients_per_round=_FLAGS.clients_per_round,
      num_candidates=_FLAGS.num_candidates,
      noise_multiplier=_FLAGS.noise_multiplier, bits=_FLAGS.bits,
      delta=_FLAGS.delta, seed=_FLAGS.seed)
  if _FLAGS.smoke:
    planned = planned[-1:]
  done = []
  for config in planned:
    done.append(runs.run(config))
    print(done[-1], flush=True)
  print()
  print(runs.format_table(done))
  if _FLAGS.output_json:
    atomic_files.write_json(_FLAGS.output_json, [r.as_dict() for r in done])
  return 0


if __name__ == "__main__":
  define_flags()
  sys.exit(app.run(main))
