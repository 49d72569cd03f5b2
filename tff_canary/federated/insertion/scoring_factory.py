"""Scores of orthogonal canaries around ANY aggregator: `CanaryScoringFactory`.

docs/method/orthogonal-canaries.md. Server-side canaries are scored inside
this package's own aggregation process (`canary_process`). Canary clients go
through the user's aggregator instead (TFF's `DifferentiallyPrivateFactory`,
its distributed-DP chain, a user's own factory), so their scores are taken
by this wrapper: it runs the inner factory's process unchanged and, on the
server, scores the round's result with one transform
(`round_scores.update`), keeping every canary's running statistics in its
state. The inner state, result and measurements pass through untouched.

The result is whatever the inner aggregator releases: for an unweighted DP
mean, the noised mean; a canary client's scale (its norm, the clip, the
denominator) changes no cosine. The round's scheduled canaries'
projections are removed as in `round_scores`; a canary that the inner
aggregator dropped (zeroing) is then removed although it is absent, which
removes only the noise along its direction: held-out canaries keep their
law.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import tensorflow_federated as tff

from tff_canary.federated.insertion import round_scores
from tff_canary.federated.runtime import worker_guard
from tff_canary.federated.structures import flat_layout
from tff_canary.stats import validation
from tff_canary.stats.canaries import canary_config

worker_guard.install()


class CanaryScoringState(NamedTuple):
  """The inner aggregator's state and the canaries' running scores.

  Attributes:
    inner: The inner aggregation process's state.
    round_num: int32, rounds done.
    seed: int64, the canary seed.
    schedule: int32 [n, 2], the inserted canaries' (round, id) events.
    scores: `round_scores.CanaryScores`.
  """
  inner: Any
  round_num: Any
  seed: Any
  schedule: Any
  scores: Any


class CanaryScoringFactory(tff.aggregators.UnweightedAggregationFactory):
  """Wraps an unweighted aggregation factory; scores orthogonal canaries.

  Args:
    inner: The `tff.aggregators.UnweightedAggregationFactory` that
      aggregates the clients' updates (canary clients among them).
    canaries: The `CanaryConfig` of the canary clients, with
      directions="orthogonal".
  """

  def __init__(self, inner: tff.aggregators.UnweightedAggregationFactory,
               canaries: canary_config.CanaryConfig):
    if not isinstance(inner, tff.aggregators.UnweightedAggregationFactory):
      raise TypeError("inner must be a tff.aggregators."
                      "UnweightedAggregationFactory, got "
                      f"{validation.show(inner)}.")
    if not isinstance(canaries, canary_config.CanaryConfig):
      raise TypeError("canaries must be a CanaryConfig, got "
                      f"{validation.show(canaries)}.")
    if canaries.directions != "orthogonal":
      raise ValueError("canaries.directions must be 'orthogonal' (gaussian "
                       "canaries are scored after training), got "
                       f"{canaries.directions!r}.")
    self._inner = inner
    self._canaries = canaries

  @property
  def canaries(self) -> canary_config.CanaryConfig:
    return self._canaries

  def create(self, value_type) -> tff.templates.AggregationProcess:
    value_type = tff.types.to_type(value_type)
    inner = self._inner.create(value_type)
    specs = tff.types.type_to_tf_tensor_specs(value_type)
    dim = flat_layout.tensor_specs_dim(specs)
    canaries = self._canaries
    score = round_scores.scorer(canaries, dim)  # refuses m > dim

    @tff.tensorflow.computation
    def initial_scores():
      return round_scores.initial_state(canaries, canaries.num_canaries)

    round_type, seed_type, schedule_type, scores_type = (
        initial_scores.type_signature.result)
    result_type = inner.next.type_signature.result.result.member

    @tff.tensorflow.computation(scores_type, result_type, round_type,
                                seed_type, schedule_type)
    def score_round(scores, result, round_num, seed_t, schedule):
      return score(scores, result, round_num, seed_t, schedule), round_num + 1

    @tff.federated_computation()
    def init_fn():
      round_num, seed_v, schedule, scores = tff.federated_eval(
          initial_scores, tff.SERVER)
      return tff.federated_zip(CanaryScoringState(
          inner.initialize(), round_num, seed_v, schedule, scores))

    @tff.federated_computation(init_fn.type_signature.result,
                               tff.FederatedType(value_type, tff.CLIENTS))
    def next_fn(state, value):
      inner_state, round_num, seed_v, schedule, scores = state
      output = inner.next(inner_state, value)
      scores, next_round = tff.federated_map(
          score_round, (scores, output.result, round_num, seed_v, schedule))
      return tff.templates.MeasuredProcessOutput(
          tff.federated_zip(CanaryScoringState(
              output.state, next_round, seed_v, schedule, scores)),
          output.result, output.measurements)

    return tff.templates.AggregationProcess(init_fn, next_fn)
