"""What a DP mechanism tells the harness: the NumPy half of its protocol.

docs/guide/mechanisms.md: a mechanism is a package, registered by one line
in `registry.MECHANISMS`: its `spec` module holds its NumPy half, a
`Mechanism` (this module's interface; no TensorFlow: its settings, its
`requirements`, one `Requirement` per missing setting like dp-accounting's
`supports()` names the unsupported part, what its runs record, its `claim`,
the analytical epsilons as plain data, `AnalyticalClaim`, and its
`report_section`), and its `tff` module its TFF half, a
`tff_canary.mechanisms.protocol_tff.TffMechanism` (`registry.half`).

To add one, subclass `Mechanism` (a frozen dataclass, like
`dp_accounting.dp_event`'s events), or a family's base
(`cosine.spec.CosineMechanism`, `correlated.spec.CorrelatedMechanism`), and
override what differs from DP-FedAvg's defaults below (a per-round
`DpEvent` ledger, any insertion, no settings of its own). The harness asks
the mechanism, never its name. Its methods receive the run's
`MechanismSettings` (`Mechanism.settings_of`, built once from the checked
config), not the experiment's config; only the checks that complete the
config (`requirements`, `subject`, `resolve`) read the config itself."""

from __future__ import annotations

import dataclasses
from typing import Any, Callable, ClassVar, Mapping, Optional

import numpy as np

from tff_canary.mechanisms import analytical_epsilons

# The analytical rows' detail of a run with a DpEvent ledger.
LEDGER_DETAIL = "dp-accounting, from the run's DpEvent ledger"


@dataclasses.dataclass(frozen=True)
class Requirement:
  """A setting a mechanism needs and the config lacks.

  Attributes:
    flag: What to add on the experiments' command line ("--clip=C").
    argument: The same as Python arguments ("clip=C").
    why: Why the mechanism needs it.
  """

  flag: str
  argument: str
  why: str


@dataclasses.dataclass(frozen=True)
class Setting:
  """A setting a mechanism owns: a config.json key, an `ExperimentConfig`
  field and an experiments' flag of the same name (None: `default`).

  Attributes:
    default: Its value when not given.
    kind: int, float, str or bool (the flag's type).
    help: The flag's help.
    check: (value, name) -> the checked value; raises ValueError or
      TypeError naming `name` and the value (`tff_canary.stats.validation`).
  """

  default: Any
  kind: type
  help: str
  check: Callable[[Any, str], Any]


@dataclasses.dataclass(frozen=True)
class SweepDefaults:
  """What experiments/sweep.py runs for a mechanism by default.

  Attributes:
    noise_multipliers: The sweep's noise multipliers (flag strings).
    smoke_noise_multipliers: Those of `--smoke`.
    clip: The fixed clip, or None for adaptive clipping.
  """

  noise_multipliers: tuple[str, ...]
  smoke_noise_multipliers: tuple[str, ...]
  clip: Optional[float] = None


# What every mechanism's methods may read of a run beside its own settings
# (`MechanismSettings`), by config.json key.
COMMON_SETTINGS = ("insertion", "noise_multiplier", "clip", "initial_clip",
                   "target_unclipped_quantile", "zeroing",
                   "clients_per_round", "sampling", "num_rounds", "epochs")


@dataclasses.dataclass(frozen=True)
class MechanismSettings:
  """What a mechanism is given of a run: its frozen settings, built once
  from the checked config (`Mechanism.settings_of`; the experiments'
  `ExperimentConfig.mechanism_settings`), like jax_privacy's execution-plan
  configs, rather than the whole experiment config.

  Every attribute but `aggregator` and `own` is the run's setting of its
  name (`COMMON_SETTINGS`), None when not given (num_rounds with epochs,
  clip with adaptive clipping) or when an older config.json lacks it.

  Attributes:
    aggregator: The mechanism's name (`registry.MECHANISMS`).
    insertion: Where canaries enter, "server" or "clients".
    noise_multiplier: z.
    clip: The fixed clip, or None (adaptive clipping).
    initial_clip: Adaptive clipping's initial clip.
    target_unclipped_quantile: Adaptive clipping's target quantile.
    zeroing: TFF's zeroing is on.
    clients_per_round: The cohort, the DP mean's denominator.
    sampling: The client sampling ("shuffle", "cyclic", ...).
    num_rounds: The run's rounds (None: from epochs).
    epochs: The run's epochs, or None.
    own: The mechanism's own settings (its `Mechanism.settings`' keys ->
      their resolved values), read as attributes too (`settings.bands`).
  """

  aggregator: str
  insertion: str = "server"
  noise_multiplier: Optional[float] = None
  clip: Optional[float] = None
  initial_clip: Optional[float] = None
  target_unclipped_quantile: Optional[float] = None
  zeroing: Optional[bool] = None
  clients_per_round: Optional[int] = None
  sampling: Optional[str] = None
  num_rounds: Optional[int] = None
  epochs: Optional[int] = None
  own: dict[str, Any] = dataclasses.field(default_factory=dict, hash=False)

  def __getattr__(self, name: str) -> Any:
    own = self.__dict__.get("own", {})
    if name in own:
      return own[name]
    raise AttributeError(
        f"the settings of aggregator={self.__dict__.get('aggregator')!r} "
        f"have no {name!r}.")

  def as_dict(self) -> dict[str, Any]:
    """Its values by config.json key (the mechanism's own beside the
    others)."""
    values = {f.name: getattr(self, f.name)
              for f in dataclasses.fields(self) if f.name != "own"}
    values.update(self.own)
    return values


