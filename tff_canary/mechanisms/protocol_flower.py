"""What every Flower half shares: a model's arrays as one vector, and round scores.

The Flower halves of the mechanisms (`tff_canary.mechanisms.gaussian.flower`
first; issue 36) audit Flower's message API (flwr 1.42, `flwr.serverapp`),
whose models travel as an `ArrayRecord`: named NumPy arrays in insertion
order. This module holds what they share, as `protocol_tff` does for TFF:

  * `ArrayLayout`: the record's arrays as ONE flat vector of d = sum of
    their sizes, in the record's key order, each array in C order (the
    coordinates an orthogonal canary lives on, as `flat_layout` orders a
    TFF model's tensors), and the way back (`add`: a flat vector added to
    every array, cast to its dtype, as Flower adds its noise);
  * `round_cosines`: each canary's cosine with a round's released update,
    the round's other inserted canaries removed exactly (Andrew et al.,
    "One-shot Empirical Privacy Estimation for Federated Learning", ICLR
    2024; docs/method/orthogonal-canaries.md, "Scores in the round"), the
    NumPy twin of the TFF half's `round_scores.cosines`;
  * `RoundScores` (one round's scores, kept in memory) and `CanaryRounds`
    (every round's, and the running statistics the TFF aggregator keeps in
    its state: `round_scores.CanaryScores`' max over rounds and sums over
    each canary's schedule);
  * `rng_fingerprint` and `repeated_states`: Flower draws its DP noise
    from NumPy's global RNG (`np.random.normal`), so the noise of a round
    is a function of that RNG's state before it: a fingerprint of the
    state read (never drawn from) before each round's noise shows rounds
    whose noise was the same draw;
  * `reply` and `MODEL_SENDER`: a hand-built training reply, for the
    self-tests that drive a user's strategy in-process (no Grid, no
    TaskIdentity).

NumPy only beside `flwr.app`'s records; the orthogonal transform is
`tff_canary.stats.canaries.orthogonal_canaries` (float32, as TFF's).
"""

from __future__ import annotations

import dataclasses
import hashlib
from typing import NamedTuple, Optional

import numpy as np
from flwr.app import Array, ArrayRecord, DEFAULT_TTL, Message, MessageType
from flwr.app import Metadata, MetricRecord, RecordDict

from tff_canary.stats import validation
from tff_canary.stats.canaries import canary_config
from tff_canary.stats.canaries import orthogonal_canaries

# Below every cosine: the max of no round (as `round_scores.NO_MAX`).
NO_MAX = -2.0


