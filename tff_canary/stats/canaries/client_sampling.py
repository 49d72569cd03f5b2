"""The experiments' client sampler, and the canary schedule derived from it.

docs/method/canaries.md: canaries take part the way real clients do. The experiments sample
clients with `ClientSampler`, a function of (seed, round):

  * "shuffle": epochs of `rounds_per_epoch = num_clients // clients_per_round`
    rounds, each a fresh permutation of the clients cut into rounds of
    `clients_per_round` (the `num_clients % clients_per_round` clients at the
    end of a permutation sit that epoch out);
  * "cyclic": the same epochs in one fixed order (the seed's first
    permutation, repeated), so a client's rounds are exactly
    `rounds_per_epoch` apart: the participation rule of production BLT
    DP-FTRL (at most k times, at least b rounds apart; McMahan, Xu & Zhang
    2024, arXiv 2408.08868), under which a matrix mechanism needs no
    restart;
  * "per_round": Poisson sampling, each client in each round independently
    with probability q = clients_per_round / num_clients.

`canary_schedule` derives the canaries' schedule from the same sampler, and
`participation_summary` records client and canary participation side by side.
"""

from __future__ import annotations

import dataclasses
import functools
import typing
from typing import Any, Literal, Optional

import numpy as np

from tff_canary.stats.canaries import schedules
from tff_canary.stats import validation

Sampling = Literal["shuffle", "cyclic", "per_round"]  # module docstring
SAMPLINGS = typing.get_args(Sampling)
EPOCH_SAMPLINGS = ("shuffle", "cyclic")  # once per epoch of rounds_per_epoch
_CLIENT_TAG = 0xC11E
_MISMATCH_FLAG = "--allow_participation_mismatch"


@dataclasses.dataclass(frozen=True)
class ClientSampler:
  """Which clients take part in each round (module docstring).

  Attributes:
    num_clients: Clients in the population, >= 1.
    clients_per_round: Clients per round (the expected number with
      "per_round"), in [1, num_clients]: a rate above 1 is refused here,
      before any training.
    sampling: "shuffle", "cyclic" or "per_round".
    seed: Seed of the sampling, >= 0.
  """

  num_clients: int
  clients_per_round: int
  sampling: Sampling = "shuffle"
  seed: int = 0

  def __post_init__(self):
    num_clients = validation.as_int(self.num_clients, "num_clients", minimum=1)
    per_round = validation.as_int(self.clients_per_round, "clients_per_round",
                                  minimum=1)
    if per_round > num_clients:
      raise ValueError(
          f"clients_per_round = {per_round} exceeds num_clients = "
          f"{num_clients}: the per-round sampling rate clients_per_round / "
          f"num_clients would be {per_round / num_clients:.4g} > 1. Use at "
          "most as many clients per round as there are clients.")
    self.__dict__.update(  # frozen: past the dataclass's __setattr__
        num_clients=num_clients, clients_per_round=per_round,
        sampling=validation.as_choice(self.sampling, "sampling", SAMPLINGS),
        seed=validation.as_int(self.seed, "seed", minimum=0))

  @property
  def rounds_per_epoch(self) -> int:
    """num_clients // clients_per_round: rounds of one epoch."""
    return self.num_clients // self.clients_per_round

  @property
  def rate(self) -> float:
    """q = clients_per_round / num_clients: a client's chance per round."""
    return self.clients_per_round / self.num_clients

  def clients(self, round_num: int) -> np.ndarray:
    """Indices of the clients of `round_num` (0-based), sorted for Poisson."""
    round_num = validation.as_int(round_num, "round_num", minimum=0)
    if self.sampling in EPOCH_SAMPLINGS:
      epoch, index = divmod(round_num, self.rounds_per_epoch)
      order = _epoch_order(self.seed,
                           epoch if self.sampling == "shuffle" else 0,
                           self.num_clients)
      return order[index * self.clients_per_round:
                   (index + 1) * self.clients_per_round]
    rng = np.random.default_rng([self.seed, _CLIENT_TAG, round_num])
    count = rng.binomial(self.num_clients, self.rate)
    return np.sort(rng.choice(self.num_clients, size=count, replace=False))

  def counts(self, num_rounds: int) -> np.ndarray:
    """Participation count of every client over rounds 0..num_rounds-1."""
    num_rounds = validation.as_int(num_rounds, "num_rounds", minimum=1)
    counts = np.zeros(self.num_clients, np.int64)
    for round_num in range(num_rounds):
      counts[self.clients(round_num)] += 1
    return counts

  def whole_epochs(self, num_rounds: int) -> int:
    """Whole epochs in `num_rounds` rounds."""
    return num_rounds // self.rounds_per_epoch

  def expected_participation(self, num_rounds: int) -> float:
    """A client's expected participations in `num_rounds` rounds: R q."""
    return num_rounds * self.rate


