"""The planted-bug runs' contract: a mechanism's `PlantedBugs` and a run's config.

A mechanism's TFF half (`protocol_tff.TffMechanism.planted_bugs`) gives a
`PlantedBugs`: its planted bugs (user code, each mechanism's
`planted_bugs` module) and each step of a run of them, which
`tff_canary.harness.runner.planted_bug_runs.run` takes in turn (its module
docstring tells the run). The defaults are DP-FedAvg's: the tiny model of
`planted_model` trained with a `tff.learning` process, each candidate
inserted once by a fair coin, the cosine table audited at 95% on its valid
bounds (`audit.table_bounds`), the noise self-test of the released noise. A
mechanism overrides what differs.
"""

from __future__ import annotations

import dataclasses
import typing
from typing import Any, Literal, Optional
import warnings

from tff_canary.federated.audit import noise_check
from tff_canary.mechanisms import planted_model
from tff_canary.mechanisms import protocol_tff
from tff_canary.mechanisms import registry
from tff_canary.stats import results
from tff_canary.stats import validation
from tff_canary.stats.audit import audit as audit_lib
from tff_canary.stats.audit import table_estimates
from tff_canary.stats.canaries import canary_config
from tff_canary.stats.canaries import schedules

Mode = Literal["client", "server"]
MODES = typing.get_args(Mode)
# How the refusals name each mode.
_MODE_NAMES = {"client": "canary clients", "server": "CanaryDPFactory"}


class PlantedBugs:
  """A mechanism's planted bugs and how to run them (module docstring).

  Attributes:
    bugs: The bugs planted in its aggregator ("none": the correct one).
    modes: The insertion modes (`MODES`) its runs support.
    table: The (bug, mode) rows of `experiments/planted_bugs.py`'s table,
      in order.
    gaussian_claim: Its claim is a Gaussian mechanism's (the f-DP one-run
      bound of a Gaussian claim applies).
    config_type: The `BugRunConfig` (sub)class of its runs.
  """

  bugs: tuple[str, ...] = ("none",)
  modes: tuple[str, ...] = ("client",)
  table: tuple[tuple[str, str], ...] = (("none", "client"),)
  gaussian_claim: bool = True
  config_type: Optional[type] = None  # None: BugRunConfig

  def canaries(self, config: "BugRunConfig"
               ) -> tuple[canary_config.CanaryConfig,
                          canary_config.CanaryConfig]:
    """(the run's canaries, the canaries the audit is told of): each
    candidate inserted once, Gaussian directions."""
    canaries = coin_canaries(
        config, schedules.FixedPresentations(config.num_rounds, 1), "gaussian")
    return canaries, canaries

  def aggregators(self, config: "BugRunConfig",
                  canaries: canary_config.CanaryConfig):
    """(the training aggregator, the self-test's aggregator, its claimed
    std or None: read from the DpEvent) of `config`'s bug."""
    raise NotImplementedError

  def observe(self, config: "BugRunConfig",
              canaries: canary_config.CanaryConfig, training) -> Any:
    """What the audit reads of a run with the `training` aggregator: the
    cosine table of the model trained with it."""
    return planted_model.cosine_table_of(
        planted_model.train(config, canaries, training), canaries)

  def claim(self, config: "BugRunConfig") -> tuple[float, str]:
    """The analytical epsilon of one participation at config.delta, and its
    description."""
    raise NotImplementedError

  def noise_check(self, config: "BugRunConfig", checked,
                  claimed_std: Optional[float]) -> Any:
    """The noise self-test of `checked` (`aggregators`' second), with
    `config.clients_per_round` clients for `config.noise_check_rounds`
    rounds: by default the released noise's
    (`noise_check.check_aggregation_noise`)."""
    return noise_check.check_aggregation_noise(
        checked, planted_model.trainable_type(config),
        num_rounds=config.noise_check_rounds,
        num_clients=config.clients_per_round, claimed_std=claimed_std,
        seed=config.seed)

  def judge(self, config: "BugRunConfig", observed: Any,
            told: canary_config.CanaryConfig, claimed_epsilon: float,
            check: Any) -> tuple[Any, Optional[Any]]:
    """(the audit's verdict, the point estimates or None) of what the run
    `observed` (module docstring); the self-test `check` is judged apart
    (`BugRun.detected`). A mechanism's own verdict has `AuditVerdict`'s
    `refuted`, `verdict`, `largest_bound` and `as_dict()`."""
    with warnings.catch_warnings():
      # Under no leak the inserted mean sits below the null's half the time.
      warnings.simplefilter("ignore", results.VarianceMismatchWarning)
      warnings.simplefilter("ignore", results.SignConventionWarning)
      verdict = audit_lib.audit(
          audit_lib.table_bounds(observed, config.delta,
                                 gaussian_claim=self.gaussian_claim),
          claimed_epsilon=claimed_epsilon, delta=config.delta)
      return verdict, table_estimates.estimate_table(observed,
                                                     delta=config.delta)


