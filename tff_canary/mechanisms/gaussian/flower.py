"""DP-FedAvg's Gaussian mechanism in Flower: server-side canaries in one call.

The Flower half of `mechanisms.gaussian` (issue 36): a Flower user wraps the
DP strategy they already have,

    strategy = ServerSideCanaries(
        DifferentialPrivacyServerSideFixedClipping(
            FedAvg(...), noise_multiplier=z, clipping_norm=C,
            num_sampled_clients=n),
        canaries=CanaryConfig(seed=..., num_inserted=..., num_held_out=...,
                              schedule=...))

and runs it as before (`strategy.start(grid, arrays, num_rounds)` in a
ServerApp). Each round inserts the round's canaries into the release and
scores every canary inside the round, as the TFF half's `CanaryDPFactory`
does (Andrew et al., "One-shot Empirical Privacy Estimation for Federated
Learning", ICLR 2024, arXiv 2302.03098, Algorithm 1 and 3;
docs/method/canaries.md, docs/method/orthogonal-canaries.md).

What Flower 1.42 does in round t (flwr/serverapp/strategy/dp_fixed_clipping.py,
dp_adaptive_clipping.py and flwr/supercore/differential_privacy.py, read in
the wheel), w_t the model sent, n = `num_sampled_clients` as configured:

  1. `configure_train`: the DP strategy keeps w_t; its inner strategy
     (FedAvg) samples the clients. With an accountant (fixed clipping only)
     the round's `GaussianPrivacyEvent` is prepared here.
  2. `aggregate_train`: each reply's arrays x_i become w_t + clip(x_i - w_t)
     at C_t (FlatClip over all arrays). Adaptive clipping also counts the
     CLIPPED replies (norm_bit = norm > C_t), noises the count with
     `np.random.normal(count, clipped_count_stddev)` and sets
     C_{t+1} = C_t exp(-lr (clipped fraction - target_clipped_quantile))
     BEFORE the noise below. (Andrew et al. 2021 move the clip by the
     UNclipped fraction; with the clipped one, the clip shrinks when more
     than the target are clipped: tests/mechanisms/gaussian/test_flower.py
     measures it.)
  3. The inner FedAvg averages the clipped replies, each weighted by its
     MetricRecord's `num-examples` share (1/n when equal and all reply).
  4. Noise: `np.random.normal(0, z C / n, shape)` from NumPy's global RNG,
     cast to each array's dtype and added to every aggregated array. Fixed
     clipping: C is the clip. Adaptive: z is the value's share of the
     noise multiplier (`compute_adaptive_noise_params`) and C is C_{t+1},
     not the C_t the replies were clipped to: the round's noise is
     z C_{t+1} / n against a sensitivity of C_t / n.
  5. With an accountant, the event is composed (`privacy_spent()`).

What `ServerSideCanaries` adds, design (c) of issue 36's spike: it wraps
the DP strategy from OUTSIDE. It reads C_t (the DP strategy's
`clipping_norm` before its `aggregate_train`: the clip Flower applies to
this round's replies), lets Flower do steps 2-5 unchanged, and adds
sum_j c_j C_t / n over the round's inserted canaries to the released
arrays: a canary is a client's clipped update at the clip norm, weighed
1/n as the noise is calibrated (docs/method/canaries.md). Flower's noise
is independent of the aggregate and added to it, so this equals inserting
the canaries into the mean before the noise, with the same noise draw, up
to float rounding (the tests compare both). Why from outside: Flower's
accountant refuses any inner strategy whose class `aggregate_train` is not
FedAvg's, so a canary strategy inside the DP wrapper (design (a)) would
disable the accountant; outside, the DP strategy, its accountant and its
checks are the user's own objects, untouched. The canary code draws
nothing from NumPy's global RNG, so Flower's noise is what it would be
without canaries (a test checks it bit for bit).

Scores: the round's release a_t = w_{t+1} - w_t (the released model minus
the model sent, canaries included; in Flower's convention an update is
trained minus initial, and the canaries enter along +c_j, so inserted
canaries score positive, as docs/method/sign-convention.md asks; the
final-model statistic is then cos(c_j, w_T - w_0)). One forward transform
gives every canary's s_j = <c_j, a_t>, inserted and held out, and
`protocol_flower.round_cosines` the cosines with the round's other inserted
canaries removed, exactly the TFF aggregator's. They stay in memory
(`rounds`, `statistics()`); `tff_canary.harness.writing.flower_run.
write_run` writes them, after the run, as a TFF run's directory and report
(docs/guide/flower.md). Each round also keeps the z and C of Flower's noise
and a fingerprint of `np.random`'s state before it (read, never drawn):
the run's claim is computed from what was added (`release_event`,
`flower_claim`), and two equal fingerprints mean the same noise twice
(`flower_noise_check`).

Canaries: orthogonal (the default of `CanaryConfig`, coin assignment
too), the NumPy construction `stats.canaries.orthogonal_canaries`: the same
canaries as the TFF half for the same seed, over the model's arrays
flattened in the record's order (`protocol_flower.ArrayLayout`). Round r of
the canary schedule (from 0) is Flower's round r + 1.
"""

