"""The aggregation process of the canary DP factory: TFF computations.

Per round r (0-based; see `tff_canary.stats.canaries.schedules`), with k_r canaries
scheduled (docs/method/canaries.md; Andrew et al., ICLR 2024, arXiv 2302.03098,
Algorithm 1):

    sum_state <- sum_i clip_{C_r}(x_i) + C_r * sum_{j in round r} c_j
    a_r = (sum_state + N(0, (z C_r)^2 I)) / clients_per_round

C_r is the clip that the query's `derive_sample_params` returns for round r
(the one clients are clipped to). With adaptive clipping the canaries are
added to the SUM part of the sample state only: they do not vote in the
private quantile estimate that sets C_{r+1}. A canary's norm is the clip
itself, so its vote would carry no information: "unclipped" (+1/2) or
"clipped" (-1/2) depending only on whether float rounding puts |C c| just
below or above C, a constant bias on the clip that grows with the number of
canaries per round. Without the votes the clip sequence is the one the
clients alone produce (`test_factory` checks it).

The schedule is fixed before training (`CanaryConfig.participation`); rounds
past the schedule's `num_rounds` get no canaries (the run may go on). Its
(round, canary id) events are an int32 [n, 2] tensor in the state and a
constant in the `initialize` graph: 8 bytes per event, so up to ~10^7 events
are cheap (TF graph constants are limited to 2 GB). A round costs one
draw of d floats per scheduled gaussian canary (`canary_directions.canary_sum`).

The state (`CanaryDPAggregatorState`) is TFF's `DPAggregatorState` (so that
`tff.aggregators.differential_privacy.extract_dp_event_from_state` works on
it) plus the round counter, the seed and the schedule's events as tensors:
a resumed checkpoint gives the same canaries and schedule.

Measurements per round (under the aggregator's key of the learning process's
metrics, possibly nested under a zeroing wrapper's): `dp_query_metrics` and
`dp` as TFF's factory; `canaries_inserted` (int32), `clip` (C_r used THIS
round; note `dp_query_metrics['clip']` is the NEXT round's clip), `round_num`
(int32, r) and, with `CanaryConfig.record_aggregates`, `noised_aggregate`: a_r,
the round's noised aggregate exactly as the server applies it, as ONE flat
float32 vector of length d in `tf.nest.flatten` order. Pop it with
`tff_canary.federated.scores.aggregate_recorder.AggregateRecorder.record` to keep
metric logs small. With noises correlated across rounds
(`QueryNoise.correlated`: DP-FTRL's, `tff_canary.mechanisms.tree.aggregation`)
orthogonal canaries get, instead of the running statistics in the state,
`measurement_keys.TREE_SCORES_KEY`.
"""

from __future__ import annotations

import collections
from typing import Any, NamedTuple, Optional

import numpy as np
import tensorflow as tf
import tensorflow_federated as tff
import tensorflow_privacy as tfp

from tff_canary.federated.insertion import measurement_keys
from tff_canary.federated.insertion import canary_directions
from tff_canary.federated.insertion import orthogonal_transform
from tff_canary.federated.insertion import query_noise
from tff_canary.federated.insertion import round_scores
from tff_canary.federated.structures import flat_layout
from tff_canary.federated.structures import nested_search
from tff_canary.federated.runtime import worker_guard
from tff_canary.stats.canaries import canary_config

worker_guard.install()


class CanaryDPAggregatorState(NamedTuple):
  """State of the canary DP aggregation process.

  The first four fields are TFF's `DPAggregatorState`.

  Attributes:
    query_state: The DP query's global state.
    agg_state: The inner record aggregation's state.
    dp_event: The last round's DpEvent as a named tuple (TFF's convention).
    is_init_state: True only for the state from `initialize`.
    round_num: int32, number of rounds done (the next round's index).
    seed: int64, the canary seed.
    schedule: int32 [n, 2], the (round, canary id) events of the run.
    scores: `round_scores.CanaryScores`, every canary's running statistics
      (orthogonal canaries; arrays of length 0 for gaussian canaries, which
      are scored after training, and for DP-FTRL, whose scores are a
      measurement).
  """
  query_state: Any
  agg_state: Any
  dp_event: Any
  is_init_state: Any
  round_num: Any
  seed: Any
  schedule: Any
  scores: Any


def state_in(state: Any) -> Optional[CanaryDPAggregatorState]:
  """The `CanaryDPAggregatorState` in a learning process state (searched
  under `state.aggregator` when there is one, also under TFF's zeroing), or
  None."""
  return nested_search.find_first(
      getattr(state, "aggregator", state),
      lambda s: isinstance(s, CanaryDPAggregatorState))


