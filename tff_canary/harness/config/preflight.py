"""Refusals before training: what cannot work is said before TensorFlow loads.

`check_requirements(config)` (run by `ExperimentConfig` itself) names, in one
message, every setting that canary clients, the DDP aggregator or DP-FTRL
(`aggregator="tree"`, in either insertion mode) need and the config lacks,
each once. `record_aggregates(config)` (run there too) says whether the
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
  * the distributed-DP aggregator with Skellam noise and settings whose
    integer L1 norm bound exceeds the int32 range TFF's Skellam query checks
    it in: every round would fail (the bound grows with the scale, capped at
    1e6 x clip, and sqrt(d)); the discrete Gaussian's query checks no L1
    norm.

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
from tff_canary.stats.accounting import ddp_parameters
from tff_canary.stats.canaries import canary_config

# TFF's distributed queries check each client's integer L1 norm as int32.
INT32_MAX = 2**31 - 1
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
  if config.aggregator == "ddp":
    _check_ddp_int32(config, dim)


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


def _seeded_noise_requirement(config) -> list[tuple[str, str, str]]:
  """Canary clients go through TFF's own factory: no seeded noise."""
  if not (config.seeded_noise or config.noise_seed is not None):
    return []
  return [("--noseeded_noise" + (" and no --noise_seed"
                                 if config.noise_seed is not None else ""),
           "seeded_noise=False, noise_seed=None",
           "TFF's own DP aggregators cannot seed their noise")]


def _tree_requirements(config) -> list[tuple[str, str, str]]:
  """What DP-FTRL (aggregator="tree") needs and the config lacks; with
  canary clients also what they need (unseeded noise, a norm that the
  tree's clip reaches)."""
  missing = []
  if config.insertion == "clients":
    missing += _seeded_noise_requirement(config)
    norm = (canary_config.DEFAULT_CANARY_NORM if config.canary_norm is None
            else config.canary_norm)
    if config.clip is not None and norm < config.clip:
      missing.append((f"--canary_norm={config.clip:g} or more (got "
                      f"{norm:g})", f"canary_norm >= clip = {config.clip:g}",
                      "the tree's scores count a canary client as entering "
                      "the sum at the clip, which one below it does not"))
  if config.directions != "orthogonal":
    missing.append(("--directions=orthogonal", "directions='orthogonal'",
                    "the tree's per-round scores exist for orthogonal "
                    "canaries only"))
  if config.clip is None:
    missing.append(("--clip=C (e.g. --clip=0.1)", "clip=C",
                    "the experiments run DP-FTRL at a fixed clip; adaptive "
                    "clipping is CanaryDPFactory.tree_adaptive, in your own "
                    "loop"))
  if config.assignment != "coin":
    missing.append(("--assignment=coin", "assignment='coin'",
                    "the DP-FTRL audit's one-run bounds need candidates "
                    "inserted by fair coins"))
  if config.sampling != "shuffle":
    missing.append(("--sampling=shuffle", "sampling='shuffle'",
                    "DP-FTRL's accounting needs each client at most once "
                    "per tree, one tree per shuffled epoch"))
  if config.allow_participation_mismatch:
    missing.append(("--noallow_participation_mismatch",
                    "allow_participation_mismatch=False", "canaries must take "
                    "part once per tree, as the clients do"))
  if config.zeroing:
    missing.append(("--nozeroing", "zeroing=False",
                    "zeroing is not validated with the tree's scores"))
  return missing


def check_requirements(config) -> None:
  """Canary clients, the DDP aggregator and DP-FTRL require other settings:
  every one missing is named in one message (flag, Python argument, why)."""
  if config.aggregator == "tree":
    _refuse("aggregator='tree' with insertion='clients' (--aggregator=tree "
            "--insertion=clients)" if config.insertion == "clients"
            else "aggregator='tree' (--aggregator=tree)",
            _tree_requirements(config))
    return
  clients = config.insertion == "clients" or config.aggregator == "ddp"
  if not clients:
    return
  missing = []
  if config.aggregator == "ddp" and config.insertion != "clients":
    missing.append(("--insertion=clients", "insertion='clients'",
                    "server-side canaries cannot enter TFF's DDP chain"))
  missing += _seeded_noise_requirement(config)
  if (record_aggregates(config)
      and (config.server_optimizer != "sgd" or config.server_momentum != 0.0)):
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
  _refuse("aggregator='ddp' (--aggregator=ddp)" if config.aggregator == "ddp"
          else "insertion='clients' (--insertion=clients)", missing)


def _refuse(choice: str, missing: list[tuple[str, str, str]]) -> None:
  """The one message of `check_requirements`, if anything is missing."""
  if not missing:
    return
  raise ValueError(
      f"{choice} needs {len(missing)} more setting"
      f"{'s' if len(missing) > 1 else ''}; add "
      + " ".join(flag for flag, _, _ in missing) + " ("
      + "; ".join(f"{arg}: {why}" for _, arg, why in missing) + ").")


def _check_ddp_int32(config, dim: int) -> None:
  if config.ddp_mechanism != "distributed_skellam":
    return  # DistributedDiscreteGaussianSumQuery checks the L2 norm only
  params = _ddp(config, dim)
  if params.l1_sensitivity <= INT32_MAX:
    return
  fits = [b for b in range(1, config.ddp_bits) if _l1_fits(config, dim, b)]
  advice = [f"use --ddp_bits={fits[-1]} or fewer" if fits
            else "no bit width fits this model"]
  # While TFF's scale is at its cap (1e6), the bound grows with the clip:
  # the largest clip that fits, by bisection, rounded down to 3 digits.
  low, high = 0.0, config.clip
  for _ in range(60):
    middle = (low + high) / 2
    low, high = ((middle, high) if _l1_fits(config, dim, clip=middle)
                 else (low, middle))
  clip = float(f"{low:.3g}")
  if clip > 0 and _l1_fits(config, dim, clip=clip):
    advice.append(f"--clip={clip:g} or less")
  advice.append("--ddp_mechanism=distributed_dgauss (its query checks no "
                "L1 norm)")
  raise ValueError(
      f"aggregator='ddp' with --ddp_bits={config.ddp_bits}, --clip="
      f"{config.clip} and d = {dim:,}: each client's integer L1 norm bound "
      f"would be {params.l1_sensitivity:,}, above the int32 limit "
      f"{INT32_MAX:,} that TFF's Skellam query checks it in (it wraps to a "
      "negative bound, so every client fails the check and every round "
      f"fails); {', or '.join(advice)} (the bound scales with the scale, "
      "2^bits up to its 1e6 x clip cap, and sqrt(d)).")


def _ddp(config, dim: int, bits=None, clip=None):
  return ddp_parameters.ddp_parameters(
      config.noise_multiplier, config.clients_per_round,
      config.ddp_bits if bits is None else bits,
      config.clip if clip is None else clip, dim, beta=config.ddp_beta,
      mechanism=config.ddp_mechanism, rotation=config.ddp_rotation)


def _l1_fits(config, dim: int, bits=None, clip=None) -> bool:
  if clip is not None and clip <= 0:
    return False
  try:
    params = _ddp(config, dim, bits=bits, clip=clip)
  except ValueError:  # too few bits for the cohort
    return False
  return params.l1_sensitivity <= INT32_MAX


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
