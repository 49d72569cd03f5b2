"""When each inserted canary takes part in training: participation schedules.

docs/method/canaries.md: canaries take part the way real clients do. Three
schedules cover the paper's settings (Andrew et al., ICLR 2024, arXiv
2302.03098, Section 4), each drawing its rounds as its class says:
`ShuffledEpochs` (once per epoch), `FixedPresentations` (exactly r times) and
`PerRoundSampling` (in each round with probability q, as Poisson sampling of
clients).

`CyclicRounds` gives each canary one slot of a fixed cyclic order (every
`period` rounds, as the clients of a cyclic sampler). One more places every
canary on the same rounds, for mechanisms with noise correlated across
rounds (DP-FTRL's tree, matrix mechanisms):

  * `SharedRounds(num_rounds, rounds)`: each canary takes part in exactly
    `rounds`. With the worst-case pattern a* (`sensitivity.Sensitivity.
    as_schedule`) every canary faces the analytical epsilon itself
    (docs/method/matrix-mechanisms.md).

Rounds are numbered from 0: round r is the r-th call of the aggregation
process's `next`, which turns the model theta_r into theta_{r+1} (the method pages' round
t = r + 1). A schedule is a frozen description; `realize(seed, canary_ids)`
draws the events deterministically from the seed with NumPy's
`default_rng([seed, SCHEDULE_TAG])` and returns a frozen `Participation`, the
full list of (round, canary id) events known before training starts.
"""

from __future__ import annotations

import abc
import dataclasses

import numpy as np
import numpy.typing as npt

from tff_canary.stats import validation

# Fixed tags that make the NumPy streams of one seed independent of each other:
# default_rng([seed, tag]). Never change them: results are regenerated from
# (seed, tag).
SCHEDULE_TAG = 0x5C4ED
COIN_TAG = 0xC014
# The held-out canaries' schedules (`CanaryConfig.held_out_participation`):
# drawn like the inserted ones' from their own stream, never used to insert.
HELD_OUT_SCHEDULE_TAG = 0x4E1D0

# Where canaries take part with noise correlated across rounds: "random",
# as the clients do (a drawn round of each epoch), or "worst_case", every
# canary on the claimed noise's worst-case rounds (`SharedRounds`).
PLACEMENTS: tuple[str, ...] = ("random", "worst_case")

_MAX_SEED = 2**63 - 1


def as_seed(value, name: str = "seed") -> int:
  """A seed: an integer in [0, 2**63 - 1] (it becomes an int64 tensor)."""
  value = validation.as_int(value, name, minimum=0)
  if value > _MAX_SEED:
    raise ValueError(f"{name} must be at most 2**63 - 1, got {value}.")
  return value