from __future__ import annotations

from logging import INFO
from typing import Optional

import dp_accounting
import numpy as np
from flwr.serverapp.strategy import DifferentialPrivacyClientSideAdaptiveClipping
from flwr.serverapp.strategy import DifferentialPrivacyClientSideFixedClipping
from flwr.serverapp.strategy import DifferentialPrivacyServerSideAdaptiveClipping
from flwr.serverapp.strategy import DifferentialPrivacyServerSideFixedClipping
from flwr.serverapp.strategy import FedAvg
from flwr.serverapp.strategy import Strategy
from flwr.supercore import log
from flwr.supercore.differential_privacy import compute_stdv

from tff_canary.mechanisms import protocol_flower
from tff_canary.mechanisms.gaussian import flower_claim
from tff_canary.stats import validation
from tff_canary.stats.canaries import canary_config
from tff_canary.stats.canaries import orthogonal_canaries

# The DP strategies whose releases server-side canaries audit.
SERVER_SIDE = (DifferentialPrivacyServerSideFixedClipping,
               DifferentialPrivacyServerSideAdaptiveClipping)
CLIENT_SIDE = (DifferentialPrivacyClientSideFixedClipping,
               DifferentialPrivacyClientSideAdaptiveClipping)


def check_strategy(strategy) -> Strategy:
  """`strategy` if server-side canaries can audit it: one of Flower's
  server-side DP strategies (`SERVER_SIDE`, or a subclass: a user's or a
  library's variant is what an audit is for) around FedAvg's aggregation;
  TypeError or ValueError naming `strategy` otherwise."""
  shown = validation.show(strategy)
  if isinstance(strategy, ServerSideCanaries):
    raise ValueError(f"strategy {shown} already inserts canaries; wrap the "
                     "DP strategy once.")
  if isinstance(strategy, CLIENT_SIDE):
    raise ValueError(
        f"strategy must clip on the server, got {shown} of type "
        f"{type(strategy).__name__}: with client-side clipping the "
        "clients' mod clips, and an audit must send canaries through it "
        "(flower_clients.CanaryClients does); for server-side canaries use "
        "DifferentialPrivacyServerSideFixedClipping or "
        "DifferentialPrivacyServerSideAdaptiveClipping.")
  if not isinstance(strategy, SERVER_SIDE):
    legacy = type(strategy).__module__.startswith("flwr.server.")
    raise TypeError(
        f"strategy must be one of Flower's server-side DP strategies "
        f"(flwr.serverapp.strategy.{SERVER_SIDE[0].__name__} or "
        f"{SERVER_SIDE[1].__name__}), got {shown} of type "
        f"{type(strategy).__module__}.{type(strategy).__name__}"
        + ("; flwr.server.strategy is Flower's legacy API, which this "
           "wrapper does not drive" if legacy else
           ": without Flower's DP noise there is no release to audit") + ".")
  inner = strategy.strategy
  if not (isinstance(inner, FedAvg)
          and type(inner).aggregate_train is FedAvg.aggregate_train):
    raise ValueError(
        f"strategy's inner strategy must aggregate as FedAvg does "
        f"(FedAvg.aggregate_train), got {validation.show(inner)}: a canary "
        "at C_t / n is a client's clipped update in a FedAvg mean, and "
        "another aggregation (a server optimizer, a robust rule) changes "
        "what one client contributes.")
  return strategy


def released_round(dp, seed: int, rows: np.ndarray,
                   layout: protocol_flower.ArrayLayout, server_round: int,
                   sent: np.ndarray, arrays, ids: np.ndarray, clip: float,
                   shares: np.ndarray, rng_state: str
                   ) -> protocol_flower.RoundScores:
  """The `RoundScores` of a released round (server-side canaries' and
  canary clients'): every canary scored against a_t = `arrays` - `sent`,
  with the z and C Flower's noise step used (adaptive: the clip after its
  update, module docstring), read from `dp` after its `aggregate_train`;
  `clip`: C_t, read before it."""
  n = int(dp.num_sampled_clients)
  update = layout.flatten(arrays, "the released arrays") - sent
  scores, cosines = protocol_flower.score(seed, update, rows, ids)
  noise_z = float(dp.noise_multiplier)
  noise_clip = float(dp.clipping_norm)
  return protocol_flower.RoundScores(
      server_round=server_round, schedule_round=server_round - 1, clip=clip,
      scale=clip / n, noise_std=float(compute_stdv(noise_z, noise_clip, n)),
      inserted_ids=ids, num_replies=int(shares.size),
      max_weight=float(shares.max()) if shares.size else float("nan"),
      scores=scores, cosines=cosines, noise_multiplier=noise_z,
      noise_clip=noise_clip, rng_state=rng_state)


