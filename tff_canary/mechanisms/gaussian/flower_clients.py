"""Canary clients in Flower: ClientApps whose reply is a canary, through the user's mods.

The client-insertion mode of the Gaussian mechanism's Flower half (issue
36; the TFF half's is `federated.insertion.canary_clients`,
docs/guide/insertion-modes.md), the paper's production recipe (Andrew et
al., "One-shot Empirical Privacy Estimation for Federated Learning", ICLR
2024, arXiv 2302.03098, Section 4 and Algorithm 2): designated clients'
replies are replaced by canaries, which then go through everything a
client's reply goes through: the ClientApp's own mods (`fixedclipping_mod`,
`adaptiveclipping_mod`, any other), Flower's serialization, the DP
strategy's clipping (server-side strategies), its clipped-count vote
(adaptive), FedAvg's weighting and Flower's noise. A defect anywhere on
that path shows in the canaries' scores; server-side canaries
(`flower.ServerSideCanaries`) see the noise step only.

Two halves, joined by the round's instructions:

  * Server: `CanaryClients` wraps the user's DP strategy (any of Flower's
    four, around FedAvg's aggregation) from outside, as `ServerSideCanaries`
    does. In `configure_train` the DP strategy and FedAvg sample the nodes
    as they always do (`fraction_train`, `min_train_nodes`); the wrapper
    then picks, with its own generator (seed, round; nothing from NumPy's
    or Python's global RNGs, so Flower's sampling and noise are what they
    would be), k_r of the SAMPLED nodes for the round's k_r scheduled
    inserted canaries and adds to their messages' ConfigRecord (a copy: the
    others keep Flower's shared one) the canary's id, seed and norm
    (`CANARY_ID_KEY`, `CANARY_SEED_KEY`, `CANARY_NORM_KEY`). So the canary
    clients are always among the sampled, and the schedule is exactly the
    `CanaryConfig`'s (a round with more scheduled canaries than sampled
    nodes is refused). A canary client REPLACES a sampled client (as in the
    paper), so a round still has the n replies Flower's noise (z C / n) and
    accountant (exactly n replies) assume; TFF's canary clients are extra
    members of the cohort instead.
  * Client: `canary_train` decorates the user's train function before
    `@app.train()` registers it, so the ClientApp's mods wrap it exactly
    as they wrap the user's training (Flower composes them with
    `make_ffn`, flwr/clientapp/client_app.py: `ClientApp(mods=...)` and
    `@app.train(mods=...)`, outermost first). A message with a canary id
    is answered with the canary reply (`canary_reply`): the model received
    plus `norm * c_j` (Flower's convention, trained = received + update:
    inserted canaries score positive, docs/method/sign-convention.md),
    c_j the orthogonal canary j (`stats.canaries.orthogonal_canaries`,
    prefix-consistent, so the client needs only the seed and j), laid out
    over the received arrays as `protocol_flower.ArrayLayout`. Any other
    message goes to the user's training.

The worst-case client (Flower's central-DP threat model: the server and
its noise are trusted, a client's reply is whatever its data makes it, so
a client may put anything in it): a canary's update is a canary direction
at norm `canary_norm` (default 10, `canary_config.DEFAULT_CANARY_NORM`,
as in the TFF half) far beyond the clip, so the clip, wherever it is done,
sets its norm, and it enters at C_t. Its weight: FedAvg weighs a reply by
its `num-examples`, which a client reports; with a larger one a client
would weigh more than the 1/n Flower's noise is calibrated to, a
sensitivity no claim of Flower's covers (its accountant refuses unequal
weights, Flower 1.42's `_validate_uniform_weights`; its analysis, like
McMahan et al. 2018's uniform DP-FedAvg, arXiv 1710.06963, is of equal
weights). The audit tests the mechanism the claim is about, so a canary
reports the SAME weight as the other clients: `canary_train(metrics=...)`
is the MetricRecord it replies with (default {"num-examples": 1}; give
what your clients report, and any other metric key they report, since
FedAvg refuses replies whose metric keys differ). Each round records the
canary replies' weight shares; unequal ones are logged as a warning.

Scores: as `ServerSideCanaries`, s_j = <c_j, a_t> for every canary, a_t =
w_{t+1} - w_t the released update, and the round cosines with the round's
inserted canaries removed (`protocol_flower.score`). A canary clipped to
C_t with weight 1/n scores C_t / n plus noise of std z C / n, so in units
of that std (the sum's z C, over n) 1/z plus N(0, 1); held-out canaries
score N(0, 1) in those units, plus the clients' tiny projection (the tests
measure both). Nothing is added to
the release. `outcomes` holds each canary client's round, node, weight
share and whether its norm exceeded the round's clip, as
canary_outcomes.json (`harness.writing.flower_run.write_run`).
"""

