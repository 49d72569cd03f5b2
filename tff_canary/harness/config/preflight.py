"""Refusals before training: what cannot work is said before TensorFlow loads.

`check(config)` raises ValueError (FileExistsError for a run already in
--output_dir), naming the flags and values and what to change, for a
command that would train for minutes and then fail, or train something
meaningless, and writes nothing (docs/guide/experiments.md): `resume` of a
directory that holds no run, more canaries than the model's d dimensions
(at most d canary directions can be told apart, docs/method/canaries.md),
and settings the mechanism cannot run for d (`protocol.Mechanism.check_dim`).
`check_requirements` (run by `ExperimentConfig`) names every setting the
run's mechanism and insertion mode need in one message
(`protocol.Mechanism.requirements`); `record_aggregates` resolves whether
each round's aggregate is recorded.

The canaries' share of the participants is checked once their schedule is
known (`canary_fraction`): refused beyond `MAX_CANARY_FRACTION` unless
`allow_large_canary_fraction`, a `CanaryFractionWarning` beyond
`WARN_CANARY_FRACTION`. It is the expected share, a property of the flags:
with coin assignment the realized number of inserted canaries varies
around it with the seed. Once the coins are drawn, `audit_reach` warns
(`BeyondReachWarning`) when the report's audit cannot reach the claim with
them, naming the candidates that would.
"""

from __future__ import annotations

import os
import warnings
from typing import Any, Optional

from tff_canary.harness.config import model_sizes
from tff_canary.mechanisms import protocol
from tff_canary.mechanisms import registry
from tff_canary.stats import call_site
from tff_canary.stats import results
from tff_canary.stats.canaries import canary_config

# The paper's canaries are about 1% of the participants; the scripts'
# defaults stay below the warning (docs/guide/experiments.md).
WARN_CANARY_FRACTION = 0.05
MAX_CANARY_FRACTION = 0.10


class CanaryFractionWarning(UserWarning):
  """The canaries are more of the participants than in the paper."""


class BeyondReachWarning(UserWarning):
  """The report's audit cannot reach the claim with the run's candidates."""


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
  dim = model_sizes.DIMS[config.task]  # config.task is checked
  canaries = config.num_inserted + config.num_held_out
  if canaries > dim:
    raise ValueError(
        f"--num_inserted={config.num_inserted} + --num_held_out="
        f"{config.num_held_out} = {canaries:,} canaries, more than the "
        f"{config.task} model's d = {dim:,} dimensions: canaries are random "
        "directions that must be nearly orthogonal to each other. Use at "
        f"most {dim:,} in all (the paper uses 1,000 or fewer).")
  config.mechanism.check_dim(config.mechanism_settings, dim)


def record_aggregates(config) -> bool:
  """`config.record_aggregates` resolved
  (`canary_config.resolve_record_aggregates`), the refusal worded with the
  experiments' flags."""
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
  mechanism = config.mechanism
  missing = mechanism.requirements(config)
  if config.placement == "worst_case" and not mechanism.round_scores:
    correlated = [name for name in registry.names()
                  if registry.get(name).round_scores]
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


def audit_reach(config, *, num_rounds: int, rounds_per_epoch: int,
                delta: float, inserted) -> Optional[Any]:
  """The reach of the report's audit with the run's coins `inserted`,
  known before training (`protocol.Mechanism.audit_reach`), with a
  `BeyondReachWarning` when no bound can exceed the claim, naming the
  candidates that would reach it; None when the mechanism's audit has no
  such limit."""
  reach = config.mechanism.audit_reach(
      config.mechanism_settings, num_rounds=num_rounds,
      rounds_per_epoch=rounds_per_epoch, delta=delta, inserted=inserted)
  if reach is None or not reach.beyond:
    return reach
  worst = config.placement == "worst_case"
  what = ("--placement=worst_case puts every canary on the accounting's "
          "worst case so that the audit faces the analytical ε = "
          if worst else "the report's audit tests the analytical ε = ")
  if reach.candidates_needed:
    half = -(-reach.candidates_needed // 2)
    more = (f"use about {reach.candidates_needed:,} candidates "
            f"(--num_inserted={half} --num_held_out={half}), or a claim "
            "within reach (a larger --noise_multiplier)")
  else:
    more = ("2^20 candidates would not be enough: only a smaller claim (a "
            "larger --noise_multiplier) can be tested")
  warnings.warn(
      f"{what}{reach.claimed_epsilon:.4g}, but these {reach.candidates:,} "
      f"candidates can refute claims up to ε = {reach.epsilon:.4g} "
      f"({reach.bound} at {results.format_confidence(reach.confidence)}), "
      "whatever the run leaks: its audit will be BEYOND REACH"
      + (" and test nothing" if worst else ", the estimates still run")
      + f"; {more}.", BeyondReachWarning,
      stacklevel=call_site.user_stacklevel())
  return reach