@functools.lru_cache(maxsize=4)
def _epoch_order(seed: int, epoch: int, num_clients: int) -> np.ndarray:
  order = np.random.default_rng([seed, _CLIENT_TAG, epoch]).permutation(
      num_clients)
  order.setflags(write=False)
  return order


def participation_mismatch(sampler: ClientSampler, num_rounds: int,
                           presentations: Optional[int]) -> Optional[str]:
  """Why `presentations` contradicts the sampler, or None if it does not.

  None (presentations unset) never contradicts: the canaries then take part
  as the sampler makes clients take part. With "shuffle" or "cyclic",
  `presentations` must equal the clients' whole epochs, num_rounds // rounds_per_epoch; with
  "per_round", a client's expected participations num_rounds * q.
  """
  if presentations is None:
    return None
  presentations = validation.as_int(presentations, "presentations", minimum=1)
  num_rounds = validation.as_int(num_rounds, "num_rounds", minimum=1)
  if sampler.sampling in EPOCH_SAMPLINGS:
    epochs = sampler.whole_epochs(num_rounds)
    if presentations == epochs:
      return None
    return (f"presentations = {presentations} contradicts the client sampler: "
            f"clients take part once per epoch of {sampler.rounds_per_epoch} "
            f"rounds (num_clients // clients_per_round = "
            f"{sampler.num_clients} // {sampler.clients_per_round}), which is "
            f"{epochs} whole epochs in {num_rounds} rounds, so canaries that "
            f"take part as clients do take part {epochs} times.")
  expected = sampler.expected_participation(num_rounds)
  if abs(expected - presentations) <= 1e-9 * presentations:
    return None
  return (f"presentations = {presentations} contradicts the client sampler: "
          f"with per_round sampling each client takes part in each round with "
          f"probability clients_per_round / num_clients = "
          f"{sampler.clients_per_round} / {sampler.num_clients}, "
          f"{expected:.4g} times in expectation over {num_rounds} rounds, and "
          "canaries are sampled at the same rate.")