@dataclasses.dataclass(frozen=True)
class ArrayLayout:
  """The arrays of a model's `ArrayRecord` as one flat vector.

  Attributes:
    keys: The arrays' names, in the record's order.
    shapes: Their shapes.
    dtypes: Their dtypes (floating point: canaries and noise are added).
  """

  keys: tuple[str, ...]
  shapes: tuple[tuple[int, ...], ...]
  dtypes: tuple[np.dtype, ...]

  @classmethod
  def of(cls, record, name: str = "arrays") -> ArrayLayout:
    """The layout of `record` (an `ArrayRecord`; `name` names it in a
    refusal): floating-point arrays of d >= 2 elements in all."""
    if not isinstance(record, ArrayRecord):
      raise TypeError(f"{name} must be a flwr.app.ArrayRecord, got "
                      f"{validation.show(record)}.")
    arrays = record.to_numpy_ndarrays()
    for key, array in zip(record.keys(), arrays):
      if not np.issubdtype(array.dtype, np.floating):
        raise ValueError(
            f"{name}[{key!r}] has dtype {array.dtype}: canaries and Flower's "
            "noise are added to every array of the model, which needs "
            "floating-point arrays.")
    layout = cls(tuple(record.keys()), tuple(a.shape for a in arrays),
                 tuple(a.dtype for a in arrays))
    validation.as_dim(layout.dim, f"the number of parameters in {name}")
    return layout

  @property
  def dim(self) -> int:
    """d, the number of parameters."""
    return int(sum(int(np.prod(s, dtype=np.int64)) for s in self.shapes))

  def check(self, record, name: str) -> list[np.ndarray]:
    """`record`'s arrays, refused unless it has this layout's names and
    shapes (a dtype may differ: the aggregate's follows NumPy's rules)."""
    if not isinstance(record, ArrayRecord):
      raise TypeError(f"{name} must be a flwr.app.ArrayRecord, got "
                      f"{validation.show(record)}.")
    arrays = record.to_numpy_ndarrays()
    found = (tuple(record.keys()), tuple(a.shape for a in arrays))
    if found != (self.keys, self.shapes):
      raise ValueError(
          f"{name} has arrays {list(zip(*found))}, but the model sent to the "
          f"clients had {list(zip(self.keys, self.shapes))}: the canaries' "
          "coordinates need the same arrays in the same order every round.")
    return arrays

  def flatten(self, record, name: str = "arrays") -> np.ndarray:
    """`record`'s arrays as one float64 vector [d] (class docstring)."""
    arrays = self.check(record, name)
    if not arrays:
      return np.zeros(0, np.float64)
    return np.concatenate([np.asarray(a, np.float64).reshape(-1)
                           for a in arrays])

  def add(self, record, flat: np.ndarray, name: str = "arrays"
          ) -> ArrayRecord:
    """A new `ArrayRecord`: `record`'s arrays plus the pieces of the flat
    vector `flat` [d], each piece cast to its array's dtype first (as
    Flower's `add_gaussian_noise_inplace` casts its noise)."""
    arrays = self.check(record, name)
    out, start = {}, 0
    for key, array in zip(self.keys, arrays):
      piece = flat[start:start + array.size].reshape(array.shape)
      start += array.size
      out[key] = Array(np.asarray(array + piece.astype(array.dtype)))
    return ArrayRecord(out)


def round_cosines(scores: np.ndarray, norm2: float,
                  removed_ids: np.ndarray) -> np.ndarray:
  """x_j = cos(c_j, a without the canaries `removed_ids`), float64 [m].

  `scores` are s_j = <c_j, a> for every canary, `norm2` = |a|^2, and
  `removed_ids` the round's inserted canaries, whose projections are
  removed exactly (orthonormal canaries):
  |a - sum_{i in I, i != j} s_i c_i|^2 = |a|^2 - sum_{i in I} s_i^2
  + [j in I] s_j^2. No residual (an aggregate that is exactly its
  canaries, up to rounding) means no direction: cosine 0.
  """
  s = np.asarray(scores, np.float64)
  removed = np.zeros(s.shape, np.float64)
  removed[np.asarray(removed_ids, np.int64)] = 1.0  # an id twice: once
  s2 = s * s
  residual2 = float(norm2) - np.sum(removed * s2) + removed * s2
  safe = np.where(residual2 > 0.0, residual2, 1.0)
  return np.where(residual2 > 0.0, s / np.sqrt(safe), 0.0)


@dataclasses.dataclass(frozen=True)
class RoundScores:
  """One released round's canaries and scores.

  Attributes:
    server_round: Flower's round number (from 1).
    schedule_round: r, the canary schedule's round (from 0): server_round - 1.
    clip: C_t, the clip the round's client updates were clipped to.
    scale: C_t / n, what each inserted canary adds to the released
      aggregate (n: the DP strategy's `num_sampled_clients`).
    noise_std: The std of the noise Flower added to each coordinate that
      round, z C / n, with the z and C it used (module docstring of the
      mechanism's Flower half: with adaptive clipping not C_t).
    inserted_ids: int64 [k_r], the canaries inserted.
    num_replies: The replies aggregated (n when every sampled client
      answered).
    max_weight: The largest share of one reply in the aggregate (1 / n
      with equal weights and n replies).
    scores: float64 [m], s_j = <c_j, a_t> for every canary, inserted and
      held out, a_t the released model minus the model sent.
    cosines: float64 [m], x_j = cos(c_j, a_t) with the round's other
      inserted canaries removed (`round_cosines`).
    noise_multiplier: The z Flower's noise used that round (adaptive
      clipping: the values' share of the user's z); NaN if not recorded.
    noise_clip: The C Flower's noise used that round (adaptive: C_{t+1});
      NaN if not recorded. noise_std = noise_multiplier x noise_clip / n.
    rng_state: `rng_fingerprint()` of NumPy's global RNG before the DP
      strategy's aggregation ("" if not recorded).
  """

  server_round: int
  schedule_round: int
  clip: float
  scale: float
  noise_std: float
  inserted_ids: np.ndarray
  num_replies: int
  max_weight: float
  scores: np.ndarray
  cosines: np.ndarray
  noise_multiplier: float = float("nan")
  noise_clip: float = float("nan")
  rng_state: str = ""


