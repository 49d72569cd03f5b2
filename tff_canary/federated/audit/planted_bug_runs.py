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

The aggregators (`tff_canary.federated.audit.planted_bugs`): ``"gaussian"`` is
`tff.aggregators.DifferentiallyPrivateFactory(NormalizedQuery(q,
clients_per_round))`, q a seeded Gaussian sum query (correct, `ClipBugQuery`
or `NoiseReuseQuery`); ``"ddp"`` is TFF's distributed-DP chain
(`planted_bugs.ddp_sum_factory`, distributed Skellam, `bits`) under
`UnweightedMeanFactory`, told `expected_clients_per_round` = bug_size x
clients_per_round for the shortfall bug (1 x otherwise); its clip bug clips
at bug_size x C with the query's norm bounds to match (`ddp_sum_factory`'s
`clip_factor`); its reuse bug is
`planted_bugs.ShareReuseSkellamQuery` (each client's share repeated between
the halves of its rotated vector).

The claim is the run's analytical epsilon for one participation (every
canary takes part once, `FixedPresentations(num_rounds, 1)`) at `delta`:
the Gaussian mechanism's exact epsilon at the claimed noise multiplier
(`gaussian_accounting`) or `ddp_accounting.ddp_epsilon` for the parameters
the factory was told. The canaries are `num_candidates` candidates inserted
by fair coins (`CanaryConfig(assignment="coin")`); the cosines with
theta_0 - theta_R (final model) and the max over rounds with
theta_t - theta_{t+1} (all iterates) make a `CosineTable`. The audit
(`audit.audit`, 95%) uses the table's valid bounds (`audit.table_bounds`:
epsilon_lo on both statistics, and the f-DP one-run bound of a Gaussian
claim); a distributed-DP claim is not Gaussian, so there Steinke et al.'s
one-run bound (`lower_bounds.one_run_bound`, valid for any (epsilon, delta)
claim) takes the f-DP bound's place, as in the simulator. The point
estimates (`table_estimates`) are shown and decide nothing. The noise
self-test (`noise_check.check_aggregation_noise`) runs the run's aggregator
as configured, with the same participants, on zero values (in server mode
TFF's factory on the same query: `CanaryDPFactory` adds that query's noise,
and its scheduled canaries would be in the self-test's rounds); for distributed
DP it is `ddp_noise_check.check_ddp_noise`: the sum chain as configured, its
released noise rotated back with each round's rotation seed and tested
against the factory's claim per rotated coordinate, where the share reuse
shows (the two halves of the rotated vector are equal).
"The tool" caught a run when the audit refuted the claim or the self-test
failed.
"""

from __future__ import annotations

import dataclasses
import time
import typing
from typing import Literal
import warnings

import numpy as np
import tensorflow as tf
import tensorflow_federated as tff
import tensorflow_privacy as tfp

from tff_canary.federated.insertion import canary_clients
from tff_canary.federated.insertion import canary_directions
from tff_canary.federated.insertion import factory
from tff_canary.federated.structures import flat_layout
from tff_canary.federated.audit import ddp_noise_check
from tff_canary.federated.audit import noise_check
from tff_canary.federated.audit import planted_bugs
from tff_canary.federated.insertion import seeded_query
from tff_canary.stats.audit import audit as audit_lib
from tff_canary.stats.canaries import canary_config
from tff_canary.stats.canaries import cosine_table
from tff_canary.stats.accounting import ddp_accounting
from tff_canary.stats.accounting import ddp_parameters
from tff_canary.stats.accounting import gaussian_accounting
from tff_canary.stats.noise import noise_stats
from tff_canary.stats import results
from tff_canary.stats.canaries import schedules
from tff_canary.stats.audit import table_estimates
from tff_canary.stats import validation

Bug = Literal["none", "clip", "shortfall", "reuse"]
BUGS = typing.get_args(Bug)
Mode = Literal["client", "server"]
MODES = typing.get_args(Mode)
Aggregator = Literal["gaussian", "ddp"]
AGGREGATORS = typing.get_args(Aggregator)


@dataclasses.dataclass(frozen=True)
class BugRunConfig:
  """One run: the bug, the insertion mode, the aggregator, the sizes."""

  bug: Bug = "none"
  bug_size: float = 1.0
  mode: Mode = "client"
  aggregator: Aggregator = "gaussian"
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
    validation.as_choice(self.bug, "bug", BUGS)
    validation.as_choice(self.mode, "mode", MODES)
    validation.as_choice(self.aggregator, "aggregator", AGGREGATORS)
    if validation.as_float(self.bug_size, "bug_size") < 1.0:
      raise ValueError(f"bug_size must be >= 1, got {self.bug_size}.")
    needs = {"shortfall": "ddp"}
    if self.bug in needs and self.aggregator != needs[self.bug]:
      raise ValueError(f"bug {self.bug!r} is planted in the "
                       f"{needs[self.bug]!r} aggregator, got aggregator "
                       f"{self.aggregator!r}.")
    if self.mode == "server" and self.aggregator != "gaussian":
      raise ValueError("mode 'server' (CanaryDPFactory) needs aggregator "
                       f"'gaussian', got {self.aggregator!r}.")
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

  def ddp(self) -> ddp_parameters.DdpParameters:
    """What the distributed-DP factory derives from what it was told."""
    k = self.bug_size if self.bug == "shortfall" else 1.0
    return ddp_parameters.ddp_parameters(
        self.noise_multiplier, int(round(k * self.clients_per_round)),
        self.bits, self.l2_clip, self.dim, mechanism="distributed_skellam",
        rotation="dft")


@dataclasses.dataclass(frozen=True)
class BugRun:
  """One run's claim, audit, estimates and noise self-test."""

  config: BugRunConfig
  claimed_epsilon: float
  claim: str
  verdict: audit_lib.AuditVerdict
  estimates: table_estimates.TableEstimates
  noise_check: noise_stats.NoiseCheck | ddp_noise_check.DdpNoiseCheck
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


def _sum_query(config: BugRunConfig):
  c, seed = config.l2_clip, config.seed
  std = config.noise_multiplier * c
  if config.bug == "clip":
    return planted_bugs.ClipBugQuery(c, std, seed, clip_factor=config.bug_size)
  if config.bug == "reuse":
    return planted_bugs.NoiseReuseQuery(c, std, seed)
  return seeded_query.SeededGaussianSumQuery(c, std, seed)


def aggregators(config: BugRunConfig, canaries: canary_config.CanaryConfig):
  """(the training aggregator, the self-test's aggregator, its claimed std).

  The claimed std is None when the self-test reads it from the DpEvent; for
  DDP it is the factory's in model units (`run`'s rotated-domain self-test
  takes `config.ddp()` instead).
  """
  if config.aggregator == "ddp":
    params = config.ddp()
    bugs = dict(share_reuse=config.bug == "reuse",
                clip_factor=config.bug_size if config.bug == "clip" else 1.0)
    training = tff.aggregators.UnweightedMeanFactory(
        value_sum_factory=planted_bugs.ddp_sum_factory(params, **bugs))
    return (training, planted_bugs.ddp_sum_factory(params, **bugs),
            planted_bugs.ddp_claimed_std(params))
  checked = tff.aggregators.DifferentiallyPrivateFactory(tfp.NormalizedQuery(
      _sum_query(config), denominator=config.clients_per_round))
  if config.mode == "server":
    training = factory.CanaryDPFactory(
        _sum_query(config), canaries,
        clients_per_round=config.clients_per_round)
    return training, checked, None
  return checked, checked, None


def claimed_epsilon(config: BugRunConfig) -> tuple[float, str]:
  """The analytical epsilon of one participation at config.delta, described."""
  if config.aggregator == "ddp":
    eps = ddp_accounting.ddp_epsilon(config.ddp(), delta=config.delta)
    return eps.epsilon, str(eps)
  eps = gaussian_accounting.gaussian_epsilon(config.noise_multiplier,
                                             config.delta)
  return eps, (f"Gaussian mechanism, z = {config.noise_multiplier:g}, one "
               f"participation: ε = {eps:.4g} at δ = {config.delta:g}")


def _bound_fns(table, config: BugRunConfig):
  # A DDP claim is not a Gaussian one (module docstring).
  return audit_lib.table_bounds(table, config.delta,
                                gaussian_claim=config.aggregator != "ddp")


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
    verdict = audit_lib.audit(_bound_fns(table, config), claimed_epsilon=eps,
                              delta=config.delta)
    estimated = table_estimates.estimate_table(table, delta=config.delta)
  value_type = tff.learning.models.weights_type_from_model(
      _model_fn(config)).trainable
  if config.aggregator == "ddp":  # in the rotated domain (module docstring)
    check = ddp_noise_check.check_ddp_noise(
        checked, config.ddp(), num_rounds=config.noise_check_rounds,
        num_clients=config.clients_per_round, seed=config.seed)
  else:
    check = noise_check.check_aggregation_noise(
        checked, value_type, num_rounds=config.noise_check_rounds,
        num_clients=config.clients_per_round, claimed_std=claimed_std,
        seed=config.seed)
  return BugRun(config=config, claimed_epsilon=eps, claim=claim,
                verdict=verdict, estimates=estimated, noise_check=check,
                seconds=time.perf_counter() - start)


__all__ = ["AGGREGATORS", "BUGS", "BugRun", "BugRunConfig", "MODES",
           "aggregators", "claimed_epsilon", "cosine_table_of",
           "format_table", "run"]
