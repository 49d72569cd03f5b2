"""The single Gaussian mechanism equivalent to a DpEvent of Gaussians.

Mechanisms that are mu_i-GDP compose to sqrt(sum mu_i^2)-GDP (Dong, Roth & Su
2022, Corollary 3.3), so a GaussianDpEvent, or a ComposedDpEvent /
SelfComposedDpEvent of them (TFF's DP aggregators record one such event per
round), is one Gaussian mechanism with the effective noise multiplier
z_eff = (sum_i z_i^-2)^(-1/2), the reduction that dp_accounting's RDP
accountant also makes (McMahan et al. 2018, arXiv:1812.06210, section 3).
sum_i z_i^-2 = mu^2 is the event's `event_precision`: 0 for a NoOpDpEvent (no
release), inf for a NonPrivateDpEvent or a zero multiplier (no privacy). Other
events have no effective multiplier and are refused, naming the event; an
`UnsupportedDpEvent` (TFF's distributed DP, DP-FTRL's tree, every round) or
a whole tree's `SingleEpochTreeAggregationDpEvent` with what to use instead.
"""

from __future__ import annotations

import math
import numbers
from typing import Any

import dp_accounting

from tff_canary.stats.accounting import dp_event_data
from tff_canary.stats.accounting import gaussian_accounting
from tff_canary.stats import validation


def event_precision(event: Any, where: str) -> float:
  """sum z_i^-2 (= mu^2 of the equivalent Gaussian) over a Gaussian event.

  `event` is a DpEvent object (`dp_event_data.as_event` makes one from the
  other forms); error messages name it as `where`.
  """
  if isinstance(event, dp_accounting.GaussianDpEvent):
    z = validation.as_nonnegative(event.noise_multiplier,
                                  f"{where}: the noise_multiplier of {event!r}")
    square = z * z
    return math.inf if square == 0.0 else 1.0 / square
  if isinstance(event, dp_accounting.ComposedDpEvent):
    return math.fsum(event_precision(e, where) for e in event.events)
  if isinstance(event, dp_accounting.SelfComposedDpEvent):
    count = event.count
    if (isinstance(count, bool) or not isinstance(count, numbers.Integral)
        or count < 0):
      raise ValueError(f"{where}: {event!r} has an invalid count {count!r}; "
                       f"it must be an integer >= 0.")
    inner = event_precision(event.event, where)
    return 0.0 if count == 0 else int(count) * inner
  if isinstance(event, dp_accounting.NoOpDpEvent):
    return 0.0
  if isinstance(event, dp_accounting.NonPrivateDpEvent):
    return math.inf
  if isinstance(event, dp_accounting.UnsupportedDpEvent):
    raise ValueError(
        f"{where}: {event!r} has no accounting to reduce. TFF's distributed "
        "DP and tensorflow_privacy's tree aggregation (DP-FTRL: "
        "TreeResidualSumQuery, TFF's DifferentiallyPrivateFactory."
        "tree_aggregation / tree_adaptive, tff_canary.mechanisms.tree."
        "aggregation's tree_aggregation / tree_adaptive) report it every "
        "round. DP-FTRL's privacy is per tree, not per round, and depends "
        "on how often each client takes part in a tree, which a per-round "
        "ledger cannot know: account it "
        "with tff_canary.stats.correlated.tree_accounting.tree_epsilons (each "
        "client at most once per tree), distributed DP with "
        "tff_canary.stats.accounting.ddp_accounting.")
  if isinstance(event, dp_accounting.SingleEpochTreeAggregationDpEvent):
    raise ValueError(
        f"{where}: {event!r} is a whole tree's (an epoch of DP-FTRL), not a "
        "round's Gaussian: account it with tff_canary.stats.correlated."
        "tree_accounting.tree_epsilons, not in a per-round ledger.")
  if isinstance(event, dp_accounting.DpEvent):
    raise ValueError(
        f"{where}: unsupported event {event!r}. Only GaussianDpEvent and "
        f"ComposedDpEvent / SelfComposedDpEvent of Gaussians (plus NoOpDpEvent "
        f"and NonPrivateDpEvent) have an effective noise multiplier.")
  raise TypeError(f"{where}: expected a dp_accounting.DpEvent, got "
                  f"{validation.show(event)} of type {type(event).__name__}.")


def effective_noise_multiplier(event: dp_accounting.DpEvent, *,
                               where: str = "event") -> float:
  """The z of the single Gaussian mechanism equivalent to `event`.

  GaussianDpEvent(z) -> z; compositions -> (sum_i z_i^-2)^(-1/2) (module
  docstring), SelfComposedDpEvent(e, r) -> z_e / sqrt(r), nested ones
  recursively. NoOpDpEvent -> inf (no release), NonPrivateDpEvent or a zero
  multiplier -> 0 (no privacy).

  Args:
    event: a dp_accounting DpEvent (or its `to_named_tuple()` form).
    where: how error messages name `event` (e.g. "events[3]").

  Raises:
    ValueError: for events that are not (compositions of) Gaussians, such as
      LaplaceDpEvent or PoissonSampledDpEvent, naming the event.
  """
  event = dp_event_data.as_event(event, where)
  if isinstance(event, dp_accounting.GaussianDpEvent):  # z itself, unrounded
    return validation.as_nonnegative(
        event.noise_multiplier, f"{where}: the noise_multiplier of {event!r}")
  # z = 1 / mu, as mu = 1 / z (0 and inf swapped alike).
  return gaussian_accounting.mu_of(math.sqrt(event_precision(event, where)))
