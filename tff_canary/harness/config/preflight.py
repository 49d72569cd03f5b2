"""Refusals before training: what cannot work is said before TensorFlow loads.

`check_requirements(config)` (run by `ExperimentConfig` itself) names, in one
message, every setting that the run's mechanism and insertion mode need and
the config lacks, each once (`protocol.Mechanism.requirements`: canary
clients, the DDP aggregator, DP-FTRL). `record_aggregates(config)` (run there too) says whether the
run records each round's noised aggregate: by default (None) gaussian
canaries do, for the pass after training, and orthogonal ones do not, being
scored inside each round; `--record_aggregates` with orthogonal canaries is
refused, since nothing would be recorded.

`check(config)` raises ValueError, naming the flags and values and what to
change, for a command that would train for minutes and then fail, or train
something meaningless, and it writes nothing:

  * `resume` with a run directory that holds no run (no config.json): a
    resume of nothing would silently start a new run (and, as
    FileExistsError, a run there without `resume`);
  * more canaries (inserted + held out) than the model has dimensions: at
    most d canary directions can be told apart, and the estimators assume
    each canary is nearly orthogonal to the others (docs/method/canaries.md);
  * settings the run's mechanism cannot run for the model's d parameters
    (`protocol.Mechanism.check_dim`; e.g. the distributed-DP aggregator with
    Skellam noise and an integer L1 norm bound beyond TFF's int32 check,
    `ddp.DdpMechanism.check_dim`).

The fraction of participants that are canaries is checked once the canary
schedule is known (`canary_fraction` of `expected_canary_participations`):
beyond `MAX_CANARY_FRACTION` the canaries change training far more than in
the paper, so it needs `allow_large_canary_fraction`; beyond
`WARN_CANARY_FRACTION` a `CanaryFractionWarning`. With synthetic data the
schedule is known before TensorFlow loads
(`experiment_config.check_before_tensorflow`); the experiment checks again
once the data are loaded, before it writes anything. The fraction is the
expected one, a property of the flags: with coin assignment the realized
number of inserted canaries varies around it with the seed.
"""

from __future__ import annotations

import os
import warnings

from tff_canary.stats import call_site
from tff_canary.harness.config import model_sizes
from tff_canary.harness.mechanisms import protocol
from tff_canary.harness.mechanisms import registry
from tff_canary.stats.canaries import canary_config

# The paper's canaries are about 1% of the participants. Beyond
# WARN_CANARY_FRACTION a warning says the canaries are many; beyond the
# maximum the experiment is refused without `allow_large_canary_fraction`.
# The scripts' defaults stay below the warning: EMNIST's 40 expected inserted
# canaries beside 50 clients x 80 rounds are 0.99% (its seed's coins insert
# 48: 1.2%), StackOverflow's 20 beside 20 x 40 are 2.4% (its seed's: 23,
# 2.8%, which a 2% threshold flagged on every default run).
WARN_CANARY_FRACTION = 0.05
MAX_CANARY_FRACTION = 0.10


class CanaryFractionWarning(UserWarning):
  """The canaries are more of the participants than in the paper."""


def check(config) -> None:
  """Every refusal that needs no TensorFlow (module docstring)."""
  run_config = os.path.join(config.output_dir, "config.json")
  if config.resume and not os.path.exists(run_config):
    where = ("does not exist" if not os.path.exists(config.output_dir)
             else "holds no run (no config.json)")
    raise ValueError(
        f"--resume needs an existing run, but --output_dir="
        f"{config.output_dir} {where}: drop --resume to start a new run, or "
        "give the directory of the run to finish.")
  if not config.resume and os.path.exists(run_config):
    raise FileExistsError(
        f"{os.path.abspath(run_config)} exists: pass --resume to finish that "
        "run, or choose another --output_dir.")
  dim = model_sizes.task_dim(config.task)
  canaries = config.num_inserted + config.num_held_out
  if canaries > dim:
    raise ValueError(
        f"--num_inserted={config.num_inserted} + --num_held_out="
        f"{config.num_held_out} = {canaries:,} canaries, more than the "
        f"{config.task} model's d = {dim:,} dimensions: canaries are random "
        "directions that must be nearly orthogonal to each other. Use at "
        f"most {dim:,} in all (the paper uses 1,000 or fewer).")
  registry.get(config.aggregator).check_dim(config, dim)


