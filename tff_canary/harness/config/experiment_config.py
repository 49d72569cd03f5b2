"""What defines an experiment run, checked without TensorFlow.

`ExperimentConfig` is everything that defines a run (the experiment scripts
have one flag per field), validated at construction before TensorFlow or
TFF is loaded. `resolve` fills in every derived value (config.json) and
refuses, before any training, a client sampler or a canary participation
that cannot work (docs/method/canaries.md); `check_resumable` refuses to
resume a run directory with other settings.

The insertion mode (`insertion`, "server" or "clients";
docs/guide/insertion-modes.md, which lists what client mode refuses) and
the DP mechanism (`aggregator`, a name of `registry.MECHANISMS`, looked up
once: `ExperimentConfig.mechanism`), which owns its settings (refused with any other mechanism), says what it needs
of the others (`preflight.check_requirements`) and resolves its values
(`protocol.Mechanism.resolve`). `insertion_of(values)` reads the mode of
any config.json. An experiment's config.json reads back as the same
frozen spec (`ExperimentConfig.from_json`; older files: a server-side run
of `registry.DEFAULT`).
"""

from __future__ import annotations

import dataclasses
import functools
import os
import typing
from typing import Any, Literal, Optional

from tff_canary.harness.config import model_sizes
from tff_canary.harness.config import preflight
from tff_canary.mechanisms import registry
from tff_canary.stats import validation
from tff_canary.stats.canaries import canary_config
from tff_canary.stats.canaries import client_sampling
from tff_canary.stats.canaries import schedules

TASKS = ("emnist", "stackoverflow")
SAMPLINGS = client_sampling.SAMPLINGS
OPTIMIZERS = ("sgd", "adam")
# Where the canaries enter (module docstring).
Insertion = Literal["server", "clients"]
INSERTIONS: tuple[str, ...] = typing.get_args(Insertion)
AGGREGATORS: tuple[str, ...] = registry.names()
_NOISE_TAG = 0x401


def _int(minimum: int):
  return functools.partial(validation.as_int, minimum=minimum)


# How each field is checked: (value, name=) -> the checked value. Choices;
# fields that are never None; fields where None means "derive".
_CHOICES = dict(
    task=TASKS, data=("synthetic", "tff"), sampling=SAMPLINGS,
    client_optimizer=OPTIMIZERS, server_optimizer=OPTIMIZERS,
    assignment=canary_config.ASSIGNMENTS,
    directions=canary_config.DIRECTIONS, insertion=INSERTIONS,
    aggregator=AGGREGATORS, placement=schedules.PLACEMENTS)
_CHECKS = dict(
    examples_per_client=_int(1), clients_per_round=_int(1),
    noise_multiplier=validation.as_nonnegative,
    target_unclipped_quantile=validation.as_unit_interval,
    initial_clip=validation.as_positive,
    client_learning_rate=validation.as_positive,
    server_learning_rate=validation.as_positive,
    server_momentum=functools.partial(validation.as_unit_interval,
                                      include_high=False),
    batch_size=_int(1), client_epochs=_int(1), num_inserted=_int(0),
    num_held_out=_int(0), seed=_int(0), eval_every=_int(0),
    checkpoint_every=_int(1), memory_budget_gb=validation.as_positive)
_OPTIONAL = dict(
    num_clients=_int(2), num_rounds=_int(1), epochs=_int(1),
    presentations=_int(1), clip=validation.as_positive,
    canary_seed=_int(0), noise_seed=_int(0), delta=validation.as_open_unit,
    eval_examples=_int(1), canary_norm=validation.as_positive)


# The run's `CanaryConfig` fields (but its schedule) by config.json key.
_CANARY_FIELDS = dict(
    seed="canary_seed", num_inserted="num_inserted",
    num_held_out="num_held_out", assignment="assignment",
    record_aggregates="record_aggregates", directions="directions")

# Keys that may differ between a run and its resumption.
RESUMABLE_KEYS = ("resume", "eval_every", "checkpoint_every",
                  "allow_large_canary_fraction", "memory_budget_gb",
                  "output_dir")


def _with_mechanism_settings(cls):
  """Adds every mechanism's settings (`registry.settings`) to `cls` as
  Optional fields with default None, after its own: a new mechanism's
  settings become fields, config.json keys and flags without an edit
  here."""
  for name, setting in registry.settings().items():
    cls.__annotations__[name] = f"Optional[{setting.kind.__name__}]"
    setattr(cls, name, None)
  return cls


