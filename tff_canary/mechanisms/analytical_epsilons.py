"""The analytical epsilons of a run, and the delta they are at (NumPy only).

The analytical epsilons (docs/method/accounting.md), all from the run's
DpEvent ledger (`ledger.Ledger`): one participation (the paper's "analytical
epsilon"), the run's largest participation composed without amplification,
with per-round sampling Poisson sampling at the clients' rate (PLD), and for
canaries Poisson-sampled at another rate, Poisson sampling at theirs
(`canary_claim` says which one the audit tests).
`delta_source` says where the report's delta came from.
"""

from __future__ import annotations

import math
from typing import Any, Optional

import numpy as np

from tff_canary.mechanisms import canary_claim
from tff_canary.mechanisms import records as records_lib
from tff_canary.mechanisms import registry


def format_delta(delta: float) -> str:
  """delta in short scientific notation: 1.09e-4, 1e-5."""
  return np.format_float_scientific(delta, precision=2, trim="-",
                                    exp_digits=1)


def delta_source(config: dict[str, Any], given: Optional[float]) -> str:
  """Where the report's delta comes from (see `RunReport.delta_line`).

  Args:
    config: the run's config.json (its `delta` and `num_clients`).
    given: the delta given to the report, or None for the run's.
  """
  run_delta = config["delta"]
  if given is not None and given != run_delta:
    return f"given to this report (the run's: {format_delta(run_delta)})"
  n = config.get("num_clients")
  if n is not None and math.isclose(run_delta, n ** -1.1, rel_tol=1e-9):
    return f"from the run's default 1/n^1.1 for n = {n:,} clients"
  # Set by --delta in our experiments, or by the training loop (RunWriter).
  return "from the run's config.json (set for the run)"


def analytical(config: dict[str, Any], ledger: Any, events: np.ndarray,
               delta: float, canary_rate: Optional[float] = None
               ) -> tuple[dict[str, float], int]:
  """({name: epsilon}, largest participation of a canary) of a run.

  `canary_rate`: p of Poisson-sampled canaries (`canary_claim.poisson_rate`),
  None otherwise; a p other than the clients' rate adds
  `canary_claim.POISSON_AT_CANARY_RATE`.
  """
  out = {"one participation": ledger.epsilon_one_participation(delta)}
  max_participation = 0
  if events.size:
    ids, counts = np.unique(events[:, 1], return_counts=True)
    worst = ids[np.argmax(counts)]
    max_participation = int(counts.max())
    rounds = events[events[:, 1] == worst, 0]
    rounds = rounds[rounds < len(ledger)]
    if rounds.size > 1:
      out[f"{rounds.size} participations"] = ledger.epsilon_for_rounds(
          rounds.tolist(), delta)
  rate = canary_claim.clients_rate(config)
  if rate is not None:
    if not 0.0 < rate <= 1.0:
      raise records_lib.RunDirError(
          f"config.json has clients_per_round = {config['clients_per_round']} "
          f"and num_clients = {config['num_clients']}: the Poisson sampling "
          f"rate clients_per_round / num_clients = {rate:.4g} is not in "
          "(0, 1].")
    out[canary_claim.POISSON] = ledger.epsilon_poisson(rate, delta)
  if canary_rate is not None and (
      canary_claim.POISSON not in out
      or not math.isclose(canary_rate, rate, rel_tol=1e-9)):
    out[canary_claim.POISSON_AT_CANARY_RATE] = ledger.epsilon_poisson(
        canary_rate, delta)
  return out, max_participation


def of_run(records, delta: float):
  """(the run's `protocol.AnalyticalClaim`, the claim the canaries face) of
  a run's `records.RunRecords` (its config, events and cosine table) at
  `delta`: its mechanism's claim (`protocol.Mechanism.claim`) and which of
  its epsilons the canaries face (`canary_claim.choose`)."""
  config = records.config
  schedule = canary_claim.recorded_schedule(config, records.table.schedule)
  claim = registry.of_config(config).claim(
      records, delta, canary_claim.poisson_rate(schedule))
  return claim, canary_claim.choose(config, schedule, claim.epsilons)