def record_aggregates(config) -> bool:
  """`config.record_aggregates` resolved
  (`canary_config.resolve_record_aggregates`), the refusal worded with the
  experiments' flags (module docstring)."""
  try:
    return canary_config.resolve_record_aggregates(config.record_aggregates,
                                                   config.directions)
  except ValueError:
    raise ValueError(
        "--record_aggregates (record_aggregates=True) with --directions="
        "orthogonal: orthogonal canaries are scored inside each round, so "
        "no aggregate is recorded and there is no pass after training; drop "
        "--record_aggregates, or pass --directions=gaussian (the paper's "
        "canaries, recorded aggregates and one pass after training)."
    ) from None


def check_requirements(config) -> None:
  """What the run's mechanism and insertion mode require of the other
  settings: every one missing is named in one message (flag, Python
  argument, why), by the mechanism (`protocol.Mechanism.requirements`)."""
  mechanism = registry.get(config.aggregator)
  missing = mechanism.requirements(config)
  if config.placement == "worst_case" and not hasattr(mechanism,
                                                      "round_noise"):
    correlated = [name for name in registry.names()
                  if hasattr(registry.get(name), "round_noise")]
    missing.append(protocol.Requirement(
        "--placement=random", "placement='random'",
        "the worst-case placement puts every canary on the rounds of the "
        "accounting's worst case under noise correlated across rounds ("
        + ", ".join(correlated) + "); with independent rounds every "
        "placement faces the same noise"))
  if missing:
    raise ValueError(
        f"{mechanism.subject(config)} needs {len(missing)} more setting"
        f"{'s' if len(missing) > 1 else ''}; add "
        + " ".join(r.flag for r in missing) + " ("
        + "; ".join(f"{r.argument}: {r.why}" for r in missing) + ").")


def expected_canary_participations(config, schedule) -> float:
  """Expected participations of inserted canaries over the run: the
  expected inserted canaries (num_inserted; with "coin" assignment half of
  num_inserted + num_held_out) times one canary's expected participations
  under `schedule` (the run's `schedules.Schedule`)."""
  inserted = (config.num_inserted if config.assignment == "fixed"
              else (config.num_inserted + config.num_held_out) / 2)
  return inserted * schedule.expected_participation()


def canary_fraction(config, canary_participations: float,
                    num_rounds: int, *, warn: bool = True) -> float:
  """The canaries' share of participants, canary participations / (client
  and canary participations); refused beyond the maximum (module
  docstring), a warning beyond `WARN_CANARY_FRACTION` (unless not `warn`).
  The experiments pass `expected_canary_participations`."""
  clients = config.clients_per_round * num_rounds
  fraction = canary_participations / (clients + canary_participations)
  coin = (f", half of the {config.num_inserted + config.num_held_out:,} "
          "candidates inserted by --assignment=coin"
          if config.assignment == "coin" else "")
  what = (f"canaries are {fraction:.1%} of the run's participants "
          f"({canary_participations:,.0f} expected canary participations"
          f"{coin}, beside {config.clients_per_round} clients x {num_rounds} "
          "rounds); the paper keeps them near 1%")
  if fraction > MAX_CANARY_FRACTION and not config.allow_large_canary_fraction:
    raise ValueError(
        f"{what}, and above {MAX_CANARY_FRACTION:.0%} they change training "
        "itself. Use fewer --num_inserted, or more clients or rounds, or "
        "pass --allow_large_canary_fraction to run it anyway.")
  if warn and fraction > WARN_CANARY_FRACTION:
    warnings.warn(f"{what}; above {WARN_CANARY_FRACTION:.0%} they change "
                  "training noticeably. Use fewer inserted canaries or more "
                  "clients or rounds.", CanaryFractionWarning,
                  stacklevel=call_site.user_stacklevel())
  return fraction