from __future__ import annotations

import functools
from logging import INFO, WARNING
from typing import Any, Callable, Optional

import dp_accounting
import numpy as np
from flwr.app import ConfigRecord, Message, MetricRecord, RecordDict
from flwr.serverapp.strategy import DifferentialPrivacyClientSideAdaptiveClipping
from flwr.serverapp.strategy import DifferentialPrivacyServerSideAdaptiveClipping
from flwr.serverapp.strategy import FedAvg
from flwr.serverapp.strategy import Strategy
from flwr.supercore import log

from tff_canary.mechanisms import protocol_flower
from tff_canary.mechanisms.gaussian import flower
from tff_canary.stats import validation
from tff_canary.stats.canaries import canary_config
from tff_canary.stats.canaries import orthogonal_canaries

CANARY_ID_KEY = "tff-canary-id"
CANARY_SEED_KEY = "tff-canary-seed"
CANARY_NORM_KEY = "tff-canary-norm"
DEFAULT_CANARY_NORM = canary_config.DEFAULT_CANARY_NORM  # 10.0
DEFAULT_METRICS = {"num-examples": 1}  # FedAvg's default weighted_by_key
ADAPTIVE = (DifferentialPrivacyServerSideAdaptiveClipping,
            DifferentialPrivacyClientSideAdaptiveClipping)
# The generator of the nodes that become canary clients: (seed, tag, round).
NODE_TAG = 0x6E6F6465


def _single(records, kind: str, name: str):
  if len(records) != 1:
    raise ValueError(f"{name} must hold exactly one {kind}, got "
                     f"{len(records)}: {sorted(records)}.")
  return next(iter(records.items()))


def canary_reply(message: Message,
                 metrics: Optional[dict[str, Any]] = None) -> Optional[Message]:
  """The canary client's reply to a training `message`, or None if the
  message names no canary (module docstring): the arrays received plus
  norm * c_j, and the MetricRecord `metrics` (default `DEFAULT_METRICS`)."""
  content = message.content
  if not any(CANARY_ID_KEY in c for c in content.config_records.values()):
    return None
  _, config = _single(content.config_records, "ConfigRecord",
                      "a canary client's message.content")
  canary_id = validation.as_int(config[CANARY_ID_KEY], CANARY_ID_KEY,
                                minimum=0)
  seed = validation.as_int(config[CANARY_SEED_KEY], CANARY_SEED_KEY,
                           minimum=0)
  norm = validation.as_positive(config[CANARY_NORM_KEY], CANARY_NORM_KEY)
  key, arrays = _single(content.array_records, "ArrayRecord",
                        "message.content")
  layout = protocol_flower.ArrayLayout.of(arrays, "the model received")
  c = orthogonal_canaries.canary_block(seed, [canary_id], layout.dim)[0]
  reply = RecordDict({
      key: layout.add(arrays, norm * c.astype(np.float64)),
      "metrics": MetricRecord(dict(DEFAULT_METRICS if metrics is None
                                   else metrics))})
  return Message(reply, reply_to=message)


