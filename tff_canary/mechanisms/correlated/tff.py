"""The correlated-noise family's TFF half: what the tree, banded and BLT share.

DP-FTRL's rounds (the tree's and the matrix mechanisms') record no DpEvent
(their privacy is per tree or per strategy) but their canaries' scores in
units of the node noise (tree_scores.npy): server-side from the canary
aggregator's measurements, with canary clients from TFF's own aggregator
scored by `CanaryScoringFactory(..., scores="dot_products")`
(`client_scores_of`; docs/method/dp-ftrl.md, "In TFF"). Their noise checks
span two restarts (`check_period`). A mechanism of the family subclasses
`CorrelatedTff` and builds its aggregators and noise check.
"""

from __future__ import annotations

from typing import Any, Mapping, Optional

import numpy as np

from tff_canary.federated.insertion import measurement_keys
from tff_canary.federated.structures import nested_search
from tff_canary.mechanisms import protocol_tff

# DP-FTRL's noise check spans two restarts in at most this many rounds
# (`check_period`).
MAX_CHECK_ROUNDS = 256


def check_period(rounds_per_epoch: Optional[int]) -> int:
  """The restart period of DP-FTRL's noise check: the run's, when two
  restarts fit in `MAX_CHECK_ROUNDS` rounds, else the largest period that
  fits (the same query, restarted sooner), so that the check's [rounds, d]
  noise stays in memory at StackOverflow's epochs of thousands of rounds."""
  if rounds_per_epoch is None:
    raise ValueError("the noise check needs rounds_per_epoch, the noise's "
                     "restart period; got None.")
  return min(int(rounds_per_epoch), (MAX_CHECK_ROUNDS - 2) // 2)


def client_scores_of(metrics: Any, clients_per_round: float,
                noise_multiplier: float, clip: float) -> np.ndarray:
  """DP-FTRL's canary clients' scores u_j = <c_j, a_r> x clients_per_round
  / (z C_r), float64 [m], a_r the round's released mean, from the
  process's `measurement_keys.DOT_PRODUCTS_KEY` (scores="dot_products"):
  the server-side mode's scores, in units of the node noise z C_r
  (docs/method/dp-ftrl.md, "In TFF").
  """
  key = measurement_keys.DOT_PRODUCTS_KEY
  found = nested_search.find_first(
      metrics.get("aggregator", metrics) if isinstance(metrics, Mapping)
      else metrics, lambda m: isinstance(m, Mapping) and key in m)
  if found is None:
    raise ValueError(f"the round's metrics have no {key!r}: the process "
                     "was not built with scores='dot_products'.")
  unit = float(noise_multiplier) * float(clip)
  if not unit > 0.0:
    raise ValueError(f"the scores' unit z C_r must be positive, got "
                     f"noise_multiplier={noise_multiplier}, clip={clip}.")
  dots = np.asarray(found[key], np.float64)
  return dots * (float(clients_per_round) / unit)


class CorrelatedTff(protocol_tff.TffMechanism):
  """The family's round records (module docstring)."""

  client_scores = "dot_products"

  def server_round(self, output, measurements):
    return None, np.asarray(measurements[measurement_keys.TREE_SCORES_KEY],
                            np.float64)

  def client_round(self, settings, output, clip: float):
    return None, client_scores_of(
        output.metrics, settings.clients_per_round,
        settings.noise_multiplier, clip)


__all__ = ["CorrelatedTff", "MAX_CHECK_ROUNDS", "check_period",
           "client_scores_of"]
