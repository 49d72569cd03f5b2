"""A fast NumPy simulator of a distributed-DP round pipeline with canaries.

It runs what TFF's `DistributedDpSumFactory` does to client vectors
(`ddp_parameters` has the numbers), on R rounds of `participants` clients in
dimension d:

  clip at C -> scale by s -> (conditional) randomized rounding to integers
  -> each participant's noise share -> integer sum -> modular wrap to
  [-2^(b-1), 2^(b-1)) -> divide by s,

and inserts canaries in one of two modes:

* ``"server"``: canary j is added to the round's output as C c_j, exactly at
  the clip, after the client pipeline (today's `CanaryDPFactory`);
* ``"client"``: canary j takes a participant's place with an update of norm
  `canary_norm` x C, above the clip, and travels the client path (clip,
  rounding, its own noise share, wrap).

Rotation is skipped: it is orthogonal, so it changes no cosine
(docs/guide/distributed-dp.md says why that is safe, and what it hides).

Planted bugs (`Bug`): ``"clip"``: clients are clipped at `bug_size` x C while
scale, noise and the claim are for C (conditional rounding uses the clip
actually applied; docs/guide/distributed-dp.md); ``"shortfall"``: the factory
computes noise shares for `bug_size` x more clients than take part (as under
dropout), so the sum carries 1/sqrt(bug_size) of the claimed noise std;
``"reuse"``: the noise of the second half of the coordinates (the second of
two tensors) repeats that of the first.

A run applies the tool as a whole: the claimed epsilon is `ddp_accounting`'s
bound for the factory as configured (one participation); the audit is that
of the run's cosine table for a claim of any shape
(`audit.table_bounds(..., gaussian_claim=False)`: epsilon_lo on the final
model and on all iterates, Steinke et al.'s one-run bound on both); the noise
self-test (`noise_stats.check_noise`) runs `noise_check_rounds` rounds of the
same pipeline (same participants) on zero client values, two tensors of d/2,
against the noise std the factory claims. Canaries are candidates inserted
by fair coins, spread evenly over the rounds, one participation each.
"""

from __future__ import annotations

import dataclasses
import typing
from typing import Literal
import warnings

import numpy as np

from tff_canary.stats.audit import audit as audit_lib
from tff_canary.stats.accounting import ddp_accounting
from tff_canary.stats.accounting import ddp_parameters
from tff_canary.stats.canaries import cosine_table
from tff_canary.stats.simulation import discrete_noise
from tff_canary.stats.estimators import estimates
from tff_canary.stats.noise import noise_stats
from tff_canary.stats import results
from tff_canary.stats import validation

Mode = Literal["server", "client"]
MODES = typing.get_args(Mode)
Bug = Literal["none", "clip", "shortfall", "reuse"]
BUGS = typing.get_args(Bug)
_MAX_ROUNDING_TRIES = 1000  # as TFF's conditional rounding


@dataclasses.dataclass(frozen=True)
class PipelineConfig:
  """One simulated pipeline: the factory, the clients, the canaries, a bug."""

  noise_multiplier: float
  mode: Mode = "client"
  bug: Bug = "none"
  bug_size: float = 1.0
  dim: int = 4096
  num_rounds: int = 20
  participants: int = 40
  bits: int = 16
  beta: float = 0.0
  mechanism: ddp_parameters.Mechanism = "distributed_skellam"
  modclip_prob: float = 1e-4
  l2_clip: float = 1.0
  client_norm: float = 2.0
  canary_norm: float = 100.0
  num_candidates: int = 1000
  delta: float = 1e-5
  noise_check_rounds: int = 4

  def __post_init__(self):
    validation.as_choice(self.mode, "mode", MODES)
    validation.as_choice(self.bug, "bug", BUGS)
    if validation.as_float(self.bug_size, "bug_size") < 1.0:
      raise ValueError(f"bug_size must be >= 1, got {self.bug_size}.")
    dim = validation.as_int(self.dim, "dim", minimum=4)
    if dim % 2:
      raise ValueError(f"dim must be even (two tensors), got {dim}.")
    validation.as_int(self.num_rounds, "num_rounds", minimum=1)
    validation.as_int(self.participants, "participants", minimum=1)
    validation.as_int(self.num_candidates, "num_candidates", minimum=4)
    validation.as_int(self.noise_check_rounds, "noise_check_rounds",
                      minimum=1)
    for name in ("client_norm", "canary_norm"):
      if validation.as_positive(getattr(self, name), name) < 1.0:
        raise ValueError(f"{name} must be >= 1 (x C), got "
                         f"{getattr(self, name)}.")
    validation.as_open_unit(self.delta, "delta")

  @property
  def claimed_clients(self) -> int:
    """The factory's expected_clients_per_round (k x more under shortfall)."""
    k = self.bug_size if self.bug == "shortfall" else 1.0
    return int(round(k * self.participants))

  def parameters(self) -> ddp_parameters.DdpParameters:
    return ddp_parameters.ddp_parameters(
        self.noise_multiplier, self.claimed_clients, self.bits, self.l2_clip,
        self.dim, beta=self.beta, mechanism=self.mechanism,
        rotation="dft", modclip_prob=self.modclip_prob)