def canary_train(train: Optional[Callable] = None, *,
                 metrics: Optional[dict[str, Any]] = None):
  """Decorates a ClientApp's train function: a canary client's message is
  answered with `canary_reply(message, metrics)`, any other by `train`.

  Put it under `@app.train()`, so the app's mods wrap it unchanged:

      @app.train()
      @canary_train(metrics={"num-examples": 600})
      def train(msg, context): ...

  The reply's ArrayRecord has the received one's name and its MetricRecord
  is named "metrics" (Flower's templates): FedAvg refuses replies whose
  record names or metric keys differ, so `metrics` should have every key
  your clients report.
  """
  if metrics is not None:
    try:
      MetricRecord(dict(metrics))  # refused here, not in a round
    except (TypeError, ValueError) as error:
      raise TypeError(f"metrics must be a dict of the metrics the canary "
                      f"reports (a MetricRecord's: str -> int, float or "
                      f"their lists), got {validation.show(metrics)}: "
                      f"{error}") from None

  def decorate(fn: Callable) -> Callable:
    if not callable(fn):
      raise TypeError(f"train must be a ClientApp's train function, got "
                      f"{validation.show(fn)}.")

    @functools.wraps(fn)
    def wrapped(message: Message, context) -> Message:
      reply = canary_reply(message, metrics)
      return fn(message, context) if reply is None else reply

    return wrapped

  return decorate if train is None else decorate(train)


def check_strategy(strategy) -> Strategy:
  """`strategy` if canary clients can audit it: one of Flower's four DP
  strategies (`flower.SERVER_SIDE`, `flower.CLIENT_SIDE`, or a subclass)
  around FedAvg's aggregation; TypeError or ValueError naming it."""
  shown = validation.show(strategy)
  if isinstance(strategy, (CanaryClients, flower.ServerSideCanaries)):
    raise ValueError(f"strategy {shown} already inserts canaries; wrap the "
                     "DP strategy once.")
  if not isinstance(strategy, flower.SERVER_SIDE + flower.CLIENT_SIDE):
    raise TypeError(
        f"strategy must be one of Flower's DP strategies (flwr.serverapp."
        f"strategy.DifferentialPrivacy{{Server,Client}}Side{{Fixed,"
        f"Adaptive}}Clipping), got {shown} of type "
        f"{type(strategy).__module__}.{type(strategy).__name__}: without "
        "Flower's DP noise there is no release to audit.")
  inner = strategy.strategy
  if not (isinstance(inner, FedAvg)
          and type(inner).aggregate_train is FedAvg.aggregate_train):
    raise ValueError(
        f"strategy's inner strategy must aggregate as FedAvg does "
        f"(FedAvg.aggregate_train), got {validation.show(inner)}: a canary "
        "client's clipped update weighs C_t / n in a FedAvg mean, and "
        "another aggregation changes what one client contributes.")
  return strategy


