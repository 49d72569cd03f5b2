"""The privacy ledger of a run: its DpEvents, one per round, and their epsilons.

`Ledger` holds the DpEvent that TFF's DP aggregator records each round, reduces
each to its single equivalent Gaussian (`effective_noise`) and gives the run's
analytical epsilons (docs/method/accounting.md): the paper's one-participation
epsilon and the exact epsilon of a set of rounds (`gaussian_accounting`), and
the epsilon under Poisson sampling (`poisson_accounting`). It saves to JSON and
loads from it (events as the dicts of `dp_event_data`). No TensorFlow.
"""

from __future__ import annotations

import collections
import collections.abc
import dataclasses
import json
import math
from typing import Any, Iterable

import dp_accounting
import numpy as np

from tff_canary.stats.accounting import dp_event_data
from tff_canary.stats.accounting import effective_noise
from tff_canary.stats.accounting import gaussian_accounting
from tff_canary.stats.accounting import poisson_accounting
from tff_canary.stats import validation

_LEDGER_FORMAT = "tff_canary.Ledger"
_LEDGER_VERSION = 1


@dataclasses.dataclass(frozen=True, eq=True, repr=False)
class Ledger:
  """The privacy ledger of a run: one DpEvent per round, frozen.

  Built from the events TFF's DP aggregator records, one per call to
  `process.next()` (`tff.aggregators.differential_privacy.
  extract_dp_event_from_state(state)`, or the raw `state.dp_event` named
  tuple: `GaussianDpEvent(z)`, or with adaptive clipping the composition of
  `adaptive_split`), or as the dicts of `to_json`. Every event must reduce to
  a Gaussian (`effective_noise`). Rounds are 0-based positions in `events`:
  round t is the (t+1)-th call to `process.next()`.

  Attributes:
    events: tuple of DpEvents, one per round (at least one).
    noise_multipliers: tuple of the rounds' effective noise multipliers.
  """

  events: tuple[dp_accounting.DpEvent, ...]
  noise_multipliers: tuple[float, ...] = dataclasses.field(init=False,
                                                           compare=False)

  def __post_init__(self):
    events = self.events
    if (isinstance(events, (str, bytes, collections.abc.Mapping))
        or isinstance(events, dp_accounting.DpEvent)
        or dp_event_data.looks_like_event(events)
        or not isinstance(events, collections.abc.Iterable)):
      raise TypeError(f"events must be a sequence of DpEvents, one per round, "
                      f"got {validation.show(events)}.")
    events = tuple(dp_event_data.as_event(e, f"events[{i}]")
                   for i, e in enumerate(events))
    if not events:
      raise ValueError("events must hold at least one round, got 0.")
    multipliers = tuple(
        effective_noise.effective_noise_multiplier(e, where=f"events[{i}]")
        for i, e in enumerate(events))
    object.__setattr__(self, "events", events)
    object.__setattr__(self, "noise_multipliers", multipliers)

  def __len__(self) -> int:
    return len(self.events)

  def __repr__(self) -> str:
    counts = collections.Counter(self.noise_multipliers)
    shown = ", ".join(f"{z!r} x{n}" for z, n in counts.most_common(3))
    more = ", ..." if len(counts) > 3 else ""
    return (f"Ledger(rounds={len(self)}, noise_multipliers: {shown}{more})")

  # Epsilons ----------------------------------------------------------------

  def epsilon_one_participation(self, delta: float) -> float:
    """The paper's analytical epsilon: the worst single round, exactly.

    max over rounds t of gaussian_epsilon(z_t, delta) (Balle & Wang 2018,
    Theorem 8), which is the epsilon at the smallest effective multiplier:
    the adversary knows the one round in which the target took part.
    """
    delta = validation.as_open_unit(delta, "delta")
    return gaussian_accounting.gaussian_epsilon_of_mu(
        gaussian_accounting.mu_of(min(self.noise_multipliers)), delta)

  def epsilon_for_rounds(self, rounds: Iterable[int], delta: float) -> float:
    """Exact epsilon of a target that took part in `rounds`, no amplification.

    The rounds' Gaussian releases compose to one Gaussian with
    z = (sum_{t in rounds} z_t^-2)^(-1/2) (Dong, Roth & Su 2022,
    Corollary 3.3), whose epsilon is exact (Balle & Wang 2018, Theorem 8).

    Args:
      rounds: distinct 0-based round indices (empty gives 0).
      delta: in (0, 1).
    """
    delta = validation.as_open_unit(delta, "delta")
    indices = self._round_indices(rounds)
    precision = math.fsum(
        effective_noise.event_precision(self.events[t], f"events[{t}]")
        for t in indices)
    return gaussian_accounting.gaussian_epsilon_of_mu(math.sqrt(precision),
                                                      delta)

  def epsilon_poisson(self, sampling_probability: float, delta: float,
                      accountant: poisson_accounting.Accountant = "pld"
                      ) -> float:
    """Epsilon if every round sampled each client with probability q.

    Composes PoissonSampledDpEvent(q, GaussianDpEvent(z_t)) over all rounds,
    z_t the round's effective multiplier (a round's composed Gaussians,
    released together about one sampled record, are one Gaussian; McMahan et
    al. 2018, section 3), grouped into self-compositions of equal z_t. PLD or
    RDP as in `poisson_accounting.poisson_epsilon`.
    """
    sampling_probability = validation.as_unit_interval(
        sampling_probability, "sampling_probability", include_low=False)
    delta = validation.as_open_unit(delta, "delta")
    accountant = validation.as_choice(accountant, "accountant",
                                      poisson_accounting.ACCOUNTANTS)
    counts = collections.Counter(self.noise_multipliers)
    if 0.0 in counts:
      return math.inf
    groups = sorted((z, n) for z, n in counts.items() if z != math.inf)
    if not groups:
      return 0.0
    event = poisson_accounting.poisson_event(groups, sampling_probability)
    return poisson_accounting.accountant_epsilon(event, delta, accountant)

  def _round_indices(self, rounds: Any) -> list[int]:
    if isinstance(rounds, (str, bytes)) or not isinstance(
        rounds, (collections.abc.Iterable, np.ndarray)):
      raise TypeError(f"rounds must be a sequence of round indices, got "
                      f"{validation.show(rounds)}.")
    indices = []
    for i, t in enumerate(rounds):
      t = validation.as_int(t, f"rounds[{i}]", minimum=0)
      if t >= len(self):
        raise ValueError(f"rounds[{i}] = {t} is past the last round of the "
                         f"ledger ({len(self) - 1}; rounds are 0-based).")
      indices.append(t)
    if len(set(indices)) != len(indices):
      repeated = sorted(t for t, n in collections.Counter(indices).items()
                        if n > 1)
      raise ValueError(f"rounds must be distinct, but {repeated} repeat.")
    return indices

  # Serialization -------------------------------------------------------------

  def to_json(self, indent: int | None = None) -> str:
    """The ledger as JSON: {"format", "version", "events": [event dicts]}.

    Each event is `{"class_name": ..., <fields>}` with nested events as dicts,
    the fields of `DpEvent.to_named_tuple()`; floats round-trip exactly.
    """
    return json.dumps({
        "format": _LEDGER_FORMAT,
        "version": _LEDGER_VERSION,
        "events": [dp_event_data.event_to_plain(e, f"events[{i}]")
                   for i, e in enumerate(self.events)],
    }, indent=indent)

  @classmethod
  def from_json(cls, text: str | bytes) -> "Ledger":
    """The inverse of `to_json`. Only dp_accounting.dp_event classes load."""
    if not isinstance(text, (str, bytes, bytearray)):
      raise TypeError(f"text must be a JSON string, got "
                      f"{validation.show(text)}.")
    try:
      data = json.loads(text)
    except json.JSONDecodeError as e:
      raise ValueError(f"text is not valid JSON: {e}") from None
    if (not isinstance(data, dict) or data.get("format") != _LEDGER_FORMAT
        or not isinstance(data.get("events"), list)):
      raise ValueError(f"text is not a {_LEDGER_FORMAT} JSON document: "
                       f"{validation.show(text)}")
    if data.get("version") != _LEDGER_VERSION:
      raise ValueError(f"unsupported {_LEDGER_FORMAT} version "
                       f"{data.get('version')!r}; this code reads version "
                       f"{_LEDGER_VERSION}.")
    return cls(tuple(data["events"]))