@dataclasses.dataclass(frozen=True)
class Participation:
  """The realized schedule: every (round, canary id) event of a run.

  Attributes:
    num_rounds: The length of the schedule in rounds.
    events: int32 array of shape [n, 2]; row (round, canary id), sorted by
      round, then id. Read-only.
  """

  num_rounds: int
  events: np.ndarray

  def __post_init__(self):
    num_rounds = validation.as_int(self.num_rounds, "num_rounds", minimum=1)
    events = np.asarray(self.events)
    if events.size == 0:
      events = np.zeros((0, 2), np.int32)
    if events.ndim != 2 or events.shape[1] != 2:
      raise ValueError(f"events must have shape [n, 2], got {events.shape}.")
    if not np.issubdtype(events.dtype, np.integer):
      raise TypeError(f"events must be integers, got dtype {events.dtype}.")
    if events.size and (events.min() < 0 or events[:, 0].max() >= num_rounds):
      raise ValueError(
          f"events must have rounds in [0, {num_rounds}) and ids >= 0, got "
          f"rounds in [{events[:, 0].min()}, {events[:, 0].max()}] and ids in "
          f"[{events[:, 1].min()}, {events[:, 1].max()}].")
    if events.size and events.max() > np.iinfo(np.int32).max:
      raise ValueError("events must fit in int32.")
    order = np.lexsort((events[:, 1], events[:, 0]))
    events = np.ascontiguousarray(events[order], dtype=np.int32)
    if len(events) > 1:
      same = np.all(events[1:] == events[:-1], axis=1)
      if same.any():
        row = events[1:][np.flatnonzero(same)[0]]
        raise ValueError(f"events holds (round {row[0]}, canary {row[1]}) "
                         "twice.")
    events.setflags(write=False)
    self.__dict__.update(num_rounds=num_rounds, events=events)  # frozen

  @property
  def num_events(self) -> int:
    return int(self.events.shape[0])

  def counts(self, num_canaries: int) -> np.ndarray:
    """Participation count of each canary id in [0, num_canaries), int64."""
    num_canaries = validation.as_int(num_canaries, "num_canaries", minimum=0)
    if self.num_events and self.events[:, 1].max() >= num_canaries:
      raise ValueError(f"num_canaries = {num_canaries} is too small for canary "
                       f"id {self.events[:, 1].max()} in the schedule.")
    return np.bincount(self.events[:, 1], minlength=num_canaries).astype(
        np.int64)

  def per_round(self) -> np.ndarray:
    """Number of canaries taking part in each round, int64 [num_rounds]."""
    return np.bincount(self.events[:, 0], minlength=self.num_rounds).astype(
        np.int64)

  def outside(self, rounds: npt.ArrayLike) -> "Participation":
    """The events whose round is not in `rounds` (e.g. the recorded ones)."""
    return Participation(self.num_rounds,
                         self.events[~np.isin(self.events[:, 0], rounds)])

  def rounds_of(self, canary_id: int) -> np.ndarray:
    """The rounds (sorted) in which canary `canary_id` takes part."""
    canary_id = validation.as_int(canary_id, "canary_id", minimum=0)
    return self.events[self.events[:, 1] == canary_id, 0].copy()

  def canaries_in(self, round_num: int) -> np.ndarray:
    """The canary ids (sorted) taking part in round `round_num`."""
    round_num = validation.as_int(round_num, "round_num", minimum=0)
    return self.events[self.events[:, 0] == round_num, 1].copy()


class Schedule(abc.ABC):
  """A participation schedule: frozen, validated at construction."""

  num_rounds: int

  def realize(self, seed: int, canary_ids: npt.ArrayLike,
              tag: int = SCHEDULE_TAG) -> Participation:
    """Draws the events of the canaries `canary_ids` from `seed`.

    Deterministic: the same (schedule, seed, canary_ids) always gives the same
    events, on any machine (NumPy's PCG64 via `default_rng([seed, tag])`).

    Args:
      canary_ids: 1-D array of distinct nonnegative canary ids (the inserted
        ones).
      tag: The stream of `seed` (`SCHEDULE_TAG`; `HELD_OUT_SCHEDULE_TAG` for
        the held-out canaries' schedules).
    """
    seed = as_seed(seed)
    ids = np.asarray(canary_ids)
    if ids.size == 0:
      ids = np.zeros((0,), np.int64)
    if ids.ndim != 1 or not np.issubdtype(ids.dtype, np.integer):
      raise TypeError(f"canary_ids must be a 1-D integer array, got "
                      f"{ids.dtype} of shape {ids.shape}.")
    if ids.size and (ids.min() < 0 or len(np.unique(ids)) != ids.size):
      raise ValueError("canary_ids must be distinct and nonnegative.")
    rng = np.random.default_rng([seed, tag])
    # The canary matrix of rounds: row i belongs to ids[i].
    rounds = self._draw(rng, ids.size)
    events = [np.stack([r, np.full(r.shape, cid, np.int64)], axis=1)
              for cid, r in zip(ids.tolist(), rounds)]
    events = (np.concatenate(events) if events
              else np.zeros((0, 2), np.int64))
    return Participation(self.num_rounds, events)

  @abc.abstractmethod
  def _draw(self, rng: np.random.Generator, num_canaries: int
           ) -> list[np.ndarray]:
    """The rounds of each of `num_canaries` canaries, one array each."""

  @abc.abstractmethod
  def expected_participation(self) -> float:
    """Expected number of rounds in which one canary takes part."""