class CanaryClients(Strategy):
  """Flower's DP strategy with canary clients among the sampled nodes
  (module docstring); `write_run` reads it as a `ServerSideCanaries`.

  Args:
    strategy: One of Flower's DP strategies around FedAvg
      (`check_strategy`), with or without its accountant.
    canaries: The `CanaryConfig` (orthogonal directions).
    canary_norm: The norm of a canary client's update (> 0), far above
      the clip (module docstring).
  """

  def __init__(self, strategy: Strategy,
               canaries: canary_config.CanaryConfig,
               canary_norm: float = DEFAULT_CANARY_NORM):
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
          "orthogonal canaries in NumPy.")
    self._canaries = canaries
    self._norm = validation.as_positive(canary_norm, "canary_norm")
    self._rounds = protocol_flower.CanaryRounds(canaries)
    self._layout: Optional[protocol_flower.ArrayLayout] = None
    self._rows: Optional[np.ndarray] = None
    self._sent: dict[int, tuple[np.ndarray, dict[int, int]]] = {}
    self._outcomes: list[dict[str, Any]] = []

  strategy = property(lambda self: self._dp, doc="The DP strategy wrapped.")
  canaries = property(lambda self: self._canaries)
  canary_norm = property(lambda self: self._norm)
  rounds = property(lambda self: self._rounds.rounds,
                    doc="Every released round's `RoundScores`.")
  skipped_rounds = property(lambda self: self._rounds.skipped_rounds)
  insertion = "clients"

  @property
  def dim(self) -> Optional[int]:
    return None if self._layout is None else self._layout.dim

  @property
  def outcomes(self) -> list[dict[str, Any]]:
    """One record per canary client and released round: `round_num` (the
    schedule's), `canary_id`, `node_id`, `norm`, `dp_clip` (C_t),
    `dp_clipped` (norm > C_t), `weight` (its share of the FedAvg mean) and
    the TFF records' `stages` (none measured), `zeroed`, `clipped`."""
    return list(self._outcomes)

  scores = flower.ServerSideCanaries.scores
  cosines = flower.ServerSideCanaries.cosines
  statistics = flower.ServerSideCanaries.statistics
  flat = flower.ServerSideCanaries.flat
  final_cosines = flower.ServerSideCanaries.final_cosines
  privacy_spent = flower.ServerSideCanaries.privacy_spent
  release_event = flower.ServerSideCanaries.release_event
  configure_evaluate = flower.ServerSideCanaries.configure_evaluate
  aggregate_evaluate = flower.ServerSideCanaries.aggregate_evaluate

  def dp_event(self):
    """One release as Flower claims it (`ServerSideCanaries.dp_event`),
    for either side's adaptive clipping too."""
    z = float(self._dp.noise_multiplier)
    if not isinstance(self._dp, ADAPTIVE):
      return dp_accounting.GaussianDpEvent(z)
    count = 2.0 * float(self._dp.clipped_count_stddev)
    if z == 0.0 or count == 0.0:
      return dp_accounting.GaussianDpEvent(0.0)
    return dp_accounting.ComposedDpEvent(
        [dp_accounting.GaussianDpEvent(z), dp_accounting.GaussianDpEvent(count)])

  def __repr__(self) -> str:
    return f"CanaryClients({self._dp!r})"

  def start(self, grid, initial_arrays, num_rounds: int = 3, *args, **kwargs):
    """`Strategy.start`, refusing a run shorter than the canary schedule."""
    num_rounds = validation.as_int(num_rounds, "num_rounds", minimum=1)
    if num_rounds < self._canaries.num_rounds:
      raise ValueError(
          f"num_rounds must be at least the canary schedule's "
          f"{self._canaries.num_rounds} rounds, got {num_rounds}: the "
          "schedule's later canaries would never enter the model.")
    return super().start(grid, initial_arrays, num_rounds, *args, **kwargs)

  def summary(self) -> None:
    log(INFO, "\t├──> Canary clients (tff-canary, orthogonal, norm %g):",
        self._norm)
    log(INFO, "\t│\t└── Candidates: %d (%d inserted), %d rounds, seed %d",
        self._canaries.num_canaries, int(self._canaries.inserted.sum()),
        self._canaries.num_rounds, self._canaries.seed)
    self._dp.summary()

  def configure_train(self, server_round, arrays, config, grid):
    """The DP strategy's messages, the round's canaries given to k_r of
    the sampled nodes (module docstring)."""
    server_round = validation.as_int(server_round, "server_round", minimum=1)
    if self._layout is None:
      layout = protocol_flower.ArrayLayout.of(arrays)
      try:
        self._rows = orthogonal_canaries.rows(
            self._canaries.seed, layout.dim, self._canaries.num_canaries)
      except ValueError as error:
        raise ValueError(f"canaries: {error}") from None
      self._layout = layout
    messages = list(self._dp.configure_train(server_round, arrays, config,
                                             grid))
    ids = self._rounds.inserted_in(server_round - 1)
    if ids.size > len(messages):
      raise ValueError(
          f"round {server_round} has {ids.size} inserted canaries scheduled "
          f"but the strategy sampled {len(messages)} nodes: canary clients "
          "replace sampled clients; sample more nodes (fraction_train, "
          "min_train_nodes) or insert fewer canaries a round.")
    nodes = sorted(range(len(messages)),
                   key=lambda i: messages[i].metadata.dst_node_id)
    rng = np.random.default_rng([self._canaries.seed, NODE_TAG, server_round])
    picked = rng.choice(len(nodes), size=ids.size, replace=False)
    assigned = {}
    for canary_id, slot in zip(ids.tolist(), picked.tolist()):
      message = messages[nodes[slot]]
      content = message.content
      key, record = _single(content.config_records, "ConfigRecord",
                            "the DP strategy's training message")
      mine = ConfigRecord(dict(record))
      mine[CANARY_ID_KEY] = int(canary_id)
      mine[CANARY_SEED_KEY] = int(self._canaries.seed)
      mine[CANARY_NORM_KEY] = float(self._norm)
      message.content = RecordDict(
          {k: (mine if k == key else v) for k, v in content.items()})
      assigned[int(message.metadata.dst_node_id)] = int(canary_id)
    self._sent = {server_round: (self._layout.flatten(arrays), assigned)}
    return messages

  def aggregate_train(self, server_round, replies):
    """Flower's DP aggregation, untouched, then every canary's score."""
    server_round = validation.as_int(server_round, "server_round", minimum=1)
    if server_round not in self._sent:
      raise ValueError(
          f"server_round {server_round} was not configured by this "
          "strategy's configure_train (the model sent is needed to score "
          "the release).")
    sent, assigned = self._sent.pop(server_round)
    replies = list(replies)
    clip = float(self._dp.clipping_norm)  # C_t: before Flower updates it
    answered = [r for r in replies if not r.has_error()]
    shares = protocol_flower.weight_shares(answered,
                                           self._dp.strategy.weighted_by_key)
    share_of = {int(r.metadata.src_node_id): float(s)
                for r, s in zip(answered, shares)}
    rng_state = protocol_flower.rng_fingerprint()  # read, not drawn
    arrays, metrics = self._dp.aggregate_train(server_round, replies)
    if arrays is None:
      self._rounds.skip(server_round)
      return arrays, metrics
    schedule_round = server_round - 1
    ids = self._rounds.inserted_in(schedule_round)
    canary_shares = [share_of.get(node, float("nan")) for node in assigned]
    if canary_shares and not np.allclose(shares, 1.0 / shares.size):
      log(WARNING, "Canary clients: round %d's replies weigh unequally "
          "(shares %.4g to %.4g; the canaries' %s): Flower's noise assumes "
          "1/n each (give canary_train the metrics your clients report).",
          server_round, shares.min(), shares.max(),
          np.round(canary_shares, 6).tolist())
    self._rounds.append(flower.released_round(
        self._dp, self._canaries.seed, self._rows, self._layout, server_round,
        sent, arrays, ids, clip, shares, rng_state))
    for (node, canary_id), share in zip(assigned.items(), canary_shares):
      self._outcomes.append(dict(
          round_num=schedule_round, canary_id=canary_id, node_id=node,
          norm=self._norm, dp_clip=clip, dp_clipped=bool(self._norm > clip),
          weight=share, stages=[], zeroed=False, clipped=False))
    return arrays, metrics


__all__ = ["CANARY_ID_KEY", "CANARY_NORM_KEY", "CANARY_SEED_KEY",
           "CanaryClients", "DEFAULT_CANARY_NORM", "canary_reply",
           "canary_train", "check_strategy"]
