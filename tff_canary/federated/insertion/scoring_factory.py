"""Scores of orthogonal canaries around ANY aggregator: `CanaryScoringFactory`.

docs/method/orthogonal-canaries.md ("Canary clients and distributed DP").
Canary clients go through the user's aggregator, not `canary_process`, so
this wrapper runs the inner factory's process unchanged (state, result and
measurements pass through) and scores the round's released result on the
server as `round_scores` does, keeping the running statistics in its state.
A canary's scale (its norm, the clip, the denominator) changes no cosine.

`scores="dot_products"` is for noise correlated across rounds (DP-FTRL's
tree, docs/method/dp-ftrl.md): no statistics are kept (the state's `scores`
are empty) and each round's <c_j, result>, float64 [m], is reported under
`measurement_keys.DOT_PRODUCTS_KEY` beside the inner measurements (added to
them when they are a structure of named fields, else as
`OrderedDict(inner=..., canary_dot_products=...)`); their units are the
caller's (`tff_canary.harness.runner.client_insertion`).
"""

from __future__ import annotations

import collections
from typing import Any, NamedTuple

import tensorflow as tf
import tensorflow_federated as tff

from tff_canary.federated.insertion import construction
from tff_canary.federated.insertion import measurement_keys
from tff_canary.federated.insertion import orthogonal_transform
from tff_canary.federated.insertion import round_scores
from tff_canary.federated.runtime import worker_guard
from tff_canary.federated.structures import flat_layout
from tff_canary.stats import validation
from tff_canary.stats.canaries import canary_config

worker_guard.install()

# What the wrapper reports (module docstring).
SCORES = ("cosines", "dot_products")


class CanaryScoringState(NamedTuple):
  """The inner aggregator's state and the canaries' running scores.

  Attributes:
    inner: The inner aggregation process's state.
    round_num: int32, rounds done.
    seed: int64, the canary seed.
    schedule: int32 [n, 2], the inserted canaries' (round, id) events.
    scores: `round_scores.CanaryScores` (of no canary with
      scores="dot_products").
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
    scores: "cosines" (running statistics of independent rounds in the
      state) or "dot_products" (each round's <c_j, result> in the
      measurements, no statistics; module docstring).
  """

  def __init__(self, inner: tff.aggregators.UnweightedAggregationFactory,
               canaries: canary_config.CanaryConfig, *,
               scores: str = "cosines"):
    inner = construction.as_unweighted_factory(inner, "inner")
    if construction.as_canaries(canaries).directions != "orthogonal":
      raise ValueError("canaries.directions must be 'orthogonal' (gaussian "
                       "canaries are scored after training), got "
                       f"{canaries.directions!r}.")
    self._inner = inner
    self._canaries = canaries
    self._scores = validation.as_choice(scores, "scores", SCORES)

  @property
  def canaries(self) -> canary_config.CanaryConfig:
    return self._canaries

  @property
  def scores(self) -> str:
    """"cosines" or "dot_products" (module docstring)."""
    return self._scores

  def create(self, value_type) -> tff.templates.AggregationProcess:
    value_type = tff.types.to_type(value_type)
    inner = self._inner.create(value_type)
    specs = tff.types.type_to_tf_tensor_specs(value_type)
    dim = flat_layout.tensor_specs_dim(specs)
    canaries = self._canaries
    dot_products = self._scores == "dot_products"
    num_scored = 0 if dot_products else canaries.num_canaries

    @tff.tensorflow.computation
    def initial_scores():
      return round_scores.initial_state(canaries, num_scored)

    round_type, seed_type, schedule_type, scores_type = (
        initial_scores.type_signature.result)
    result_type = inner.next.type_signature.result.result.member
    if dot_products:
      # The rows of `orthogonal_transform`, as `round_scores.scorer`'s
      # (refuses m > dim).
      rows = orthogonal_transform.rows(canaries.seed, dim,
                                       canaries.num_canaries)

      @tff.tensorflow.computation(result_type, round_type, seed_type)
      def dot_round(result, round_num, seed_t):
        s = orthogonal_transform.scores(seed_t, flat_layout.flatten_value(
            result), dim, tf.constant(rows))
        return tf.cast(s, tf.float64), round_num + 1
    else:
      score = round_scores.scorer(canaries, dim)  # refuses m > dim

      @tff.tensorflow.computation(scores_type, result_type, round_type,
                                  seed_type, schedule_type)
      def score_round(scores, result, round_num, seed_t, schedule):
        return (score(scores, result, round_num, seed_t, schedule),
                round_num + 1)

    @tff.federated_computation()
    def init_fn():
      round_num, seed_v, schedule, scores = tff.federated_eval(
          initial_scores, tff.SERVER)
      return tff.federated_zip(CanaryScoringState(
          inner.initialize(), round_num, seed_v, schedule, scores))

    measurements_type = inner.next.type_signature.result.measurements.member

    @tff.federated_computation(init_fn.type_signature.result,
                               tff.FederatedType(value_type, tff.CLIENTS))
    def next_fn(state, value):
      inner_state, round_num, seed_v, schedule, scores = state
      output = inner.next(inner_state, value)
      measurements = output.measurements
      if dot_products:
        dots, next_round = tff.federated_map(
            dot_round, (output.result, round_num, seed_v))
        measurements = _with_dot_products(measurements, measurements_type,
                                          dots)
      else:
        scores, next_round = tff.federated_map(
            score_round, (scores, output.result, round_num, seed_v,
                          schedule))
      return tff.templates.MeasuredProcessOutput(
          tff.federated_zip(CanaryScoringState(
              output.state, next_round, seed_v, schedule, scores)),
          output.result, measurements)

    return tff.templates.AggregationProcess(init_fn, next_fn)


def _with_dot_products(measurements, measurements_type, dots):
  """The inner measurements with `DOT_PRODUCTS_KEY` added (module
  docstring); in a federated computation, all at the server."""
  key = measurement_keys.DOT_PRODUCTS_KEY
  elements = (tff.structure.to_elements(measurements_type)
              if isinstance(measurements_type, tff.StructType) else None)
  if elements is not None and all(name for name, _ in elements):
    names = [name for name, _ in elements]
    if key in names:
      raise ValueError(f"the inner aggregator's measurements already have "
                       f"a {key!r} entry; wrap it once.")
    merged = collections.OrderedDict(
        (name, measurements[name]) for name in names)
  else:
    merged = collections.OrderedDict(inner=measurements)
  merged[key] = dots
  return tff.federated_zip(merged)


__all__ = ["SCORES", "CanaryScoringFactory", "CanaryScoringState"]
