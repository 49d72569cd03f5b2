"""One real TFF training run per planted DP bug, judged by the tool as a whole.

The TFF counterpart of `tff_canary.stats.simulation.pipeline_simulator` (issue 10: "show
each [planted bug] once in a real TFF run"). `run(config)` trains a tiny
model (a 2-layer MLP, d = F*H + H + H*K + K, on synthetic Gaussian-class
data) with a `tff.learning` process and canaries:

* ``mode="client"``: `canary_clients.build_canary_client_fedavg`; canary j
  is a client whose update is `canary_norm` x c_j, so the user's aggregator
  clips (and, under distributed DP, scales, rounds and noises) it like any
  client. Each round has exactly `clients_per_round` participants: the
  round's canary clients and real clients for the rest.
* ``mode="server"``: TFF's `build_unweighted_fed_avg` with `CanaryDPFactory`
  on the same query; canaries are added at the query's clip C after the
  clients' pipeline, and `clients_per_round` real clients take part.

The run asks its mechanism (`config.aggregator`, a name of
`tff_canary.harness.mechanisms.registry`), never its name: the mechanism's
TFF half (`mechanism_tff.TffMechanism.planted_bugs`) gives a `PlantedBugs`,
its planted bugs (user code, `tff_canary.federated.audit.planted_bugs`), the
modes they run in, the training and self-test aggregators of a bug, the
claim, and the noise self-test. DP-FedAvg's are `gaussian_planted`'s, TFF's
distributed DP's `ddp_planted`'s; a mechanism without planted bugs has none
(DP-FTRL's tree: `tff_canary.federated.audit.planted_tree_bug_runs`, an
aggregation-only run judged by the DP-FTRL audit).

The claim is the run's analytical epsilon for one participation (every
canary takes part once, `FixedPresentations(num_rounds, 1)`) at `delta`.
The canaries are `num_candidates` candidates inserted by fair coins
(`CanaryConfig(assignment="coin")`); the cosines with theta_0 - theta_R
(final model) and the max over rounds with theta_t - theta_{t+1} (all
iterates) make a `CosineTable`. The audit (`audit.audit`, 95%) uses the
table's valid bounds (`audit.table_bounds`: epsilon_lo on both statistics,
and the f-DP one-run bound of a Gaussian claim); a claim that is not a
Gaussian mechanism's (`PlantedBugs.gaussian_claim`) gets Steinke et al.'s
one-run bound (`lower_bounds.one_run_bound`, valid for any (epsilon, delta)
claim) in the f-DP bound's place, as in the simulator. The point estimates
(`table_estimates`) are shown and decide nothing. The noise self-test runs
the run's aggregator as configured, with the same participants, on zero
values (`PlantedBugs.noise_check`). "The tool" caught a run when the audit
refuted the claim or the self-test failed.
"""

from __future__ import annotations

import dataclasses
import time
import typing
from typing import Any, Literal, Optional
import warnings

import numpy as np
import tensorflow as tf
import tensorflow_federated as tff

from tff_canary.federated.audit import noise_check
from tff_canary.federated.insertion import canary_clients
from tff_canary.federated.insertion import canary_directions
from tff_canary.federated.structures import flat_layout
from tff_canary.harness.mechanisms import registry
from tff_canary.harness.running import mechanism_tff
from tff_canary.stats import results
from tff_canary.stats import validation
from tff_canary.stats.audit import audit as audit_lib
from tff_canary.stats.audit import table_estimates
from tff_canary.stats.canaries import canary_config
from tff_canary.stats.canaries import cosine_table
from tff_canary.stats.canaries import schedules

Mode = Literal["client", "server"]
MODES = typing.get_args(Mode)
# How the refusals name each mode.
_MODE_NAMES = {"client": "canary clients", "server": "CanaryDPFactory"}


