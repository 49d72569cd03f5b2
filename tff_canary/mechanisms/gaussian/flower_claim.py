"""The claim of a Flower run: each release's DpEvent as it was, and Flower's own figure.

A Flower run's analytical ε (the report's, as for TFF: the ledger of one
`dp_accounting` event per round, docs/method/accounting.md) is computed
from what each round of Flower 1.42's server-side DP strategy really did
(`flower.ServerSideCanaries` records it per round, `RoundScores`), not
from the parameters the user gave:

  * The values' Gaussian (McMahan et al., ICLR 2018, arXiv 1710.06963,
    Algorithm 1): a client's clipped update weighs w_max C_t in the mean
    (w_max the round's largest weight share, 1/n for n equal replies) and
    the noise has std z' C' / n, z' and C' the multiplier and clip Flower's
    noise step used. Its noise multiplier, the noise std over the
    sensitivity, is

        z_t = z' (C' / C_t) / (n max(w_max, 1/n)).

    Fixed clipping with n equal replies: z_t = z, exactly (each factor that
    is 1 up to rounding, `SAME`, is taken as 1). Adaptive clipping adds its
    noise after moving the clip (flower.py's module docstring, step 4):
    C' = C_{t+1}, so z_t = z_v C_{t+1} / C_t, z_v Flower's value share of
    the user's z (`compute_adaptive_noise_params`). FedAvg's weighting by
    `num-examples` gives a client of share w_max > 1/n a larger
    sensitivity than the noise's calibration assumes.
  * Adaptive clipping also releases the clipped count, noised as
    `np.random.normal(count, clipped_count_stddev)`. Flower counts 0 or 1
    per reply, so one client added or removed moves the count by 1: a
    Gaussian of multiplier `clipped_count_stddev` (Flower's split assumes
    Andrew et al.'s centred bits of +-1/2, "Differentially Private
    Learning with Adaptive Clipping", NeurIPS 2021, arXiv 1905.03871,
    section 3, sensitivity 1/2 and multiplier 2 x clipped_count_stddev).
    The round's event composes the two (`ComposedDpEvent`), one Gaussian
    of (z_t^-2 + sigma_c^-2)^-1/2 (Dong, Roth & Su 2022, Corollary 3.3).

`accountant_record` puts Flower's own accountant's figure beside it
(`RdpAccountant.get_epsilon`, Renyi DP converted to (ε, δ): an upper bound
on the exact ε of the same Gaussians, docs/guide/flower.md) where that
accountant applies, and says why it does not where it does not.
"""

from __future__ import annotations

import math
from typing import Any, Optional, Sequence

import dp_accounting
from flwr.serverapp.strategy import DifferentialPrivacyClientSideAdaptiveClipping
from flwr.serverapp.strategy import DifferentialPrivacyServerSideAdaptiveClipping

from tff_canary.mechanisms import protocol_flower
from tff_canary.stats import validation
from tff_canary.stats.accounting import gaussian_accounting

# Flower's adaptive-clipping strategies, server- and client-side: both move
# the clip (from the noised count of clipped replies) before adding the
# values' noise (flwr/serverapp/strategy/dp_adaptive_clipping.py).
ADAPTIVE = (DifferentialPrivacyServerSideAdaptiveClipping,
            DifferentialPrivacyClientSideAdaptiveClipping)

# A ratio within this of 1 is 1 (rounding of C / n and of the weight shares):
# far below any effect on an epsilon, far above float64 rounding (1e-16).
SAME = 1e-12


def _ratio(value: float) -> float:
  return 1.0 if abs(value - 1.0) <= SAME else value


def weight_factor(scores: protocol_flower.RoundScores, n: int) -> float:
  """n max(w_max, 1/n): how much more one client weighs in the round's mean
  than the 1/n the noise is calibrated to (1: equal weights, n replies).
  A round without recorded shares (NaN) counts as 1/n."""
  share = scores.max_weight
  if not math.isfinite(share):
    return 1.0
  return _ratio(max(share * n, 1.0))


def value_multiplier(scores: protocol_flower.RoundScores, n: int) -> float:
  """z_t = z' (C' / C_t) / (n max(w_max, 1/n)) of a released round (module
  docstring): the noise std over a client's sensitivity."""
  z, noise_clip = scores.noise_multiplier, scores.noise_clip
  if not (math.isfinite(z) and math.isfinite(noise_clip)):
    raise ValueError(
        f"scores of round {scores.server_round} have noise_multiplier={z} "
        f"and noise_clip={noise_clip}: the noise Flower added was not "
        "recorded (a RoundScores not made by ServerSideCanaries).")
  if z == 0.0:
    return 0.0
  return z * _ratio(noise_clip / scores.clip) / weight_factor(scores, n)


def release_event(dp_strategy: Any,
                  scores: protocol_flower.RoundScores) -> dp_accounting.DpEvent:
  """The DpEvent of one released round as it was (module docstring):
  `GaussianDpEvent(z_t)`, with adaptive clipping composed with the clipped
  count's `GaussianDpEvent(clipped_count_stddev)`; a zero multiplier in
  either is `GaussianDpEvent(0)` (no privacy)."""
  n = int(dp_strategy.num_sampled_clients)
  value = value_multiplier(scores, n)
  if not isinstance(dp_strategy, ADAPTIVE):
    return dp_accounting.GaussianDpEvent(value)
  count = float(dp_strategy.clipped_count_stddev)
  if value == 0.0 or count == 0.0:
    return dp_accounting.GaussianDpEvent(0.0)
  return dp_accounting.ComposedDpEvent(
      [dp_accounting.GaussianDpEvent(value),
       dp_accounting.GaussianDpEvent(count)])


