"""Refusals before training: what cannot work is said before TensorFlow loads.

`check_requirements(config)` (run by `ExperimentConfig` itself) names, in one
message, every setting that canary clients or the DDP aggregator need and the
config lacks.

`check(config)` raises ValueError, naming the flags and values and what to
change, for a command that would train for minutes and then fail, or train
something meaningless, and it writes nothing:

  * `resume` with a run directory that holds no run (no config.json): a
    resume of nothing would silently start a new run;
  * more canaries (inserted + held out) than the model has dimensions: at
    most d canary directions can be told apart, and the estimators assume
    each canary is nearly orthogonal to the others (docs/method/canaries.md);
  * the distributed-DP aggregator with settings whose integer L1 norm bound
    exceeds the int32 range TFF's distributed queries check it in: every
    round would fail (the bound grows with the scale 2^bits and sqrt(d)).

The fraction of participants that are canaries is checked once the canary
schedule is known (`canary_fraction`, called by the experiment before it
writes anything): beyond `MAX_CANARY_FRACTION` the canaries change training
far more than in the paper, so it needs `allow_large_canary_fraction`.
"""

from __future__ import annotations

import os
import warnings

from tff_canary.stats import call_site
from tff_canary.harness import model_sizes
from tff_canary.stats.accounting import ddp_parameters

# TFF's distributed queries check each client's integer L1 norm as int32.
INT32_MAX = 2**31 - 1
# The paper's canaries are about 1% of the participants. Beyond this fraction
# a warning says the canaries are many; beyond the maximum the experiment is
# refused without `allow_large_canary_fraction`.
WARN_CANARY_FRACTION = 0.02
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
  dim = model_sizes.task_dim(config.task)
  canaries = config.num_inserted + config.num_held_out
  if canaries > dim:
    raise ValueError(
        f"--num_inserted={config.num_inserted} + --num_held_out="
        f"{config.num_held_out} = {canaries:,} canaries, more than the "
        f"{config.task} model's d = {dim:,} dimensions: canaries are random "
        "directions that must be nearly orthogonal to each other. Use at "
        f"most {dim:,} in all (the paper uses 1,000 or fewer).")
  if config.aggregator == "ddp":
    _check_ddp_int32(config, dim)


def check_requirements(config) -> None:
  """Canary clients and the DDP aggregator require other settings: every
  one missing is named in one message (flag, Python argument, why)."""
  clients = config.insertion == "clients" or config.aggregator == "ddp"
  if not clients:
    return
  missing = []
  if config.aggregator == "ddp" and config.insertion != "clients":
    missing.append(("--insertion=clients", "insertion='clients'",
                    "server-side canaries cannot enter TFF's DDP chain"))
  if config.seeded_noise or config.noise_seed is not None:
    missing.append(("--noseeded_noise" + (" and no --noise_seed"
                                          if config.noise_seed is not None
                                          else ""),
                    "seeded_noise=False, noise_seed=None",
                    "TFF's own DP aggregators cannot seed their noise"))
  if config.record_aggregates and (config.server_optimizer != "sgd"
                                 or config.server_momentum != 0.0):
    missing.append(("--server_optimizer=sgd --server_momentum=0",
                    "server_optimizer='sgd', server_momentum=0",
                    "each round's aggregate is read from the model "
                    "weights, which needs server SGD without momentum"))
  if config.aggregator == "ddp" and config.clip is None:
    missing.append(("--clip=C (e.g. --clip=0.1)", "clip=C",
                    "the DDP accounting models a fixed clip"))
  if config.aggregator == "ddp" and config.zeroing:
    missing.append(("--nozeroing", "zeroing=False",
                    "TFF's DDP zeroing needs secure aggregation"))
  if not missing:
    return
  choice = ("aggregator='ddp' (--aggregator=ddp)" if config.aggregator == "ddp"
            else "insertion='clients' (--insertion=clients)")
  raise ValueError(
      f"{choice} needs {len(missing)} more setting"
      f"{'s' if len(missing) > 1 else ''}; add "
      + " ".join(flag for flag, _, _ in missing) + " ("
      + "; ".join(f"{arg}: {why}" for _, arg, why in missing) + ").")


def _check_ddp_int32(config, dim: int) -> None:
  params = ddp_parameters.ddp_parameters(
      config.noise_multiplier, config.clients_per_round, config.ddp_bits,
      config.clip, dim, beta=config.ddp_beta, mechanism=config.ddp_mechanism,
      rotation=config.ddp_rotation)
  if params.l1_sensitivity <= INT32_MAX:
    return
  fits = [b for b in range(1, config.ddp_bits)
          if _l1_fits(config, dim, b)]
  advice = (f"use --ddp_bits={fits[-1]} or fewer" if fits
            else "no bit width fits this model")
  raise ValueError(
      f"aggregator='ddp' with --ddp_bits={config.ddp_bits}, --clip="
      f"{config.clip} and d = {dim:,}: each client's integer L1 norm bound "
      f"would be {params.l1_sensitivity:,}, above the int32 limit "
      f"{INT32_MAX:,} that TFF's distributed query checks it in, so every "
      f"round would fail; {advice} (the bound scales with 2^bits and "
      "sqrt(d)).")


def _l1_fits(config, dim: int, bits: int) -> bool:
  try:
    params = ddp_parameters.ddp_parameters(
        config.noise_multiplier, config.clients_per_round, bits, config.clip,
        dim, beta=config.ddp_beta, mechanism=config.ddp_mechanism,
        rotation=config.ddp_rotation)
  except ValueError:  # too few bits for the cohort
    return False
  return params.l1_sensitivity <= INT32_MAX


def canary_fraction(config, canary_participations: int,
                    num_rounds: int) -> float:
  """The canaries' share of participants; refused beyond the maximum
  (module docstring), a warning beyond `WARN_CANARY_FRACTION`."""
  clients = config.clients_per_round * num_rounds
  fraction = canary_participations / (clients + canary_participations)
  what = (f"canaries are {fraction:.1%} of the run's participants "
          f"({canary_participations:,} canary participations beside "
          f"{config.clients_per_round} clients x {num_rounds} rounds); the "
          "paper keeps them near 1%")
  if fraction > MAX_CANARY_FRACTION and not config.allow_large_canary_fraction:
    raise ValueError(
        f"{what}, and above {MAX_CANARY_FRACTION:.0%} they change training "
        "itself. Use fewer --num_inserted, or more clients or rounds, or "
        "pass --allow_large_canary_fraction to run it anyway.")
  if fraction > WARN_CANARY_FRACTION:
    warnings.warn(f"{what}. Use fewer inserted canaries or more clients or "
                  "rounds.", CanaryFractionWarning,
                  stacklevel=call_site.user_stacklevel())
  return fraction