class CanaryStatistics(NamedTuple):
  """The running statistics of every canary (NumPy, as the TFF aggregator's
  `round_scores.CanaryScores` in its state).

  Attributes:
    max_cosine: float64 [m], max of x_{j,r} over the scored rounds.
    max_round: int32 [m], the schedule round of that max (-1: none).
    scheduled_sum: float64 [m], sum of x_{j,r} over the scored rounds of
      canary j's schedule (inserted or held out).
    scheduled_rounds: int32 [m], how many rounds that was.
    rounds_scored: The rounds scored.
  """

  max_cosine: np.ndarray
  max_round: np.ndarray
  scheduled_sum: np.ndarray
  scheduled_rounds: np.ndarray
  rounds_scored: int


class CanaryRounds:
  """Every released round's `RoundScores` of one run's `CanaryConfig`."""

  def __init__(self, canaries: canary_config.CanaryConfig):
    self._canaries = canaries
    self._inserted = np.asarray(canaries.participation.events, np.int64)
    self._scheduled = np.asarray(canaries.scheduled_events(), np.int64)
    self._rounds: list[RoundScores] = []
    self._skipped: list[int] = []

  def inserted_in(self, schedule_round: int) -> np.ndarray:
    """The inserted canaries' ids scheduled in round r (none past the
    schedule, as in TFF)."""
    return self._inserted[self._inserted[:, 0] == schedule_round, 1]

  def scheduled_in(self, schedule_round: int) -> np.ndarray:
    """Every canary scheduled in round r (inserted and held out)."""
    return self._scheduled[self._scheduled[:, 0] == schedule_round, 1]

  def append(self, scores: RoundScores) -> None:
    self._rounds.append(scores)

  def skip(self, server_round: int) -> None:
    """A round without a release (Flower's aggregation returned None):
    no canary entered it and nothing was scored."""
    self._skipped.append(int(server_round))

  @property
  def rounds(self) -> tuple[RoundScores, ...]:
    return tuple(self._rounds)

  @property
  def skipped_rounds(self) -> tuple[int, ...]:
    """Flower's numbers of the rounds without a release."""
    return tuple(self._skipped)

  def matrix(self, what: str = "scores") -> np.ndarray:
    """float64 [rounds, m]: every scored round's `scores` or `cosines`."""
    what = validation.as_choice(what, "what", ("scores", "cosines"))
    m = self._canaries.num_canaries
    if not self._rounds:
      return np.zeros((0, m), np.float64)
    return np.stack([getattr(r, what) for r in self._rounds])

  def statistics(self) -> CanaryStatistics:
    """The running statistics after the scored rounds (`CanaryStatistics`;
    ties keep the earlier round, as the TFF state's strict `>`)."""
    m = self._canaries.num_canaries
    max_cosine = np.full(m, NO_MAX, np.float64)
    max_round = np.full(m, -1, np.int32)
    scheduled_sum = np.zeros(m, np.float64)
    scheduled_rounds = np.zeros(m, np.int32)
    for r in self._rounds:
      better = r.cosines > max_cosine
      max_cosine = np.where(better, r.cosines, max_cosine)
      max_round = np.where(better, np.int32(r.schedule_round), max_round)
      in_schedule = np.zeros(m, bool)
      in_schedule[self.scheduled_in(r.schedule_round)] = True
      scheduled_sum += np.where(in_schedule, r.cosines, 0.0)
      scheduled_rounds += in_schedule.astype(np.int32)
    return CanaryStatistics(max_cosine, max_round, scheduled_sum,
                            scheduled_rounds, len(self._rounds))