def coin_canaries(config: "BugRunConfig", schedule: schedules.Schedule,
                  directions: str) -> canary_config.CanaryConfig:
  """`config.num_candidates` candidates of `config.seed`, each inserted by a
  fair coin, on `schedule`."""
  half = config.num_candidates // 2
  with warnings.catch_warnings():
    # More candidates than the dim / 100 advice: orthogonal canaries are
    # exact, and each Gaussian canary's share of the sum is tiny here.
    warnings.simplefilter("ignore", canary_config.TooManyCanariesWarning)
    return canary_config.CanaryConfig(
        seed=config.seed, num_inserted=half,
        num_held_out=config.num_candidates - half, schedule=schedule,
        assignment="coin", directions=directions)


def planted(aggregator: str) -> Optional[PlantedBugs]:
  """The planted bugs of mechanism `aggregator`, or None if it has none."""
  return protocol_tff.named(aggregator).planted_bugs()


def aggregator_names() -> tuple[str, ...]:
  """The registered mechanisms with planted bugs, in registry order."""
  return tuple(name for name in registry.names()
               if planted(name) is not None)


def bugs() -> tuple[str, ...]:
  """Every planted bug, in the order of `aggregator_names`' mechanisms."""
  return tuple(dict.fromkeys(bug for name in aggregator_names()
                             for bug in planted(name).bugs))


def _either(names: typing.Sequence[str]) -> str:
  return " or ".join(repr(name) for name in names)


@dataclasses.dataclass(frozen=True)
class BugRunConfig:
  """One run: the bug, the insertion mode, the aggregator, the sizes.

  `aggregator` is a registered mechanism with planted bugs
  (`aggregator_names()`); `bug` one of its bugs (`PlantedBugs.bugs`).
  """

  bug: str = "none"
  bug_size: float = 1.0
  mode: Mode = "client"
  aggregator: str = registry.DEFAULT
  noise_multiplier: float = 4.0
  clients_per_round: int = 50
  num_rounds: int = 20
  num_candidates: int = 1000
  l2_clip: float = 1.0
  canary_norm: float = 100.0
  bits: int = 16
  delta: float = 1e-5
  seed: int = 0
  features: int = 64
  hidden: int = 32
  classes: int = 10
  examples_per_client: int = 20
  pool_clients: int = 100
  noise_check_rounds: int = noise_check.DEFAULT_ROUNDS

  def __post_init__(self):
    validation.as_choice(self.bug, "bug", bugs())
    validation.as_choice(self.mode, "mode", MODES)
    names = aggregator_names()
    if self.aggregator in registry.names() and self.aggregator not in names:
      raise ValueError(f"aggregator {self.aggregator!r} has no planted bugs "
                       f"(PlantedBugs); the aggregators with planted bugs "
                       f"are {names}.")
    validation.as_choice(self.aggregator, "aggregator", names)
    if validation.as_float(self.bug_size, "bug_size") < 1.0:
      raise ValueError(f"bug_size must be >= 1, got {self.bug_size}.")
    mechanism = planted(self.aggregator)
    config_type = mechanism.config_type or BugRunConfig
    if not isinstance(self, config_type):
      raise TypeError(f"runs of aggregator {self.aggregator!r} take a "
                      f"{config_type.__qualname__} (its PlantedBugs."
                      f"config_type), got {type(self).__qualname__}.")
    if self.bug not in mechanism.bugs:
      owners = [n for n in names if self.bug in planted(n).bugs]
      raise ValueError(f"bug {self.bug!r} is planted in the {_either(owners)}"
                       f" aggregator, got aggregator {self.aggregator!r}.")
    if self.mode not in mechanism.modes:
      owners = [n for n in names if self.mode in planted(n).modes]
      raise ValueError(f"mode {self.mode!r} ({_MODE_NAMES[self.mode]}) needs "
                       f"aggregator {_either(owners)}, got "
                       f"{self.aggregator!r}.")
    validation.as_positive(self.noise_multiplier, "noise_multiplier")
    for name, low in (("clients_per_round", 1), ("num_rounds", 1),
                      ("num_candidates", 8), ("bits", 1), ("seed", 0),
                      ("features", 1), ("hidden", 1), ("classes", 2),
                      ("examples_per_client", 1), ("pool_clients", 1),
                      ("noise_check_rounds", 1)):
      validation.as_int(getattr(self, name), name, minimum=low)
    validation.as_positive(self.l2_clip, "l2_clip")
    validation.as_positive(self.canary_norm, "canary_norm")
    validation.as_open_unit(self.delta, "delta")

  @property
  def dim(self) -> int:
    """d, the model's trainable parameters (`planted_model`)."""
    return (self.features * self.hidden + self.hidden
            + self.hidden * self.classes + self.classes)

  @property
  def label(self) -> str:
    """A short name of the run, e.g. `shortfall x10 ddp client`."""
    size = f" x{self.bug_size:g}" if self.bug != "none" else ""
    return f"{self.bug}{size} {self.aggregator} {self.mode}"

  @property
  def planted(self) -> PlantedBugs:
    """Its mechanism's planted bugs."""
    return planted(self.aggregator)


__all__ = ["BugRunConfig", "MODES", "Mode", "PlantedBugs", "aggregator_names",
           "bugs", "coin_canaries", "planted"]
