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

`scores="dot_products"` is the mode for aggregators whose noise is
correlated across rounds (DP-FTRL's tree aggregation, docs/method/dp-ftrl.md),
where the running statistics above, which assume independent rounds, are
wrong. The wrapper then keeps no statistics (the state's `scores` are empty)
and reports, with the same transform (`orthogonal_transform.scores`), every
canary's raw inner product <c_j, result> of the round, float64 [m], under
`measurement_keys.DOT_PRODUCTS_KEY` beside the inner measurements (added
to them when they are a structure of named fields, else as
`OrderedDict(inner=..., canary_dot_products=...)`). What they are in units
of the aggregator's noise is the caller's to say: for canary clients through
a tree query, u_{j,t} = <c_j, result> x denominator / (z C_t)
(`tff_canary.harness.running.client_insertion`).
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