class PlantedBugs:
  """A mechanism's planted bugs and how to run them (module docstring).

  Its TFF half's `planted_bugs()` returns one; the defaults are DP-FedAvg's
  (a Gaussian claim, the noise self-test of the released noise).

  Attributes:
    bugs: The bugs planted in its aggregator ("none": the correct one).
    modes: The insertion modes (`MODES`) its runs support.
    table: The (bug, mode) rows of `experiments/planted_bugs.py`'s table,
      in order.
    gaussian_claim: Its claim is a Gaussian mechanism's (the f-DP one-run
      bound of a Gaussian claim applies).
  """

  bugs: tuple[str, ...] = ("none",)
  modes: tuple[str, ...] = ("client",)
  table: tuple[tuple[str, str], ...] = (("none", "client"),)
  gaussian_claim: bool = True

  def aggregators(self, config: "BugRunConfig",
                  canaries: canary_config.CanaryConfig):
    """(the training aggregator, the self-test's aggregator, its claimed
    std or None: read from the DpEvent) of `config`'s bug."""
    raise NotImplementedError

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
        checked, trainable_type(config), num_rounds=config.noise_check_rounds,
        num_clients=config.clients_per_round, claimed_std=claimed_std,
        seed=config.seed)


def planted(aggregator: str) -> Optional[PlantedBugs]:
  """The planted bugs of mechanism `aggregator`, or None if it has none."""
  return mechanism_tff.named(aggregator).planted_bugs()


def aggregator_names() -> tuple[str, ...]:
  """The registered mechanisms with planted bugs, in registry order."""
  return tuple(name for name in registry.names()
               if planted(name) is not None)


def bugs() -> tuple[str, ...]:
  """Every planted bug, in the order of `aggregator_names`' mechanisms."""
  out = []
  for name in aggregator_names():
    out += [bug for bug in planted(name).bugs if bug not in out]
  return tuple(out)


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


@dataclasses.dataclass(frozen=True)
class BugRun:
  """One run's claim, audit, estimates and noise self-test."""

  config: BugRunConfig
  claimed_epsilon: float
  claim: str
  verdict: audit_lib.AuditVerdict
  estimates: table_estimates.TableEstimates
  noise_check: Any  # noise_stats.NoiseCheck, or the mechanism's own
  seconds: float

  @property
  def detected(self) -> bool:
    """The tool as a whole: the claim refuted, or the self-test failed."""
    return self.verdict.refuted or not self.noise_check.passed

  def row(self) -> dict[str, str]:
    c, v, e = self.config, self.verdict, self.estimates
    lo_all = e.lo_all.epsilon if e.lo_all is not None else float("nan")
    point_all = (e.all_iterates.epsilon if e.all_iterates is not None
                 else float("nan"))
    return {
        "bug": c.bug, "size": f"{c.bug_size:g}" if c.bug != "none" else "-",
        "aggregator": c.aggregator, "mode": c.mode,
        "claimed ε": f"{self.claimed_epsilon:.3g}",
        "ε_lo final/all": f"{e.lo_final.epsilon:.3g}/{lo_all:.3g}",
        "largest bound": f"{v.largest_bound:.3g}",
        "audit": v.verdict,
        "ε-final/ε-all (pt)": (f"{e.final_mean_only.epsilon:.3g}/"
                               f"{point_all:.3g}"),
        "self-test": "passed" if self.noise_check.passed else "FAILED",
        "caught": "yes" if self.detected else "no",
        "s": f"{self.seconds:.0f}",
    }

  def as_dict(self) -> dict[str, typing.Any]:
    return dict(config=dataclasses.asdict(self.config), label=self.config.label,
                claimed_epsilon=self.claimed_epsilon, claim=self.claim,
                detected=self.detected, verdict=self.verdict.as_dict(),
                estimates=self.estimates.as_dict(),
                noise_check=self.noise_check.as_dict(), seconds=self.seconds)

  def __str__(self) -> str:
    return (f"{self.config.label}: claim {self.claim}; {self.verdict}; "
            f"{self.noise_check}; {'caught' if self.detected else 'not caught'}"
            " (one run: a detection or a miss, not a rate)")