@dataclasses.dataclass(frozen=True)
class PipelineRun:
  """One simulated run and the tool's verdicts on it."""

  config: PipelineConfig
  seed: int
  claimed: ddp_accounting.DdpEpsilon
  verdict: audit_lib.AuditVerdict
  epsilon_final: results.EpsilonEstimate
  epsilon_all: results.EpsilonEstimate
  noise_check: noise_stats.NoiseCheck
  wrapped_fraction: float

  @property
  def estimate_flags(self) -> bool:
    """epsilon-final's or epsilon-all's whole 95% interval is above the claim.

    A flag, not a refutation: the estimates assume Gaussian statistics and
    carry no guarantee (the audit's bounds do).
    """
    return max(self.epsilon_final.interval.low,
               self.epsilon_all.interval.low) > self.claimed.epsilon

  @property
  def detected(self) -> bool:
    """The tool as a whole: the claim refuted, or the noise self-test failed."""
    return self.verdict.refuted or not self.noise_check.passed

  def __str__(self) -> str:
    c = self.config
    return (f"{c.mode} canaries, bug {c.bug} x{c.bug_size:g}, seed "
            f"{self.seed}: {self.verdict}; {self.epsilon_final}; "
            f"{self.epsilon_all}; {self.noise_check}; wrapped "
            f"{self.wrapped_fraction:.2e} of coordinates")


def _norms(x: np.ndarray) -> np.ndarray:
  return np.sqrt(np.einsum("ij,ij->i", x, x, dtype=np.float64))


def _unit_rows(rng: np.random.Generator, rows: int, dim: int) -> np.ndarray:
  """Uniform unit vectors (float32: the cosines need no more, and it is fast)."""
  g = rng.standard_normal((rows, dim), dtype=np.float32)
  return g / _norms(g)[:, None].astype(np.float32)


def _clip(x: np.ndarray, clip: float) -> np.ndarray:
  factor = np.minimum(1.0, clip / np.maximum(_norms(x), 1e-300))
  return x.astype(np.float64) * factor[:, None]


def _round(rng, scaled: np.ndarray, threshold: float | None) -> np.ndarray:
  """Randomized rounding; rows over `threshold` are redrawn (beta > 0)."""
  floor = np.floor(scaled)
  frac = scaled - floor
  out = floor + (rng.random(scaled.shape) < frac)
  if threshold is None:
    return out.astype(np.int64)
  for _ in range(_MAX_ROUNDING_TRIES):
    over = _norms(out) > threshold
    if not over.any():
      return out.astype(np.int64)
    out[over] = floor[over] + (rng.random(frac[over].shape) < frac[over])
  raise RuntimeError(f"conditional rounding failed {_MAX_ROUNDING_TRIES} "
                     "times (as TFF's would)")


def _noise(rng, config: PipelineConfig, params, shares: int) -> np.ndarray:
  """The summed integer noise shares of one round (reuse bug applied)."""
  size = config.dim // 2 if config.bug == "reuse" else config.dim
  if params.share_std == 0:
    total = np.zeros(size, dtype=np.int64)
  elif params.mechanism == "distributed_skellam":
    total = discrete_noise.skellam(rng, shares * params.share_std**2 / 2, size)
  else:
    total = discrete_noise.discrete_gaussian_sum(
        rng, int(params.share_std), shares, size)
  return np.concatenate([total, total]) if config.bug == "reuse" else total