def _uniforms(rng: np.random.Generator, num_canaries: int, num_rounds: int):
  """Uniforms [num_canaries, num_rounds] from `rng`, in chunks of rows of at
  most 2^22 values (memory)."""
  chunk = max(1, (1 << 22) // num_rounds)
  for start in range(0, num_canaries, chunk):
    yield rng.random((min(chunk, num_canaries - start), num_rounds))


@dataclasses.dataclass(frozen=True)
class ShuffledEpochs(Schedule):
  """Each canary once per epoch, at a uniformly random round of the epoch.

  Epochs are the `num_rounds // rounds_per_epoch` consecutive blocks of
  `rounds_per_epoch` rounds from round 0; `ShuffledEpochs(500, 500)` is the
  paper's "one presentation" in a 500-round run. The remaining rounds at the
  end belong to no epoch and have no canaries (like a last, incomplete pass
  over the data that a real pipeline drops), unless `partial_last_epoch`:
  then they are the first rounds of one more epoch (as in a client sampler
  that keeps drawing from its next shuffle), whose round each canary draws
  uniformly from all `rounds_per_epoch` of it, taking part only if that round
  is inside the run (probability remainder / rounds_per_epoch).

  Attributes:
    num_rounds: Length of the run in rounds, >= 1.
    rounds_per_epoch: Rounds per epoch, >= 1; at most num_rounds unless
      `partial_last_epoch` (without it an epoch longer than the run is an
      error: no canary would take part).
    partial_last_epoch: Whether the remainder rounds form a partial epoch.
  """

  num_rounds: int
  rounds_per_epoch: int
  partial_last_epoch: bool = False

  def __post_init__(self):
    num_rounds = validation.as_int(self.num_rounds, "num_rounds", minimum=1)
    per_epoch = validation.as_int(self.rounds_per_epoch, "rounds_per_epoch",
                                  minimum=1)
    validation.as_bool(self.partial_last_epoch, "partial_last_epoch")
    if per_epoch > num_rounds and not self.partial_last_epoch:
      raise ValueError(f"rounds_per_epoch = {per_epoch} is longer than the run "
                       f"(num_rounds = {num_rounds}).")
    self.__dict__.update(num_rounds=num_rounds, rounds_per_epoch=per_epoch,
                         partial_last_epoch=bool(self.partial_last_epoch))

  @property
  def num_epochs(self) -> int:
    """Whole epochs in the run."""
    return self.num_rounds // self.rounds_per_epoch

  @property
  def remainder(self) -> int:
    """Rounds after the last whole epoch."""
    return self.num_rounds - self.num_epochs * self.rounds_per_epoch

  def expected_participation(self) -> float:
    if self.partial_last_epoch:
      return self.num_rounds / self.rounds_per_epoch
    return float(self.num_epochs)

  def _draw(self, rng, num_canaries):
    epochs = self.num_epochs + int(self.partial_last_epoch
                                   and self.remainder > 0)
    offsets = rng.integers(0, self.rounds_per_epoch,
                           size=(num_canaries, epochs))
    rounds = offsets + np.arange(epochs) * self.rounds_per_epoch
    return [row[row < self.num_rounds] for row in rounds]


@dataclasses.dataclass(frozen=True)
class FixedPresentations(Schedule):
  """Each canary exactly `presentations` times, at distinct uniform rounds.

  Attributes:
    num_rounds: Length of the run in rounds, >= 1.
    presentations: r, in [0, num_rounds] (more presentations than rounds is an
      error: the rounds are distinct).
  """

  num_rounds: int
  presentations: int

  def __post_init__(self):
    num_rounds = validation.as_int(self.num_rounds, "num_rounds", minimum=1)
    presentations = validation.as_int(self.presentations, "presentations",
                                      minimum=0)
    if presentations > num_rounds:
      raise ValueError(f"presentations = {presentations} exceeds num_rounds = "
                       f"{num_rounds}: a canary takes part at most once per "
                       "round.")
    self.__dict__.update(num_rounds=num_rounds, presentations=presentations)

  def expected_participation(self) -> float:
    return float(self.presentations)

  def _draw(self, rng, num_canaries):
    # One uniformly random r-subset per canary: the first r of a permutation
    # (argsort of uniforms gives a uniform permutation, vectorized).
    return [row for keys in _uniforms(rng, num_canaries, self.num_rounds)
            for row in np.sort(np.argsort(keys, axis=1)[:, :self.presentations],
                               axis=1)]


@dataclasses.dataclass(frozen=True)
class PerRoundSampling(Schedule):
  """Each canary in each round independently with `probability`.

  Attributes:
    num_rounds: Length of the run in rounds, >= 1.
    probability: q in [0, 1].
  """

  num_rounds: int
  probability: float

  def __post_init__(self):
    num_rounds = validation.as_int(self.num_rounds, "num_rounds", minimum=1)
    probability = validation.as_unit_interval(self.probability, "probability")
    self.__dict__.update(num_rounds=num_rounds, probability=probability)

  def expected_participation(self) -> float:
    return self.probability * self.num_rounds

  def _draw(self, rng, num_canaries):
    return [np.flatnonzero(row)
            for keys in _uniforms(rng, num_canaries, self.num_rounds)
            for row in keys < self.probability]


@dataclasses.dataclass(frozen=True)
class CyclicRounds(Schedule):
  """Each canary in rounds g, g + period, g + 2 period, ... for its own g.

  A cyclic client sampler's participation: the clients in a fixed order,
  the same in every epoch of `period` rounds, so any two of a client's
  rounds are exactly `period` apart (McMahan, Xu & Zhang 2024, arXiv
  2408.08868: at most k participations, at least b rounds apart). Each
  canary's slot g is uniform in [0, period); a canary in a slot past the
  last epoch's rounds takes part once fewer, as a client there does.

  Attributes:
    num_rounds: Length of the run in rounds, >= 1.
    period: Rounds between a canary's participations (the epoch), >= 1.
  """

  num_rounds: int
  period: int

  def __post_init__(self):
    self.__dict__.update(
        num_rounds=validation.as_int(self.num_rounds, "num_rounds",
                                     minimum=1),
        period=validation.as_int(self.period, "period", minimum=1))

  def expected_participation(self) -> float:
    return self.num_rounds / self.period

  def _draw(self, rng, num_canaries):
    slots = rng.integers(0, self.period, size=num_canaries)
    return [np.arange(g, self.num_rounds, self.period, dtype=np.int64)
            for g in slots.tolist()]


@dataclasses.dataclass(frozen=True)
class SharedRounds(Schedule):
  """Every canary in the same rounds: the worst-case placement.

  With noise correlated across rounds a canary on pattern a has GLS
  statistic N(mu_a, 1), mu_a = sqrt(a^T K^-1 a) / z
  (`gls_statistics.schedule_mu`), and the accounting's mu is the largest
  mu_a over the patterns the participation rule allows. With `rounds` that
  maximizing pattern a* (one participation per epoch with restarts:
  `LinearNoise.worst_case_rounds`; k participations b apart:
  `sensitivity.toeplitz_sensitivity`; both as `Sensitivity.as_schedule`),
  every canary, inserted and held-out alike (nothing is drawn, so the
  held-out stream gives the same rounds), faces the analytical mu itself,
  and the scheduled estimate targets the analytical epsilon. The model pays:
  those rounds carry every inserted canary and the others none
  (docs/method/matrix-mechanisms.md).

  Attributes:
    num_rounds: Length of the run in rounds, >= 1.
    rounds: the rounds, distinct, in [0, num_rounds); stored sorted as a
      tuple of ints.
  """

  num_rounds: int
  rounds: tuple[int, ...]

  def __post_init__(self):
    num_rounds = validation.as_int(self.num_rounds, "num_rounds", minimum=1)
    rounds = np.asarray(self.rounds)
    if (rounds.ndim != 1 or rounds.size == 0
        or not np.issubdtype(rounds.dtype, np.integer)):
      raise ValueError(f"rounds must be a nonempty sequence of round numbers, "
                       f"got {validation.show(self.rounds)}.")
    bad = np.flatnonzero((rounds < 0) | (rounds >= num_rounds))
    if bad.size:
      raise ValueError(f"rounds must lie in [0, {num_rounds}), but rounds"
                       f"[{int(bad[0])}] = {int(rounds[bad[0]])}.")
    if np.unique(rounds).size != rounds.size:
      raise ValueError(f"rounds must be distinct, got "
                       f"{validation.show(self.rounds)}.")
    self.__dict__.update(num_rounds=num_rounds,
                         rounds=tuple(sorted(int(r) for r in rounds)))

  def expected_participation(self) -> float:
    return float(len(self.rounds))

  def _draw(self, rng, num_canaries):
    del rng  # nothing is drawn
    return [np.asarray(self.rounds, np.int64)] * num_canaries
