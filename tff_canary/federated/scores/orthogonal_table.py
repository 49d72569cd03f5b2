"""The cosine table of orthogonal canaries: from the process state, no pass.

docs/method/orthogonal-canaries.md: the trained aggregator state holds every
canary's scores over the rounds (`tff_canary.federated.insertion.
round_scores`); what is left is the final model's cosines, one transform of
theta_0 - theta_T with the inserted canaries' projections removed.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from tff_canary.federated.insertion import orthogonal_transform
from tff_canary.federated.insertion import round_scores
from tff_canary.federated.insertion import state_check
from tff_canary.federated.structures import flat_layout
from tff_canary.stats.canaries import canary_config
from tff_canary.stats.canaries import cosine_table


def _scores_of(state: Any, num_canaries: int) -> round_scores.CanaryScores:
  node = state_check.find_canary_state(getattr(state, "aggregator", state))
  scores = getattr(node, "scores", None)
  if scores is None:
    raise ValueError("state holds no canary scores (canary_process."
                     "CanaryDPAggregatorState.scores): pass the learning "
                     "process state after the last round.")
  scores = round_scores.CanaryScores(*[np.asarray(x) for x in scores])
  if scores.max_cosine.shape != (num_canaries,):
    raise ValueError(f"the state's canary scores have "
                     f"{scores.max_cosine.shape[0]} canaries, the config "
                     f"{num_canaries}: these are not orthogonal canaries of "
                     "this run.")
  return scores


def table_from_state(canaries: canary_config.CanaryConfig,
                     initial_weights: Any, final_weights: Any,
                     state: Any) -> cosine_table.CosineTable:
  """The run's `CosineTable` from the trained state and theta_0, theta_T.

  Args:
    canaries: The run's `CanaryConfig`, with directions="orthogonal".
    initial_weights: theta_0 (`ModelWeights`, a structure of arrays, or a
      flat vector).
    final_weights: theta_T, the same way.
    state: The learning process state after the last round (or its
      aggregator state); its seed and schedule are checked against
      `canaries` (`state_check.check_state`).

  Raises:
    ValueError: for gaussian canaries, a state of other canaries, or
      weights of different sizes.
  """
  if canaries.directions != "orthogonal":
    raise ValueError(f"canaries.directions must be 'orthogonal' for a table "
                     f"from the state, got {canaries.directions!r}.")
  state_check.check_state(canaries, state)
  theta0, theta_t, dim = flat_layout.weights_pair(initial_weights,
                                                  final_weights)
  m = canaries.num_canaries
  scores = _scores_of(state, m)
  rows = orthogonal_transform.rows(canaries.seed, dim, m)
  final = round_scores.final_cosines(
      canaries.seed, theta0 - theta_t, dim, rows,
      canaries.inserted_ids)
  scored = int(scores.rounds_scored)
  if scored:
    max_cosine = scores.max_cosine.astype(np.float64)
    max_round = scores.max_round.astype(np.int64)
  else:
    max_cosine = np.full(m, np.nan)
    max_round = np.full(m, -1, np.int64)
  # Rounds of the schedule that were never run count as unrecorded.
  missed = canaries.participation.outside(np.arange(scored)).counts(m)
  return cosine_table.of_canaries(
      canaries, final_cosine=np.clip(final, -1.0, 1.0),
      max_cosine=np.clip(max_cosine, -1.0, 1.0), max_round=max_round,
      dim=dim, rounds_recorded=scored,
      generator=orthogonal_transform.GENERATOR, unrecorded=missed,
      known_canaries_removed="final_and_all_iterates",
      scheduled_sum=scores.scheduled_sum.astype(np.float64),
      scheduled_rounds=scores.scheduled_rounds.astype(np.int64))