def pipeline_round(rng: np.random.Generator, config: PipelineConfig,
                   params: ddp_parameters.DdpParameters,
                   vectors: np.ndarray) -> tuple[np.ndarray, int]:
  """One round on the participants' raw vectors (rows): (output, wrapped).

  The output is the unscaled modular sum (before any server-side canary);
  `wrapped` counts the coordinates the modular reduction changed.
  """
  clip = config.l2_clip * (config.bug_size if config.bug == "clip" else 1.0)
  threshold = None
  if config.beta > 0:
    bound = ddp_parameters.inflated_l2_bound(
        clip, params.gamma, config.beta, params.padded_dim)
    threshold = bound * params.scale
  ints = _round(rng, _clip(vectors, clip) * params.scale, threshold)
  total = ints.sum(axis=0) + _noise(rng, config, params, config.participants)
  half = params.modulus // 2
  wrapped = (total + half) % params.modulus - half
  return wrapped / params.scale, int(np.count_nonzero(wrapped != total))


def _noise_check(rng, config, params, seed) -> noise_stats.NoiseCheck:
  zeros = np.zeros((config.participants, config.dim))
  rounds = []
  for _ in range(config.noise_check_rounds):
    out, _ = pipeline_round(rng, config, params, zeros)
    rounds.append([out[: config.dim // 2], out[config.dim // 2:]])
  claimed = params.total_noise_std() / params.scale
  return noise_stats.check_noise(rounds, claimed, seed=seed,
                                 claim="the factory's noise shares")


def simulate(config: PipelineConfig, seed: int) -> PipelineRun:
  """One run of `config` with everything random drawn from `seed`."""
  if not isinstance(config, PipelineConfig):
    raise TypeError(f"config must be a PipelineConfig, got "
                    f"{type(config).__name__}.")
  seed = validation.as_int(seed, "seed", minimum=0)
  rng = np.random.default_rng([seed, 7])
  params = config.parameters()
  m, d, c_norm = config.num_candidates, config.dim, config.l2_clip
  canaries = _unit_rows(rng, m, d)
  inserted = rng.random(m) < 0.5
  order = rng.permutation(np.flatnonzero(inserted))
  per_round = np.array_split(order, config.num_rounds)
  if config.mode == "client" and max(map(len, per_round)) > config.participants:
    raise ValueError(f"participants = {config.participants} cannot hold "
                     f"{max(map(len, per_round))} canary clients in a round.")
  aggregates = np.empty((config.num_rounds, d))
  wrapped = 0
  for t, ids in enumerate(per_round):
    real = config.participants - (len(ids) if config.mode == "client" else 0)
    vectors = _unit_rows(rng, real, d) * config.client_norm * c_norm
    if config.mode == "client":
      vectors = np.vstack([vectors, canaries[ids] * config.canary_norm * c_norm])
    out, count = pipeline_round(rng, config, params, vectors)
    wrapped += count
    if config.mode == "server":
      out = out + c_norm * canaries[ids].sum(axis=0)
    aggregates[t] = out
  final = aggregates.sum(axis=0)
  final_cos = (canaries @ (final / np.linalg.norm(final))).astype(np.float64)
  round_cos = (canaries @ aggregates.T) / _norms(aggregates)
  max_cos = round_cos.max(axis=1)
  claimed = ddp_accounting.ddp_epsilon(params, delta=config.delta)
  delta = config.delta
  table = cosine_table.CosineTable(
      id=np.arange(m), group=np.where(inserted, "inserted", "held_out"),
      participation=inserted.astype(np.int64), final_cosine=final_cos,
      max_cosine=max_cos, max_round=round_cos.argmax(axis=1), seed=seed,
      dim=d, num_rounds=config.num_rounds,
      rounds_recorded=config.num_rounds, assignment="coin")
  fns = audit_lib.table_bounds(table, delta, gaussian_claim=False)
  with warnings.catch_warnings():
    # Under no leak the inserted mean sits below the null's half the time.
    warnings.simplefilter("ignore", results.VarianceMismatchWarning)
    warnings.simplefilter("ignore", results.SignConventionWarning)
    verdict = audit_lib.audit(fns, claimed_epsilon=claimed.epsilon,
                              delta=delta)
    eps_final = estimates.epsilon_final(final_cos[inserted], dim=d,
                                        delta=delta)
    eps_all = estimates.epsilon_all(max_cos[inserted], max_cos[~inserted],
                                    delta=delta)
  check = _noise_check(rng, config, params, seed)
  return PipelineRun(config=config, seed=seed, claimed=claimed,
                     verdict=verdict, epsilon_final=eps_final,
                     epsilon_all=eps_all, noise_check=check,
                     wrapped_fraction=wrapped / (config.num_rounds * d))


__all__ = ["BUGS", "Bug", "MODES", "Mode", "PipelineConfig", "PipelineRun",
           "pipeline_round", "simulate"]