def format_table(runs: typing.Sequence[BugRun]) -> str:
  """The runs' rows as an aligned text table."""
  rows = [run.row() for run in runs]
  if not rows:
    return "(no runs)"
  keys = list(rows[0])
  widths = {k: max(len(k), *(len(r[k]) for r in rows)) for k in keys}
  lines = ["  ".join(k.ljust(widths[k]) for k in keys)]
  lines += ["  ".join(r[k].ljust(widths[k]) for k in keys) for r in rows]
  return "\n".join(lines)


def _model_fn(config: BugRunConfig):
  def model_fn():
    keras_model = tf.keras.Sequential([
        tf.keras.layers.InputLayer(input_shape=(config.features,)),
        tf.keras.layers.Dense(config.hidden, activation="relu",
                              kernel_initializer=tf.keras.initializers
                              .GlorotUniform(seed=1)),
        tf.keras.layers.Dense(config.classes,
                              kernel_initializer=tf.keras.initializers
                              .GlorotUniform(seed=2)),
    ])
    return tff.learning.models.from_keras_model(
        keras_model,
        loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        input_spec=(tf.TensorSpec([None, config.features], tf.float32),
                    tf.TensorSpec([None], tf.int32)))
  return model_fn


def _client_pool(config: BugRunConfig) -> list[tf.data.Dataset]:
  rng = np.random.default_rng([config.seed, 1])
  means = rng.normal(size=(config.classes, config.features))
  pool = []
  for _ in range(config.pool_clients):
    y = rng.integers(0, config.classes, config.examples_per_client)
    x = means[y] + rng.normal(size=(y.size, config.features))
    pool.append(tf.data.Dataset.from_tensor_slices(
        (x.astype(np.float32), y.astype(np.int32))).batch(
            config.examples_per_client))
  return pool


def _canaries(config: BugRunConfig) -> canary_config.CanaryConfig:
  half = config.num_candidates // 2
  with warnings.catch_warnings():
    # d of a few thousand holds fewer than 1000 nearly orthogonal canaries by
    # the dim / 100 advice; each canary's share of the sum is tiny here.
    warnings.simplefilter("ignore", canary_config.TooManyCanariesWarning)
    return canary_config.CanaryConfig(
        seed=config.seed, num_inserted=half,
        num_held_out=config.num_candidates - half,
        schedule=schedules.FixedPresentations(config.num_rounds, 1),
        assignment="coin", directions="gaussian")


def aggregators(config: BugRunConfig, canaries: canary_config.CanaryConfig):
  """(the training aggregator, the self-test's aggregator, its claimed std
  or None) of `config`'s bug: its mechanism's (`PlantedBugs.aggregators`)."""
  return config.planted.aggregators(config, canaries)


def claimed_epsilon(config: BugRunConfig) -> tuple[float, str]:
  """The analytical epsilon of one participation at config.delta, described
  (`PlantedBugs.claim`)."""
  return config.planted.claim(config)


def trainable_type(config: BugRunConfig):
  """The TFF type of the run's model's trainable weights."""
  return tff.learning.models.weights_type_from_model(
      _model_fn(config)).trainable