def canary_schedule(sampler: ClientSampler, num_rounds: int,
                    presentations: Optional[int] = None, *,
                    allow_mismatch: bool = False) -> schedules.Schedule:
  """The canaries' schedule: the clients' participation (docs/method/canaries.md).

  Args:
    presentations: None (derive everything from the sampler), or the number
      of participations asked for; it must agree with the sampler
      (`participation_mismatch`) unless `allow_mismatch`.
    allow_mismatch: Accept a contradicting `presentations`: each canary then
      takes part exactly `presentations` times, once in each of
      `presentations` shuffled epochs of num_rounds // presentations rounds,
      whatever the clients do.

  Returns:
    "shuffle": `ShuffledEpochs(num_rounds, sampler.rounds_per_epoch,
    partial_last_epoch=True)`; "cyclic": `CyclicRounds(num_rounds,
    sampler.rounds_per_epoch)`; "per_round": `PerRoundSampling(num_rounds,
    sampler.rate)`; a mismatch allowed: `ShuffledEpochs(num_rounds,
    num_rounds // presentations)`.

  Raises:
    ValueError: a mismatch not allowed (the message says what the clients do
      and how to ask for the mismatch), or more presentations than rounds.
  """
  if not isinstance(sampler, ClientSampler):
    raise TypeError(f"sampler must be a ClientSampler, got {sampler!r}.")
  num_rounds = validation.as_int(num_rounds, "num_rounds", minimum=1)
  validation.as_bool(allow_mismatch, "allow_mismatch")
  mismatch = participation_mismatch(sampler, num_rounds, presentations)
  if mismatch is None:
    if sampler.sampling == "shuffle":
      return schedules.ShuffledEpochs(num_rounds, sampler.rounds_per_epoch,
                                      partial_last_epoch=True)
    if sampler.sampling == "cyclic":
      return schedules.CyclicRounds(num_rounds, sampler.rounds_per_epoch)
    return schedules.PerRoundSampling(num_rounds, sampler.rate)
  if not allow_mismatch:
    raise ValueError(
        f"{mismatch} Canaries must take part the way clients do (docs/method/canaries.md): "
        f"leave presentations unset to derive it, or pass {_MISMATCH_FLAG} "
        "to insert the canaries differently on purpose.")
  if presentations > num_rounds:
    raise ValueError(f"presentations = {presentations} exceeds num_rounds = "
                     f"{num_rounds}: a canary takes part at most once per "
                     "round.")
  return schedules.ShuffledEpochs(num_rounds, num_rounds // presentations)


def _count_stats(counts: np.ndarray) -> dict[str, Any]:
  counts = np.asarray(counts, np.int64)
  if counts.size == 0:
    return dict(count=0, min=None, max=None, mean=None)
  return dict(count=int(counts.size), min=int(counts.min()),
              max=int(counts.max()), mean=float(counts.mean()))


def participation_summary(sampler: ClientSampler, num_rounds: int,
                          canary_counts: np.ndarray,
                          schedule: schedules.Schedule, *,
                          client_counts: Optional[np.ndarray] = None,
                          mismatch: Optional[str] = None) -> dict[str, Any]:
  """Client and canary participation side by side (JSON-ready).

  Args:
    canary_counts: Participation count of each inserted canary.
    client_counts: `sampler.counts(num_rounds)` if the caller has it already
      (it is computed otherwise).
    mismatch: `participation_mismatch`'s text when a mismatch was allowed.

  Returns:
    {"sampling", "num_rounds", "rate", "rounds_per_epoch", "epochs",
    "clients": {count, min, max, mean}, "canaries": {count, min, max, mean,
    "schedule"}, "mismatch"}: `epochs` is num_rounds / rounds_per_epoch for
    "shuffle" and "cyclic" (None for "per_round"), `mismatch` None when the canaries take
    part as the clients do.
  """
  shuffle = sampler.sampling in EPOCH_SAMPLINGS
  if client_counts is None:
    client_counts = sampler.counts(num_rounds)
  client_counts = validation.as_sample(client_counts, "client_counts",
                                       min_size=0, lower=0)
  if client_counts.size != sampler.num_clients:
    raise ValueError(f"client_counts must have one count per client "
                     f"({sampler.num_clients}), got {client_counts.size}.")
  canaries = _count_stats(canary_counts)
  canaries["schedule"] = repr(schedule)
  return dict(
      sampling=sampler.sampling, num_rounds=int(num_rounds), rate=sampler.rate,
      rounds_per_epoch=sampler.rounds_per_epoch if shuffle else None,
      epochs=num_rounds / sampler.rounds_per_epoch if shuffle else None,
      clients=_count_stats(client_counts), canaries=canaries,
      mismatch=mismatch)


def _times(stats: dict[str, Any], note: Optional[str]) -> str:
  """"15 times each (note)" or "12-15 times (mean 14.7; note)"."""
  if not stats.get("count"):
    return "none"
  low, high = stats["min"], stats["max"]
  notes = [] if note is None else [note]
  if low == high:
    text = f"{low} time{'' if low == 1 else 's'} each"
  else:
    text = f"{low}-{high} times"
    notes.insert(0, f"mean {stats['mean']:.4g}")
  return f"{text} ({'; '.join(notes)})" if notes else text


def describe(summary: dict[str, Any]) -> str:
  """One line, e.g. "clients took part 12-15 times (mean 14.7; 15 epochs of
  33 rounds), canaries 15 times each (once per epoch)", with a prominent
  prefix and the reason for an allowed mismatch."""
  if summary["sampling"] in EPOCH_SAMPLINGS:
    epochs = summary["epochs"]
    count = (f"{int(epochs)}" if float(epochs).is_integer()
             else f"{epochs:.4g}")
    how = (f"{count} epoch{'' if epochs == 1 else 's'} of "
           f"{summary['rounds_per_epoch']} rounds")
    if summary["sampling"] == "cyclic":
      how += " in one fixed order"
    same = "once per epoch" if summary["mismatch"] is None else None
  else:
    how = f"Poisson sampling at rate {summary['rate']:.4g} per round"
    same = "the same rate" if summary["mismatch"] is None else None
  line = (f"clients took part {_times(summary['clients'], how)}, canaries "
          f"{_times(summary['canaries'], same)}")
  if same:
    return line
  return (f"PARTICIPATION MISMATCH (allowed by {_MISMATCH_FLAG}): {line}; the "
          "canaries do not take part as the clients do, so their epsilons do "
          f"not describe a client's. {summary['mismatch']}")