@dataclasses.dataclass(frozen=True)
@_with_mechanism_settings
class ExperimentConfig:
  """Everything that defines a run (config.json holds it, resolved).

  None means "derive": num_clients from the data (synthetic: enough clients
  for `presentations` shuffled epochs over the run), num_rounds from epochs,
  presentations from the client sampler, delta = num_clients^-1.1 (the
  paper's), canary_seed and noise_seed from seed, canary_norm =
  `canary_config.DEFAULT_CANARY_NORM` with `insertion="clients"` (it is
  refused with "server", where canaries enter at the clip), the `ddp_*`
  knobs = `ddp.DEFAULTS` with `aggregator="ddp"` (refused with others),
  record_aggregates = gaussian canaries (`preflight.record_aggregates`).
  Canaries beyond 10% of the participants need `allow_large_canary_fraction`
  (`preflight.canary_fraction`); canaries take part as clients do, unless
  `allow_participation_mismatch` (`resolve`; docs/method/canaries.md).
  """

  task: str = "emnist"
  output_dir: str = "runs/emnist"
  data: str = "synthetic"
  cache_dir: Optional[str] = None
  vocab_path: Optional[str] = None
  num_clients: Optional[int] = None
  examples_per_client: int = 32
  clients_per_round: int = 50
  num_rounds: Optional[int] = 100
  epochs: Optional[int] = None
  sampling: str = "shuffle"
  noise_multiplier: float = 0.5
  clip: Optional[float] = None
  target_unclipped_quantile: float = 0.5
  initial_clip: float = 0.1
  zeroing: bool = False
  client_optimizer: str = "sgd"
  client_learning_rate: float = 0.031
  server_optimizer: str = "sgd"
  server_learning_rate: float = 1.0
  server_momentum: float = 0.9
  batch_size: int = 16
  client_epochs: int = 1
  num_inserted: int = 100
  num_held_out: int = 100
  presentations: Optional[int] = None
  allow_participation_mismatch: bool = False
  allow_large_canary_fraction: bool = False
  assignment: str = "coin"
  directions: str = "orthogonal"
  placement: str = "random"
  seed: int = 0
  canary_seed: Optional[int] = None
  noise_seed: Optional[int] = None
  seeded_noise: bool = True
  delta: Optional[float] = None
  eval_every: int = 25
  eval_examples: Optional[int] = 2000
  checkpoint_every: int = 25
  record_aggregates: Optional[bool] = None
  memory_budget_gb: float = 2.0
  resume: bool = False
  insertion: Insertion = "server"
  canary_norm: Optional[float] = None
  aggregator: str = registry.DEFAULT
  # ... and every mechanism's settings, None by default
  # (`_with_mechanism_settings`).

  def __post_init__(self):
    checks = {name: functools.partial(validation.as_choice, choices=choices)
              for name, choices in _CHOICES.items()}
    checks.update(_CHECKS)
    optional = dict(_OPTIONAL, **{name: setting.check for name, setting
                                  in registry.settings().items()})
    for name, check in checks.items():
      object.__setattr__(self, name, check(getattr(self, name), name=name))
    for name, check in optional.items():
      if getattr(self, name) is not None:
        object.__setattr__(self, name, check(getattr(self, name), name=name))
    # Looked up once: the run's steps ask `self.mechanism`.
    object.__setattr__(self, "_mechanism", registry.get(self.aggregator))
    for name in ("zeroing", "seeded_noise", "resume",
                 "allow_participation_mismatch"):
      validation.as_bool(getattr(self, name), name)
    for name in ("output_dir", "cache_dir", "vocab_path"):
      value = getattr(self, name)
      if value is not None and not isinstance(value, (str, os.PathLike)):
        raise TypeError(f"{name} must be a path, got {value!r}.")
    if not self.output_dir:
      raise ValueError("output_dir must be a non-empty path.")
    if (self.num_rounds is None) == (self.epochs is None):
      raise ValueError("give exactly one of num_rounds and epochs; got "
                       f"num_rounds={self.num_rounds}, epochs={self.epochs}.")
    if self.num_inserted + self.num_held_out < 4:
      raise ValueError("the estimators need canaries: num_inserted + "
                       f"num_held_out must be at least 4, got "
                       f"{self.num_inserted + self.num_held_out}.")
    if self.data == "tff" and self.num_clients is not None:
      raise ValueError("num_clients is for --data=synthetic; TFF's data has "
                       "its own clients.")
    if self.num_clients is not None:  # the rate, before any data is loaded
      client_sampling.ClientSampler(self.num_clients, self.clients_per_round,
                                    self.sampling)
    object.__setattr__(self, "record_aggregates",
                       preflight.record_aggregates(self))
    if self.insertion == "clients" and self.canary_norm is None:
      object.__setattr__(self, "canary_norm",
                         canary_config.DEFAULT_CANARY_NORM)
    preflight.check_requirements(self)
    if self.insertion == "server" and self.canary_norm is not None:
      raise ValueError(
          f"canary_norm = {self.canary_norm} is for insertion='clients'; "
          "server-side canaries enter at the round's clip.")
    self._check_aggregator()
    # Built once: the mechanism's methods take these, not the config.
    object.__setattr__(self, "_mechanism_settings",
                       self.mechanism.settings_of(self))

  def _check_aggregator(self) -> None:
    """Another mechanism's settings are refused; the run's own are resolved
    by its mechanism (`protocol.Mechanism.resolve`; its requirements were
    checked before, `preflight.check_requirements`)."""
    mechanism = self.mechanism
    for name in registry.names():
      other = registry.get(name)
      if other.name == mechanism.name:
        continue
      given = [f"{k}={getattr(self, k)!r}" for k in other.settings
               if getattr(self, k) is not None]
      if given:
        raise ValueError(f"{', '.join(given)} is for aggregator="
                         f"{other.name!r}; got aggregator={self.aggregator!r}.")
    for name, value in mechanism.resolve(self).items():
      object.__setattr__(self, name, value)

  @property
  def mechanism(self):
    """The run's mechanism (`registry.get(aggregator)`, a
    `protocol.Mechanism`), looked up once at construction."""
    return self._mechanism

  @property
  def mechanism_settings(self):
    """The mechanism's frozen settings of this run
    (`protocol.MechanismSettings`: its own, resolved, and the others it
    reads), built once at construction; the mechanism's methods and its
    TFF half take these, not the config."""
    return self._mechanism_settings

  def as_dict(self) -> dict[str, Any]:
    return dataclasses.asdict(self)

  @classmethod
  def from_json(cls, values: dict[str, Any]) -> ExperimentConfig:
    """The config of a run's config.json `values`: the same frozen spec as
    the experiment's flags give, whose `resolve` gives `values` again.

    Its fields are `values`' keys of the same names (the others, e.g. dim,
    versions, participation, are what `resolve` and the run derived); a
    key an older file lacks takes its field's default (insertion="server",
    aggregator `registry.DEFAULT`, no mechanism settings). Of a value the
    run derived where the flags give another, the flags' is kept: epochs
    (num_rounds derived from it), TFF data's own clients (no num_clients),
    and, for orthogonal canaries, no recorded aggregates whatever an older
    file says.
    """
    names = {f.name for f in dataclasses.fields(cls)}
    fields = {k: v for k, v in values.items() if k in names}
    if fields.get("epochs") is not None:
      fields["num_rounds"] = None
    if fields.get("data") == "tff":
      fields["num_clients"] = None
    if fields.get("directions") == "orthogonal":
      fields["record_aggregates"] = None
    return cls(**fields)