def _reasons(dp_strategy: Any, rounds: Sequence[protocol_flower.RoundScores],
             accountant: Any) -> list[str]:
  """Why Flower's accountant does not give the ε of this run (empty: it
  does)."""
  reasons = []
  n = int(dp_strategy.num_sampled_clients)
  if isinstance(dp_strategy, ADAPTIVE):
    reasons.append(
        "adaptive clipping: Flower's accountant accounts fixed clipping only "
        f"({type(dp_strategy).__name__} takes no accountant), and the noise "
        "it adds is z C_{t+1} / n against a clip of C_t")
  elif accountant is None:
    reasons.append("no accountant: the DP strategy was built without one "
                   "(accountant=None)")
  short = [r.server_round for r in rounds if r.num_replies != n]
  if short:
    reasons.append(
        f"replies: {len(short)} rounds aggregated a number of replies other "
        f"than num_sampled_clients = {n} (round {short[0]} first; each of k "
        "replies weighs 1/k), which Flower's accountant refuses")
  heavy = [(r.server_round, r.max_weight) for r in rounds
           if math.isfinite(r.max_weight)
           and _ratio(r.max_weight * r.num_replies) != 1.0]
  if heavy:
    t, share = max(heavy, key=lambda item: item[1])
    reasons.append(
        f"weighted aggregation: FedAvg weighed the replies by num-examples, "
        f"one reply's share reached {share:.4g} > 1/n = {1.0 / n:.4g} (round "
        f"{t}; {len(heavy)} of {len(rounds)} rounds above 1/n); Flower's "
        "accountant refuses unequal weights")
  if accountant is not None and accountant.num_releases != len(rounds):
    reasons.append(
        f"releases: the accountant composed {accountant.num_releases} "
        f"releases, the run released {len(rounds)} rounds")
  return reasons


def _nominal(dp_strategy: Any, num_rounds: int, delta: float) -> float:
  """The exact ε of a client in every round as Flower's parameters claim
  it: the user's z (adaptive: composed from Flower's split, whose
  effective multiplier is the z given), each round."""
  z = float(dp_strategy.noise_multiplier)
  if isinstance(dp_strategy, ADAPTIVE):
    count = 2.0 * float(dp_strategy.clipped_count_stddev)
    z = 0.0 if z == 0.0 or count == 0.0 else (z**-2 + count**-2) ** -0.5
  if z == 0.0:
    return math.inf
  return gaussian_accounting.gaussian_epsilon_of_mu(
      math.sqrt(num_rounds) / z, delta)


def accountant_record(dp_strategy: Any,
                      rounds: Sequence[protocol_flower.RoundScores],
                      delta: float, epsilon_all_rounds: float,
                      num_clients: Optional[int] = None) -> dict[str, Any]:
  """Flower's accountant beside the analytical claim, as a JSON-ready dict.

  Args:
    dp_strategy: The run's Flower DP strategy (the one the wrapper wraps).
    rounds: The run's released rounds (`ServerSideCanaries.rounds`).
    delta: The report's δ; Flower's ε is read at it (`get_epsilon`) and at
      the accountant's own target δ (`privacy_spent()`).
    epsilon_all_rounds: The analytical ε of a client in every released
      round (`Ledger.epsilon_for_rounds`), which is what Flower's
      accountant, without amplification, accounts.
    num_clients: The population, if known (a note when clients are
      sampled: neither figure is amplified).

  Returns:
    {"applies", "reasons", "notes", "epsilon" (None without an accountant),
    "delta", "accounting_method", "num_releases", "privacy_spent" (the
    accountant's own figure at its target δ, or None),
    "epsilon_all_rounds", "epsilon_nominal" (`_nominal`: the same, exact,
    for the z the user gave: where it differs from epsilon_all_rounds the
    rounds did not release what the parameters say)}.
  """
  delta = validation.as_open_unit(delta, "delta")
  accountant = getattr(dp_strategy, "accountant", None)
  reasons = _reasons(dp_strategy, rounds, accountant)
  notes = []
  n = int(dp_strategy.num_sampled_clients)
  if num_clients is not None and num_clients > n:
    notes.append(
        f"sampling: {n} of {num_clients} clients a round, but neither "
        "figure amplifies by sampling (Flower's accountant is "
        "no-amplification only): both are a client's in every round")
  record = dict(applies=False, reasons=reasons, notes=notes, epsilon=None,
                delta=delta, accounting_method=None, num_releases=None,
                privacy_spent=None,
                epsilon_all_rounds=float(epsilon_all_rounds),
                epsilon_nominal=_nominal(dp_strategy, len(rounds), delta))
  if accountant is None:
    return record
  spent = accountant.get_privacy_spent()
  record.update(
      applies=not reasons, epsilon=float(accountant.get_epsilon(delta)),
      accounting_method=spent.accounting_method,
      num_releases=int(accountant.num_releases),
      privacy_spent=dict(
          epsilon=float(spent.epsilon), delta=float(spent.delta),
          num_releases=int(spent.num_releases),
          accounting_method=spent.accounting_method,
          optimal_order=(None if spent.optimal_order is None
                         else float(spent.optimal_order))),
      sampling_method=accountant.config.sampling_method.value,
      neighboring_relation=accountant.config.neighboring_relation.value)
  return record


__all__ = ["SAME", "accountant_record", "release_event", "value_multiplier",
           "weight_factor"]