@dataclasses.dataclass(frozen=True)
class AnalyticalClaim:
  """A run's analytical epsilons, as the report shows and audits them.

  Attributes:
    epsilons: Name ("one participation", "<r> participations", "Poisson
      sampling (PLD)", ...) -> epsilon at the report's delta.
    max_participation: The largest number of rounds an inserted canary
      took part in.
    label: How the report names the claim ("analytical ε", "analytical DDP
      bound").
    gaussian: Whether the claim is a Gaussian mechanism's (the one-run
      bounds of a Gaussian claim apply; `audit.audit_table`).
    detail: The mechanism's own account of each epsilon, or None (a
      ledger's): `row(name)` and `as_dict()` (report.json's `ddp_bound`).
  """

  epsilons: dict[str, float]
  max_participation: int
  label: str = "analytical ε"
  gaussian: bool = True
  detail: Any = None

  def row(self, name: str) -> tuple[str, str, float, str]:
    """The report's row of analytical epsilon `name`."""
    if self.detail is None:
      return (f"analytical: {name}", "analytical", self.epsilons[name],
              LEDGER_DETAIL)
    return (self.detail.row_name(name), "analytical", self.epsilons[name],
            self.detail.detail(name))


@dataclasses.dataclass(frozen=True)
class Mechanism:
  """The NumPy half of a DP mechanism (module docstring).

  Class attributes (set by each mechanism):
    name: Its key in `registry.MECHANISMS` (`--aggregator`).
    help: Its line of the experiments' `--aggregator` help: what it is and
      what it needs (`registry.helps`; each mechanism declares its own).
    settings: The config.json keys it owns -> their `Setting` (each is an
      `ExperimentConfig` field and a flag); another mechanism's run
      refuses them.
    records_ledger: Each round's `DpEvent` is recorded (ledger.json).
    round_scores: Its canaries' evidence is a score per round in units of
      its (correlated) node noise (tree_scores.npy), not a cosine table.
    client_aggregator: How the report names TFF's own aggregator that
      canary clients go through ("" for DP-FedAvg's).
    client_accounting: What the analytical epsilon of canary clients'
      runs counts.
    sweep: experiments/sweep.py's defaults, or None (not swept).
  """

  name: ClassVar[str] = ""
  help: ClassVar[str] = ""
  settings: ClassVar[dict[str, Setting]] = {}
  records_ledger: ClassVar[bool] = True
  round_scores: ClassVar[bool] = False
  client_aggregator: ClassVar[str] = ""
  client_accounting: ClassVar[str] = (
      "the ledger's DpEvents (the analytical ε) are those of "
      "clients_per_round real clients")
  sweep: ClassVar[Optional[SweepDefaults]] = None

  def report_section(self, records, *, delta: float, confidence: float,
                     claimed_epsilon: Optional[float]):
    """Its runs' report section (`tff_canary.harness.reporting.report` shows
    it), from the run's loaded `records` (`records.RunRecords`) at `delta`
    and `confidence`, auditing `claimed_epsilon` (None: the analytical ε the
    canaries face): a cosine table's (`cosine.spec.CosineMechanism`) or the
    correlated noises' per-round scores' (`tree.spec.TreeMechanism`)."""
    raise NotImplementedError(
        f"aggregator={self.name!r} declares no report section "
        "(Mechanism.report_section).")

  @property
  def flag(self) -> str:
    return f"aggregator={self.name!r} (--aggregator={self.name})"

  def settings_of(self, config) -> MechanismSettings:
    """Its frozen settings (`MechanismSettings`) of `config`: a checked
    `ExperimentConfig` (its own settings resolved), a config.json's values
    (a key an older file lacks: None; insertion "server"), or anything with
    those attributes (a planted run's config); settings are returned as
    they are. The methods below but `subject`, `requirements` and
    `resolve` (which check and complete the config, before its settings
    exist) take them."""
    if isinstance(config, MechanismSettings):
      return config
    get = (config.get if isinstance(config, Mapping)
           else lambda key: getattr(config, key, None))
    return MechanismSettings(
        aggregator=self.name, insertion=get("insertion") or "server",
        **{key: get(key) for key in COMMON_SETTINGS if key != "insertion"},
        own={key: get(key) for key in self.settings})

  def subject(self, config) -> str:
    """What the one refusal message says needs the missing settings."""
    if config.insertion == "clients":
      return "insertion='clients' (--insertion=clients)"
    return self.flag

  def requirements(self, config) -> list[Requirement]:
    """The settings this mechanism needs and `config` (an
    `ExperimentConfig`) lacks, in the order the refusal names them; by
    default those of canary clients (`client_requirements`)."""
    if config.insertion != "clients":
      return []
    return client_requirements(config)

  def resolve(self, config) -> dict[str, Any]:
    """The values of `settings` for `config`, defaults filled; raises
    ValueError for a value this mechanism cannot run with. Called after
    `requirements` are met."""
    return {}

  def check_dim(self, settings: MechanismSettings, dim: int) -> None:
    """Refuses, before TensorFlow loads, `settings` that cannot work for a
    model of `dim` parameters."""

  def claim(self, records, delta: float,
            canary_rate: Optional[float]) -> AnalyticalClaim:
    """The analytical epsilons of a run's `records.RunRecords` (its
    config, events and, for a mechanism that `records_ledger`, ledger) at
    `delta`; `canary_rate`: the canaries' Poisson rate, if
    Poisson-sampled. By default the DpEvent ledger's
    (`analytical_epsilons.analytical`)."""
    values, max_participation = analytical_epsilons.analytical(
        records.config, records.ledger, records.events, delta,
        canary_rate=canary_rate)
    return AnalyticalClaim(values, max_participation)

  def check_rounds(self, settings: MechanismSettings, num_rounds: int,
                   rounds_per_epoch: int) -> None:
    """Refuses, before training, `settings` that cannot work for a run of
    `num_rounds` rounds in epochs of `rounds_per_epoch` (a claim that
    cannot be computed for them); `experiment_config.resolve` calls it."""

  def audit_reach(self, settings: MechanismSettings, *, num_rounds: int,
                  rounds_per_epoch: int, delta: float,
                  inserted: np.ndarray) -> Optional[Any]:
    """What the report's audit can show with the coins `inserted`, known
    before training (`stats.audit.audit_bounds.Reach`: its largest
    epsilon against the claim), or None when the reach is not limited by
    the settings (DP-FedAvg's: epsilon_lo on the exact null reaches any
    claim); raises ValueError for `settings` whose claim cannot be
    computed."""
    return None

  def chain(self, settings: MechanismSettings) -> Optional[str]:
    """A description of the aggregation chain canary clients go through,
    for the report, or None (TFF's `DifferentiallyPrivateFactory`)."""
    return None