def build(
    query: tfp.DPQuery,
    noise: query_noise.QueryNoise,
    canaries: canary_config.CanaryConfig,
    record_aggregation_factory: tff.aggregators.UnweightedAggregationFactory,
    value_type: tff.types.Type,
    specs: Any,
    dim: int,
) -> tff.templates.AggregationProcess:
  """The aggregation process of `CanaryDPFactory.create` (module docstring).

  Args:
    query: The DP sum query (checked by the factory; `noise.normalized`
      wraps it in the mean's `tfp.NormalizedQuery`).
    noise: The query's `QueryNoise`.
    canaries: The `CanaryConfig`.
    record_aggregation_factory: Aggregates the clients' clipped records.
    value_type: The TFF type of the aggregated value (the model weights).
    specs: `value_type` as a structure of `tf.TensorSpec`s.
    dim: d, the number of elements of the value.
  """
  query = noise.normalized(query)
  events = np.asarray(canaries.participation.events, np.int32)
  has_canaries = events.shape[0] > 0
  orthogonal = canaries.directions == "orthogonal"
  per_round = orthogonal and noise.correlated  # scores as a measurement
  num_scored = canaries.num_canaries if orthogonal and not per_round else 0
  if orthogonal:
    rows = orthogonal_transform.rows(canaries.seed, dim, canaries.num_canaries)
  if num_scored:
    score = round_scores.scorer(canaries, dim)

  query_initial_state_fn = tff.tensorflow.computation(
      query.initial_global_state)
  query_sample_state_fn = tff.tensorflow.computation(
      lambda: query.initial_sample_state(specs))
  query_state_type = query_initial_state_fn.type_signature.result
  derive_sample_params = tff.tensorflow.computation(
      query.derive_sample_params, query_state_type)
  params_type = derive_sample_params.type_signature.result
  get_query_record = tff.tensorflow.computation(
      query.preprocess_record, params_type, value_type)
  record_agg_process = record_aggregation_factory.create(
      get_query_record.type_signature.result)
  agg_output_type = record_agg_process.next.type_signature.result.result.member

  @tff.tensorflow.computation
  def canary_state_fn():
    return round_scores.initial_state(canaries, num_scored)

  round_type, seed_type, schedule_type, scores_type = (
      canary_state_fn.type_signature.result)

  @tff.tensorflow.computation(params_type, agg_output_type, round_type,
                              seed_type, schedule_type)
  def add_canaries(params, sample_state, round_num, seed_t, schedule):
    clip = noise.clip(params)
    ids = round_scores.round_ids(schedule, round_num)
    if has_canaries:
      if orthogonal:
        total = orthogonal_transform.canary_sum(seed_t, ids, dim, rows)
      else:
        total = canary_directions.canary_sum(seed_t, ids, dim)
      canary_value = flat_layout.unflatten_value(
          total * tf.cast(clip, tf.float32), specs)
      sum_state = tf.nest.map_structure(
          lambda s, c: s + tf.cast(c, s.dtype), noise.sum_part(sample_state),
          canary_value)
      sample_state = noise.with_sum(sample_state, sum_state)
    return sample_state, tf.size(ids), tf.cast(clip, tf.float32)

  @tff.tensorflow.computation(agg_output_type, query_state_type)
  def get_noised_result(sample_state, global_state):
    result, new_state, event = query.get_noised_result(sample_state,
                                                       global_state)
    return (result, new_state, event.to_named_tuple(),
            query.derive_metrics(new_state))

  result_type = get_noised_result.type_signature.result[0]
  flatten_result = tff.tensorflow.computation(flat_layout.flatten_value,
                                              result_type)

  @tff.tensorflow.computation(scores_type, result_type, round_type, seed_type,
                              schedule_type)
  def score_round(scores, result, round_num, seed_t, schedule):
    if num_scored:
      scores = score(scores, result, round_num, seed_t, schedule)
    return scores, round_num + 1

  if per_round:

    @tff.tensorflow.computation(result_type, tff.TensorType(np.float32),
                                seed_type)
    def scores_of_round(result, clip, seed_t):
      return noise.scores(orthogonal_transform.scores(
          seed_t, flat_layout.flatten_value(result), dim, tf.constant(rows)),
                          clip)

  @tff.federated_computation()
  def init_fn():
    query_initial_state = tff.federated_eval(query_initial_state_fn,
                                             tff.SERVER)
    query_sample_state = tff.federated_eval(query_sample_state_fn,
                                            tff.SERVER)
    round_num, seed_v, schedule, scores = tff.federated_eval(
        canary_state_fn, tff.SERVER)
    _, _, dp_event, _ = tff.federated_map(
        get_noised_result, (query_sample_state, query_initial_state))
    state = CanaryDPAggregatorState(
        query_initial_state, record_agg_process.initialize(), dp_event,
        tff.federated_value(True, tff.SERVER), round_num, seed_v, schedule,
        scores)
    return tff.federated_zip(state)

  @tff.federated_computation(init_fn.type_signature.result,
                             tff.FederatedType(value_type, tff.CLIENTS))
  def next_fn(state, value):
    query_state, agg_state, _, _, round_num, seed_v, schedule, scores = state
    server_params = tff.federated_map(derive_sample_params, query_state)
    params = tff.federated_broadcast(server_params)
    record = tff.federated_map(get_query_record, (params, value))
    record_agg_output = record_agg_process.next(agg_state, record)
    sample_state, count, clip = tff.federated_map(
        add_canaries, (server_params, record_agg_output.result, round_num,
                       seed_v, schedule))
    result, new_query_state, dp_event, query_metrics = tff.federated_map(
        get_noised_result, (sample_state, query_state))
    new_scores, next_round = tff.federated_map(
        score_round, (scores, result, round_num, seed_v, schedule))
    new_state = CanaryDPAggregatorState(
        new_query_state, record_agg_output.state, dp_event,
        tff.federated_value(False, tff.SERVER), next_round, seed_v, schedule,
        new_scores)
    measurements = collections.OrderedDict(
        dp_query_metrics=query_metrics,
        dp=record_agg_output.measurements,
        canaries_inserted=count,
        clip=clip,
        round_num=round_num)
    if canaries.record_aggregates:
      measurements[measurement_keys.AGGREGATE_KEY] = tff.federated_map(
          flatten_result, result)
    if per_round:
      measurements[measurement_keys.TREE_SCORES_KEY] = tff.federated_map(
          scores_of_round, (result, clip, seed_v))
    return tff.templates.MeasuredProcessOutput(
        tff.federated_zip(new_state), result,
        tff.federated_zip(measurements))

  return tff.templates.AggregationProcess(init_fn, next_fn)