def _train(config, canaries, training_aggregator) -> np.ndarray:
  """Flat trainable weights theta_0..theta_R, [R + 1, d]."""
  model_fn = _model_fn(config)
  client_opt = tff.learning.optimizers.build_sgdm(learning_rate=0.1)
  server_opt = tff.learning.optimizers.build_sgdm(learning_rate=1.0)
  if config.mode == "client":  # (server mode: CanaryDPFactory.create warns)
    process = canary_clients.build_canary_client_fedavg(
        model_fn, client_opt, server_opt,
        model_aggregator=training_aggregator, canary_seed=canaries.seed,
        canary_norm=config.canary_norm * config.l2_clip)
  else:
    with warnings.catch_warnings():  # as in _canaries
      warnings.simplefilter("ignore", canary_config.TooManyCanariesWarning)
      process = tff.learning.algorithms.build_unweighted_fed_avg(
          model_fn, client_opt, server_opt,
          model_aggregator=training_aggregator)
  pool = _client_pool(config)
  rng = np.random.default_rng([config.seed, 2])
  state = process.initialize()
  weights = [flat_layout.flatten_numpy(
      process.get_model_weights(state).trainable)]
  for t in range(config.num_rounds):
    ids = (canary_clients.scheduled_canary_ids(canaries, t)
           if config.mode == "client" else [])
    real = config.clients_per_round - len(ids)
    if real < 1:
      raise ValueError(f"clients_per_round = {config.clients_per_round} "
                       f"cannot hold round {t}'s {len(ids)} canary clients "
                       "and a real client.")
    chosen = [pool[i] for i in rng.choice(len(pool), real,
                                          replace=real > len(pool))]
    data = (canary_clients.with_canary_clients(chosen, ids, canaries)
            if config.mode == "client" else chosen)
    state = process.next(state, data).state
    weights.append(flat_layout.flatten_numpy(
        process.get_model_weights(state).trainable))
  return np.stack(weights).astype(np.float64)


def cosine_table_of(weights: np.ndarray,
                    canaries: canary_config.CanaryConfig
                    ) -> cosine_table.CosineTable:
  """The cosine table of a run from its weights theta_0..theta_R."""
  dim = weights.shape[1]
  ids = np.arange(canaries.num_canaries)
  directions = canary_directions.canary_block(canaries.seed, ids, dim)
  final = weights[0] - weights[-1]
  rounds = weights[:-1] - weights[1:]
  final_cos = directions @ final / np.linalg.norm(final)
  round_cos = (directions @ rounds.T) / np.linalg.norm(rounds, axis=1)
  return cosine_table.CosineTable(
      id=ids, group=np.where(canaries.inserted, "inserted", "held_out"),
      participation=canaries.counts(), final_cosine=final_cos,
      max_cosine=round_cos.max(axis=1), max_round=round_cos.argmax(axis=1),
      seed=canaries.seed, dim=dim, num_rounds=len(rounds),
      rounds_recorded=len(rounds), assignment=canaries.assignment,
      generator=canary_directions.GENERATOR)


def run(config: BugRunConfig) -> BugRun:
  """Trains once with `config` and applies the tool (module docstring)."""
  if not isinstance(config, BugRunConfig):
    raise TypeError(f"config must be a BugRunConfig, got "
                    f"{validation.show(config)}.")
  start = time.perf_counter()
  canaries = _canaries(config)
  training, checked, claimed_std = aggregators(config, canaries)
  table = cosine_table_of(_train(config, canaries, training), canaries)
  eps, claim = claimed_epsilon(config)
  with warnings.catch_warnings():
    # Under no leak the inserted mean sits below the null's half the time.
    warnings.simplefilter("ignore", results.VarianceMismatchWarning)
    warnings.simplefilter("ignore", results.SignConventionWarning)
    verdict = audit_lib.audit(
        audit_lib.table_bounds(table, config.delta,
                               gaussian_claim=config.planted.gaussian_claim),
        claimed_epsilon=eps, delta=config.delta)
    estimated = table_estimates.estimate_table(table, delta=config.delta)
  check = config.planted.noise_check(config, checked, claimed_std)
  return BugRun(config=config, claimed_epsilon=eps, claim=claim,
                verdict=verdict, estimates=estimated, noise_check=check,
                seconds=time.perf_counter() - start)


__all__ = ["BugRun", "BugRunConfig", "MODES", "PlantedBugs",
           "aggregator_names", "aggregators", "bugs", "claimed_epsilon",
           "cosine_table_of", "format_table", "planted", "run",
           "trainable_type"]