def seeded_noise_requirement(config) -> list[Requirement]:
  """Canary clients go through TFF's own factory: no seeded noise."""
  if not (config.seeded_noise or config.noise_seed is not None):
    return []
  return [Requirement("--noseeded_noise" + (
      " and no --noise_seed" if config.noise_seed is not None else ""),
                      "seeded_noise=False, noise_seed=None",
                      "TFF's own DP aggregators cannot seed their noise")]


def aggregate_requirement(config) -> list[Requirement]:
  """Canary clients' recorded aggregates are read from the model weights."""
  if not (config.record_aggregates and (config.server_optimizer != "sgd"
                                        or config.server_momentum != 0.0)):
    return []
  return [Requirement("--server_optimizer=sgd --server_momentum=0",
                      "server_optimizer='sgd', server_momentum=0",
                      "each round's aggregate is read from the model "
                      "weights, which needs server SGD without momentum")]


def client_requirements(config) -> list[Requirement]:
  """What canary clients need (docs/guide/insertion-modes.md)."""
  return seeded_noise_requirement(config) + aggregate_requirement(config)


__all__ = ["AnalyticalClaim", "COMMON_SETTINGS", "LEDGER_DETAIL", "Mechanism",
           "MechanismSettings", "Requirement", "Setting", "SweepDefaults",
           "aggregate_requirement", "client_requirements",
           "seeded_noise_requirement"]
