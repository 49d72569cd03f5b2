"""Epsilon of Poisson-sampled Gaussian rounds, with dp_accounting's accountants.

Poisson sampling with rate q over R rounds has no closed form. It is accounted
with dp_accounting's privacy loss distributions (`pld.PLDAccountant`; Meiser &
Mohammadi 2018 "Tight on Budget?", Koskela, Jalko & Honkela 2020, and the
connect-the-dots discretization of Doroshenko et al. 2022, PETS) or with Renyi
DP (`rdp.RdpAccountant`; Mironov 2017, Mironov, Talwar & Zhang 2019
arXiv:1908.10530, converted with Canonne, Kamath & Steinke 2020 arXiv:2004.00010
Proposition 12), which is an upper bound and looser. The PLD is pessimistic, so
its epsilon is an upper bound too; this module refines its discretization
interval (1e-2, 5e-3, ...) until halving it changes epsilon by at most
1e-3 * epsilon + 1e-5, which leaves an overestimate of about a third of that
(the connect-the-dots error shrinks with the square of the interval).

Uses dp-accounting 0.4.3 (the version TFF 0.87 pins) and imports no
TensorFlow. Without sampling, Gaussian rounds compose exactly
(`gaussian_accounting`).
"""

from __future__ import annotations

import math
import typing
from typing import Literal, Sequence
import warnings

import dp_accounting

from tff_canary.stats import validation

# The accountants: "pld" (tight, pessimistic) and "rdp" (upper bound).
Accountant = Literal["pld", "rdp"]
ACCOUNTANTS = typing.get_args(Accountant)

# PLD refinement (module docstring): first interval, the smallest one tried,
# and the stopping tolerance on the change of epsilon between halvings.
PLD_INITIAL_INTERVAL = 1e-2
PLD_MIN_INTERVAL = 1e-6
PLD_RELATIVE_TOLERANCE = 1e-3
PLD_ABSOLUTE_TOLERANCE = 1e-5


def _pld_epsilon_at(event: dp_accounting.DpEvent, delta: float,
                    interval: float) -> float:
  accountant = dp_accounting.pld.PLDAccountant(
      value_discretization_interval=interval)
  accountant.compose(event)
  return float(accountant.get_epsilon(delta))


def accountant_epsilon(event: dp_accounting.DpEvent, delta: float,
                       accountant: Accountant) -> float:
  """Epsilon of `event` with the RDP accountant or the refined PLD accountant
  (module docstring; the finer PLD value is returned)."""
  if accountant == "rdp":
    rdp = dp_accounting.rdp.RdpAccountant()
    rdp.compose(event)
    return float(rdp.get_epsilon(delta))
  interval = PLD_INITIAL_INTERVAL
  previous = _pld_epsilon_at(event, delta, interval)
  while True:
    interval *= 0.5
    current = _pld_epsilon_at(event, delta, interval)
    if not math.isfinite(current):
      return current
    change = abs(previous - current)
    if change <= PLD_RELATIVE_TOLERANCE * current + PLD_ABSOLUTE_TOLERANCE:
      return current
    if interval <= PLD_MIN_INTERVAL:
      warnings.warn(
          f"PLD epsilon did not settle: it moved by {change:.3g} when the "
          f"discretization interval was halved to {interval:.3g}; returning "
          f"{current!r}, an upper bound that may be loose.")
      return current
    previous = current


def poisson_event(groups: Sequence[tuple[float, int]],
                  sampling_probability: float) -> dp_accounting.DpEvent:
  """Composed Poisson-sampled Gaussians, one self-composition per multiplier."""
  return dp_accounting.ComposedDpEvent([
      dp_accounting.SelfComposedDpEvent(
          dp_accounting.PoissonSampledDpEvent(
              sampling_probability, dp_accounting.GaussianDpEvent(z)), count)
      for z, count in groups
  ])


def poisson_epsilon(noise_multiplier: float, sampling_probability: float,
                    rounds: int, delta: float,
                    accountant: Accountant = "pld") -> float:
  """Epsilon of `rounds` Poisson-sampled Gaussian releases, all iterates seen.

  Each round every client takes part independently with probability q and the
  sum of clipped updates gets N(0, z^2) noise; the accountant composes
  `SelfComposedDpEvent(PoissonSampledDpEvent(q, GaussianDpEvent(z)), rounds)`
  under add-or-remove-one adjacency, with the refined PLD or the RDP
  accountant (module docstring; RDP is never below PLD). With q = 1 and one
  round both reduce to one Gaussian mechanism (PLD then matches
  `gaussian_accounting.gaussian_epsilon`).

  Args:
    noise_multiplier: z >= 0 (0 gives inf).
    sampling_probability: q in (0, 1].
    rounds: R >= 1, an integer.
    delta: in (0, 1).
    accountant: "pld" (tight) or "rdp".
  """
  noise_multiplier = validation.as_nonnegative(noise_multiplier,
                                               "noise_multiplier")
  sampling_probability = validation.as_unit_interval(
      sampling_probability, "sampling_probability", include_low=False)
  rounds = validation.as_int(rounds, "rounds", minimum=1)
  delta = validation.as_open_unit(delta, "delta")
  accountant = validation.as_choice(accountant, "accountant", ACCOUNTANTS)
  if noise_multiplier == 0.0:
    return math.inf
  event = poisson_event([(noise_multiplier, rounds)], sampling_probability)
  return accountant_epsilon(event, delta, accountant)