def insertion_of(values: dict[str, Any]) -> Insertion:
  """The insertion mode of a config.json's `values`: "server" when the key
  is missing (files written before the client mode) or None."""
  mode = values.get("insertion") or "server"
  return validation.as_choice(mode, "config.json's insertion", INSERTIONS)


def default_num_clients(config: ExperimentConfig) -> int:
  """Synthetic population: every client takes part `presentations` times
  (default 1), like the canaries (epochs of num_rounds // presentations
  rounds)."""
  rounds = config.num_rounds if config.num_rounds is not None else 1
  per_epoch = max(1, rounds // (config.presentations or 1))
  return max(2, config.clients_per_round * per_epoch)


def client_sampler(config: ExperimentConfig,
                   num_clients: int) -> client_sampling.ClientSampler:
  """The run's client sampler (refuses a per-round rate above 1)."""
  return client_sampling.ClientSampler(num_clients, config.clients_per_round,
                                       config.sampling, config.seed)


@dataclasses.dataclass(frozen=True)
class Resolved:
  """A config with every derived value (`values`, config.json's content),
  and the run's client `sampler`, `canary_schedule` and `canaries` built
  once: the inserted canaries take part as the clients do
  (`client_sampling.canary_schedule`), or as `presentations` says when a
  mismatch is allowed."""

  values: dict[str, Any]
  sampler: client_sampling.ClientSampler
  canary_schedule: schedules.Schedule
  canaries: canary_config.CanaryConfig

  @property
  def num_rounds(self) -> int:
    return self.values["num_rounds"]

  @property
  def num_clients(self) -> int:
    return self.values["num_clients"]


def resolve(config: ExperimentConfig, num_clients: int, dim: int, *,
            versions: Optional[dict[str, str]] = None) -> Resolved:
  """config.json: the config with every derived value filled in.

  Refuses, before any training, a per-round rate clients_per_round /
  num_clients above 1, a `presentations` that contradicts the client
  sampler (unless `allow_participation_mismatch`) and rounds the mechanism
  cannot claim (`protocol.Mechanism.check_rounds`). `presentations` resolves
  to the clients' whole epochs with shuffle sampling. `versions` (package ->
  version) is recorded as given.
  """
  sampler = client_sampler(config, num_clients)
  num_rounds = config.num_rounds
  if num_rounds is None:
    num_rounds = config.epochs * sampler.rounds_per_epoch
  # The mechanism's rounds: whether it can claim them and, for the
  # worst-case placement (its requirements hold: preflight), where.
  mechanism, settings = config.mechanism, config.mechanism_settings
  mechanism.check_rounds(settings, num_rounds, sampler.rounds_per_epoch)
  worst_case = (mechanism.round_noise(settings, num_rounds,
                                      sampler.rounds_per_epoch)
                .worst_case_rounds() if config.placement == "worst_case"
                else None)
  schedule = client_sampling.canary_schedule(  # refuses a mismatch
      sampler, num_rounds, config.presentations,
      allow_mismatch=config.allow_participation_mismatch)
  if worst_case is not None:
    schedule = schedules.SharedRounds(num_rounds,
                                      tuple(worst_case.tolist()))
  presentations = config.presentations
  if (presentations is None
      and config.sampling in client_sampling.EPOCH_SAMPLINGS):
    presentations = sampler.whole_epochs(num_rounds)
  values = config.as_dict()
  values.update(
      num_clients=num_clients, num_rounds=num_rounds, dim=dim,
      presentations=presentations,
      delta=config.delta if config.delta is not None else num_clients ** -1.1,
      canary_seed=(config.canary_seed if config.canary_seed is not None
                   else config.seed + 1),
      noise_seed=((config.noise_seed if config.noise_seed is not None
                   else config.seed + _NOISE_TAG) if config.seeded_noise
                  else None),
      output_dir=os.path.abspath(config.output_dir),
      versions=dict(versions or {}))
  return Resolved(values=values, sampler=sampler, canary_schedule=schedule,
                  canaries=canary_config.CanaryConfig(
                      schedule=schedule, **{field: values[key] for field, key
                                            in _CANARY_FIELDS.items()}))


def run_canaries(values: dict[str, Any],
                 schedule: Optional[schedules.Schedule] = None
                 ) -> canary_config.CanaryConfig:
  """The run's canaries from config.json's `values` (or `resolve`'s): the
  experiment's and the report's one construction. Without `schedule`,
  those `resolve` gives `ExperimentConfig.from_json(values)` (the
  experiment's sampler and schedule; an older file's missing keys take
  their defaults)."""
  if schedule is None:
    return resolve(ExperimentConfig.from_json(values), values["num_clients"],
                   values["dim"]).canaries
  return canary_config.CanaryConfig(
      schedule=schedule, **{field: values[key]
                            for field, key in _CANARY_FIELDS.items()})


def check_resumable(saved: dict[str, Any], resolved: dict[str, Any],
                    path: str) -> None:
  """Refuses to resume the run of `path` (its config.json `saved`) with other
  settings than `resolved`'s (but for `RESUMABLE_KEYS` and versions);
  `saved` is read as `ExperimentConfig.from_json` reads an older file."""
  spec = ExperimentConfig.from_json(saved).as_dict()
  saved = dict(saved, record_aggregates=spec["record_aggregates"])
  saved.update({k: v for k, v in spec.items() if k not in saved})
  differ = [k for k in resolved if k not in RESUMABLE_KEYS
            and k != "versions" and saved.get(k) != resolved[k]]
  if differ:
    details = ", ".join(f"{k}: {saved.get(k)!r} -> {resolved[k]!r}"
                        for k in differ)
    raise ValueError(f"--resume: {path} was started with other settings "
                     f"({details}); use a new --output_dir or the same flags.")


def check_before_tensorflow(config: ExperimentConfig) -> None:
  """Every refusal the scripts can make before TensorFlow loads, writing
  nothing: `preflight.check` and, with synthetic data (whose clients the
  config gives), the canary fraction of the resolved run
  (`preflight.canary_fraction`, without its warning, which the experiment
  gives). With TFF's data the experiment checks the fraction once the data
  are loaded, still before it writes anything."""
  preflight.check(config)
  if config.data != "synthetic":
    return
  resolved = resolve(config, config.num_clients or default_num_clients(config),
                     model_sizes.DIMS[config.task])
  preflight.canary_fraction(
      config, preflight.expected_canary_participations(
          config, resolved.canary_schedule), resolved.num_rounds, warn=False)