def score(seed: int, update: np.ndarray, rows: np.ndarray,
          inserted_ids: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
  """(s, x) of a released update a [d]: s_j = <c_j, a> for every canary
  (one forward transform, R a at the canaries' `rows`) and the cosines
  `round_cosines` with the round's `inserted_ids` removed."""
  update = np.asarray(update, np.float64)
  s = orthogonal_canaries.scores(seed, update, update.size,
                                 rows).astype(np.float64)
  return s, round_cosines(s, float(update @ update), inserted_ids)


def weight_shares(replies, weighted_by_key: Optional[str]) -> np.ndarray:
  """Each reply's share of the FedAvg mean: its MetricRecord's
  `weighted_by_key` over their sum, as Flower's `aggregate_arrayrecords`
  weighs them (replies with an error are not aggregated and left out)."""
  weights = []
  for reply in replies:
    if reply.has_error():
      continue
    metrics = next(iter(reply.content.metric_records.values()), None)
    value = None if metrics is None else metrics.get(weighted_by_key)
    weights.append(float(value) if isinstance(value, (int, float)) else
                   float("nan"))
  weights = np.asarray(weights, np.float64)
  return weights / weights.sum() if weights.size else weights


def rng_fingerprint() -> str:
  """A SHA-256 of NumPy's global RNG state (`np.random.get_state()`: the
  generator's name, key, position and cached Gaussian), read without drawing
  from it: two equal fingerprints mean the next draws are the same numbers."""
  name, key, pos, has_gauss, cached = np.random.get_state(legacy=True)
  digest = hashlib.sha256(name.encode())
  digest.update(np.ascontiguousarray(key, np.uint32).tobytes())
  digest.update(np.asarray([pos, has_gauss], np.int64).tobytes())
  digest.update(np.asarray([cached], np.float64).tobytes())
  return digest.hexdigest()


def repeated_states(fingerprints) -> list[tuple[int, int]]:
  """(earlier, later) index pairs of equal non-empty fingerprints, each
  later index paired with the first index that had its fingerprint."""
  first: dict[str, int] = {}
  pairs = []
  for i, fingerprint in enumerate(fingerprints):
    if not fingerprint:
      continue
    if fingerprint in first:
      pairs.append((first[fingerprint], i))
    else:
      first[fingerprint] = i
  return pairs


# The node id a hand-built reply is addressed to (the server's, as Flower's
# ServerApp process has it: TaskIdentity.node_id 0).
MODEL_SENDER = 0


def reply(arrays: ArrayRecord, node_id: int, server_round: int,
          weight: float = 1.0, arrays_key: str = "arrays",
          weighted_by_key: str = "num-examples") -> Message:
  """A training reply from node `node_id`, as a ClientApp's would arrive:
  `arrays` under `arrays_key` and FedAvg's weight in one MetricRecord. Built
  with its `Metadata` (flwr.app's), so it needs no Grid or TaskIdentity."""
  content = RecordDict({arrays_key: arrays,
                        "metrics": MetricRecord({weighted_by_key: weight})})
  metadata = Metadata(
      run_id=0, message_id=f"{server_round}-{node_id}",
      src_node_id=int(node_id), dst_node_id=MODEL_SENDER,
      reply_to_message_id="", group_id=str(server_round), created_at=0.0,
      ttl=DEFAULT_TTL, message_type=MessageType.TRAIN)
  return Message(content, metadata=metadata)


__all__ = ["ArrayLayout", "CanaryRounds", "CanaryStatistics", "MODEL_SENDER",
           "NO_MAX", "RoundScores", "repeated_states", "reply",
           "rng_fingerprint", "round_cosines", "score", "weight_shares"]