class ServerSideCanaries(Strategy):
  """Flower's server-side DP strategy with canaries (module docstring).

  Args:
    strategy: A `DifferentialPrivacyServerSideFixedClipping` or
      `DifferentialPrivacyServerSideAdaptiveClipping` around FedAvg
      (`check_strategy`), with or without its accountant.
    canaries: The `CanaryConfig` (orthogonal directions: the NumPy half
      has no other).

  Raises:
    TypeError, ValueError: for an argument it cannot audit, naming it.
  """

  def __init__(self, strategy: Strategy,
               canaries: canary_config.CanaryConfig):
    super().__init__()
    self._dp = check_strategy(strategy)
    if not isinstance(canaries, canary_config.CanaryConfig):
      raise TypeError("canaries must be a tff_canary.stats.canaries."
                      "canary_config.CanaryConfig, got "
                      f"{validation.show(canaries)}.")
    if canaries.directions != "orthogonal":
      raise ValueError(
          f"canaries must have directions='orthogonal', got "
          f"directions={canaries.directions!r}: the Flower half draws "
          "orthogonal canaries in NumPy; gaussian directions are drawn "
          "with TensorFlow (tff_canary.federated.insertion.canary_directions).")
    self._canaries = canaries
    self._rounds = protocol_flower.CanaryRounds(canaries)
    self._layout: Optional[protocol_flower.ArrayLayout] = None
    self._rows: Optional[np.ndarray] = None
    self._sent: dict[int, np.ndarray] = {}  # server_round -> w_t, flat

  @property
  def strategy(self) -> Strategy:
    """The DP strategy it wraps (the user's own object)."""
    return self._dp

  @property
  def canaries(self) -> canary_config.CanaryConfig:
    return self._canaries

  @property
  def dim(self) -> Optional[int]:
    """d, the model's number of parameters (None before the first round)."""
    return None if self._layout is None else self._layout.dim

  @property
  def rounds(self) -> tuple[protocol_flower.RoundScores, ...]:
    """Every released round's `protocol_flower.RoundScores`, in order."""
    return self._rounds.rounds

  @property
  def skipped_rounds(self) -> tuple[int, ...]:
    """Flower's numbers of the rounds its DP strategy released nothing in
    (a reply with an error; with an accountant, a short cohort)."""
    return self._rounds.skipped_rounds

  def scores(self) -> np.ndarray:
    """float64 [rounds, m]: s_j = <c_j, a_t> of every released round."""
    return self._rounds.matrix("scores")

  def cosines(self) -> np.ndarray:
    """float64 [rounds, m]: the round cosines x_{j,t} of every released
    round (`protocol_flower.round_cosines`)."""
    return self._rounds.matrix("cosines")

  def statistics(self) -> protocol_flower.CanaryStatistics:
    """The all-iterates max and the schedule sums of every canary, as the
    TFF aggregator's state holds them."""
    return self._rounds.statistics()

  def flat(self, arrays) -> np.ndarray:
    """A model's `ArrayRecord` as the canaries' flat float64 vector [d]
    (the layout of the first model sent)."""
    if self._layout is None:
      raise ValueError("no round has been configured yet: the layout of the "
                       "model is that of the first model sent.")
    return self._layout.flatten(arrays)

  def final_cosines(self, initial_arrays, final_arrays) -> np.ndarray:
    """cos(c_j, w_T - w_0) for every canary, every inserted canary's
    projection removed but its own (the final-model statistic; w_T - w_0:
    the canaries enter along +c_j, module docstring), float64 [m]."""
    delta = self.flat(final_arrays) - self.flat(initial_arrays)
    return protocol_flower.score(self._canaries.seed, delta, self._rows,
                                 self._canaries.inserted_ids)[1]

  def release_event(self, scores: protocol_flower.RoundScores):
    """The `dp_accounting` event of one released round as it was: the
    noise Flower added against the clip and the weight share the round
    really had (`flower_claim.release_event`); `dp_event` is Flower's."""
    return flower_claim.release_event(self._dp, scores)

  def dp_event(self):
    """The `dp_accounting` event of one release as Flower claims it: a
    Gaussian of the noise multiplier with fixed clipping; with adaptive
    clipping the composition of Flower's split (its values' multiplier and
    the clipped count's, 2 x clipped_count_stddev, the sensitivity-1/2
    count of Andrew et al. 2021 that `compute_adaptive_noise_params`
    assumes), whose effective multiplier is the one the user gave."""
    z = float(self._dp.noise_multiplier)
    value = dp_accounting.GaussianDpEvent(z)
    if not isinstance(self._dp, DifferentialPrivacyServerSideAdaptiveClipping):
      return value
    count = 2.0 * float(self._dp.clipped_count_stddev)
    if z == 0.0 or count == 0.0:
      return dp_accounting.GaussianDpEvent(0.0)
    return dp_accounting.ComposedDpEvent(
        [value, dp_accounting.GaussianDpEvent(count)])

  def privacy_spent(self):
    """The DP strategy's own `privacy_spent()` (Flower's accountant, fixed
    clipping only), or None where it has none."""
    spent = getattr(self._dp, "privacy_spent", None)
    return None if spent is None else spent()

  def __repr__(self) -> str:
    return f"ServerSideCanaries({self._dp!r})"

  def summary(self) -> None:
    log(INFO, "\t├──> Canaries (tff-canary, server-side, orthogonal):")
    log(INFO, "\t│\t├── Candidates: %d (%d inserted, %s assignment)",
        self._canaries.num_canaries, int(self._canaries.inserted.sum()),
        self._canaries.assignment)
    log(INFO, "\t│\t└── Schedule: %d rounds, seed %d",
        self._canaries.num_rounds, self._canaries.seed)
    self._dp.summary()

  def start(self, grid, initial_arrays, num_rounds: int = 3, *args, **kwargs):
    """`Strategy.start`, refusing a run shorter than the canary schedule
    (its later canaries would count as inserted without entering)."""
    num_rounds = validation.as_int(num_rounds, "num_rounds", minimum=1)
    if num_rounds < self._canaries.num_rounds:
      raise ValueError(
          f"num_rounds must be at least the canary schedule's "
          f"{self._canaries.num_rounds} rounds, got {num_rounds}: the "
          "schedule's later canaries would never enter the model.")
    return super().start(grid, initial_arrays, num_rounds, *args, **kwargs)

  def configure_train(self, server_round, arrays, config, grid):
    """The DP strategy's `configure_train`; keeps w_t (the model sent)."""
    server_round = validation.as_int(server_round, "server_round", minimum=1)
    if self._layout is None:
      layout = protocol_flower.ArrayLayout.of(arrays)
      try:
        self._rows = orthogonal_canaries.rows(
            self._canaries.seed, layout.dim, self._canaries.num_canaries)
      except ValueError as error:
        raise ValueError(f"canaries: {error}") from None
      self._layout = layout
    self._sent = {server_round: self._layout.flatten(arrays)}
    return self._dp.configure_train(server_round, arrays, config, grid)

  def aggregate_train(self, server_round, replies):
    """Flower's DP aggregation, then the round's canaries at C_t / n and
    every canary's score (module docstring)."""
    server_round = validation.as_int(server_round, "server_round", minimum=1)
    if server_round not in self._sent:
      raise ValueError(
          f"server_round {server_round} was not configured by this "
          "strategy's configure_train (the model sent is needed to score "
          "the release).")
    sent = self._sent.pop(server_round)
    replies = list(replies)
    clip = float(self._dp.clipping_norm)  # C_t: before Flower updates it
    n = int(self._dp.num_sampled_clients)
    shares = protocol_flower.weight_shares(replies,
                                           self._dp.strategy.weighted_by_key)
    rng_state = protocol_flower.rng_fingerprint()  # read, not drawn
    arrays, metrics = self._dp.aggregate_train(server_round, replies)
    if arrays is None:
      self._rounds.skip(server_round)
      return arrays, metrics
    schedule_round = server_round - 1
    ids = self._rounds.inserted_in(schedule_round)
    if ids.size:
      total = orthogonal_canaries.canary_sum(
          self._canaries.seed, ids, self._layout.dim, self._rows)
      arrays = self._layout.add(arrays, total.astype(np.float64) * (clip / n),
                                "the DP strategy's aggregate")
    self._rounds.append(released_round(
        self._dp, self._canaries.seed, self._rows, self._layout, server_round,
        sent, arrays, ids, clip, shares, rng_state))
    return arrays, metrics

  def configure_evaluate(self, server_round, arrays, config, grid):
    return self._dp.configure_evaluate(server_round, arrays, config, grid)

  def aggregate_evaluate(self, server_round, replies):
    return self._dp.aggregate_evaluate(server_round, replies)


__all__ = ["CLIENT_SIDE", "SERVER_SIDE", "ServerSideCanaries",
           "check_strategy"]
