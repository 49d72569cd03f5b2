"""A DP-FedAvg aggregation factory that inserts random canary clients.

`CanaryDPFactory` is TFF's `tff.aggregators.DifferentiallyPrivateFactory` with
one step added: after the clients' clipped records are summed and before the
query adds noise, the server adds this round's canaries to the query's sample
state, each exactly at the round's clip norm C_t (METHOD §2; Andrew et al.,
"One-shot Empirical Privacy Estimation for Federated Learning", ICLR 2024,
arXiv 2302.03098, Algorithm 1). A canary therefore passes through the same
path as a client record: clipping (a no-op at norm C_t), the same Gaussian
noise, the same normalization by the fixed `clients_per_round` of
`tfp.NormalizedQuery` (canaries do not change the denominator).

Per round r (0-based; see `tff_canary.stats.schedules`), with k_r canaries scheduled:

    sum_state <- sum_i clip_{C_r}(x_i) + C_r * sum_{j in round r} c_j
    a_r = (sum_state + N(0, (z C_r)^2 I)) / clients_per_round

Clipping:
  * fixed (`gaussian_fixed`, McMahan et al., ICLR 2018, https://arxiv.org/abs/
    1710.06963): C_r = clip.
  * adaptive (`gaussian_adaptive`, Andrew et al. 2021, https://arxiv.org/abs/
    1905.03871, geometric update): C_r is the clip that `derive_sample_params`
    returns for round r (the one clients are clipped to). The canaries are
    added to the SUM part of the sample state only: they do not vote in the
    private quantile estimate that sets C_{r+1}. A canary's norm is the clip
    itself, so its vote would carry no information: "unclipped" (+1/2) or
    "clipped" (-1/2) depending only on whether float rounding puts |C c|
    just below or above C, a constant bias on the clip that grows with the
    number of canaries per round. Without the votes the clip sequence is the
    one the clients alone produce (`test_factory` checks it).

Zeroing (`canary_dp_aggregator(..., zeroing=True)`, like
`tff.learning.dp_aggregator`): TFF's zeroing wraps OUTSIDE the DP factory and
zeroes client values before the DP factory sees them; canaries are added
inside, at the server, so they are never zeroed.

The schedule is fixed before training (`CanaryConfig.participation`); rounds
past the schedule's `num_rounds` get no canaries (the run may go on). Its
(round, canary id) events are an int32 [n, 2] tensor in the state and a
constant in the `initialize` graph: 8 bytes per event, so up to ~10^7 events
are cheap (TF graph constants are limited to 2 GB).

Server-side canaries change nothing a real client sees and cost per round one
`tf.random.stateless_normal` of d floats per scheduled canary (generated in a
`tf.while_loop`, so the graph does not grow with the number of canaries).

The state (`CanaryDPAggregatorState`) is TFF's `DPAggregatorState`
(`query_state, agg_state, dp_event, is_init_state`, so that
`tff.aggregators.differential_privacy.extract_dp_event_from_state` works on
it) plus the round counter, the seed and the schedule's (round, canary id)
events as tensors: checkpointing the learning process state and resuming gives
the same canaries and schedule.

Noise. The noise is the query's own. With `noise_seed=None` (the default)
the named constructors build tensorflow_privacy's queries, whose noise is
unseeded, as in TFF: a resumed run repeats the canaries, not the noise. With
`noise_seed=s` they build the same queries with seeded noise
(`tff_canary.federated.seeded_query`): the same N(0, (z C)^2) noise on the sum (and on
the adaptive clipped count), every tensor of every round from its own
independent stream of s, with the draw counter in the query's state, so an
interrupted and resumed run equals an uninterrupted one. Only for simulation:
anyone who knows the seed can subtract the noise, so a deployment must leave
`noise_seed=None`.

Measurements per round (under the aggregator's key of the learning process's
metrics, possibly nested under a zeroing wrapper's): `dp_query_metrics` and
`dp` as TFF's factory; `canaries_inserted` (int32), `clip` (C_r used THIS
round; note `dp_query_metrics['clip']` is the NEXT round's clip), `round_num`
(int32, r) and, with `CanaryConfig.record_aggregate`, `noised_aggregate`: a_r,
the round's noised aggregate exactly as the server applies it, as ONE flat
float32 vector of length d in `tf.nest.flatten` order. Pop it with
`tff_canary.federated.hooks.AggregateRecorder.record` to keep metric logs small.
"""

from __future__ import annotations

import collections
from typing import Any, NamedTuple, Optional

import numpy as np
import tensorflow as tf
import tensorflow_federated as tff
import tensorflow_privacy as tfp

from tff_canary.federated import canaries as canaries_lib
from tff_canary.federated import seeded_query
from tff_canary.stats import validation
from tff_canary.federated import worker_guard

worker_guard.install()

_tff_dp = tff.aggregators.differential_privacy
from tensorflow_federated.python.learning import model_update_aggregator as _model_update_aggregator  # pylint: disable=g-import-not-at-top,g-bad-import-order


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
  """
  query_state: Any
  agg_state: Any
  dp_event: Any
  is_init_state: Any
  round_num: Any
  seed: Any
  schedule: Any


class _SumAdapter:
  """Where a supported query keeps the clip and the record sum."""

  def __init__(self, adaptive: bool):
    self.adaptive = adaptive

  def clip(self, params):
    return params[0] if self.adaptive else params

  def sum_part(self, sample_state):
    return sample_state[0] if self.adaptive else sample_state

  def with_sum(self, sample_state, new_sum):
    if not self.adaptive:
      return new_sum
    if hasattr(sample_state, "_replace"):
      return sample_state._replace(sum_state=new_sum)
    return (new_sum,) + tuple(sample_state[1:])


def _adapter_for(query: Any) -> _SumAdapter:
  """The adapter of a supported query; TypeError for any other."""
  inner = query
  if isinstance(inner, tfp.NormalizedQuery):
    inner = inner._numerator  # pylint: disable=protected-access
  if isinstance(inner, tfp.QuantileAdaptiveClipSumQuery):
    return _SumAdapter(adaptive=True)
  if isinstance(inner, tfp.GaussianSumQuery):
    return _SumAdapter(adaptive=False)
  raise TypeError(
      "query must be a tfp.GaussianSumQuery or tfp.QuantileAdaptiveClipSumQuery"
      f", optionally wrapped in a tfp.NormalizedQuery; got {query!r}.")


def _check_noise(noise_multiplier: Any, clients_per_round: Any):
  return (validation.as_nonnegative(noise_multiplier, "noise_multiplier"),
          validation.as_positive(clients_per_round, "clients_per_round"))


def _check_config(canaries: Any) -> canaries_lib.CanaryConfig:
  if not isinstance(canaries, canaries_lib.CanaryConfig):
    raise TypeError("canaries must be a tff_canary.federated.canaries.CanaryConfig, got "
                    f"{canaries!r}.")
  return canaries


class CanaryDPFactory(tff.aggregators.UnweightedAggregationFactory):
  """`UnweightedAggregationFactory` for DP queries, with canary clients.

  Wraps a tensorflow_privacy DP query like
  `tff.aggregators.DifferentiallyPrivateFactory` and adds the canaries of a
  `CanaryConfig` at the server, at the round's clip norm (module docstring).
  Use the named constructors `gaussian_fixed` and `gaussian_adaptive`, or
  `canary_dp_aggregator` for the analogue of `tff.learning.dp_aggregator`.
  """

  @classmethod
  def gaussian_adaptive(
      cls,
      noise_multiplier: float,
      clients_per_round: float,
      initial_l2_norm_clip: float = 0.1,
      target_unclipped_quantile: float = 0.5,
      learning_rate: float = 0.2,
      clipped_count_stddev: Optional[float] = None,
      *,
      canaries: canaries_lib.CanaryConfig,
      noise_seed: Optional[int] = None,
  ) -> CanaryDPFactory:
    """Adaptive clipping and Gaussian noise, with canaries.

    The query TFF's `DifferentiallyPrivateFactory.gaussian_adaptive` builds:
    DP-FedAvg (McMahan et al. 2018, https://arxiv.org/abs/1710.06963) with the
    geometric adaptive clipping of Andrew et al. 2021
    (https://arxiv.org/abs/1905.03871); the value noise multiplier comes from
    TFF's `adaptive_clip_noise_params`, so `noise_multiplier` is the effective
    total one. Canaries (Andrew et al. 2024, arXiv 2302.03098) are added at
    each round's clip and do not vote in the quantile estimate.

    Args:
      noise_multiplier: Effective noise multiplier z >= 0.
      clients_per_round: Expected clients per round (> 0), the denominator.
      initial_l2_norm_clip: Initial clip (> 0).
      target_unclipped_quantile: Target quantile in [0, 1].
      learning_rate: Clip learning rate (>= 0).
      clipped_count_stddev: Noise stddev of the clipped count (>= 0), or None
        for TFF's default 0.05 * clients_per_round (0 without noise).
      canaries: The `CanaryConfig`.
      noise_seed: None (TFF's unseeded noise) or a seed for reproducible
        simulation noise; see the module docstring. Never in deployment.

    Returns:
      A `CanaryDPFactory`.

    Raises:
      TypeError, ValueError: for bad arguments, naming them.
    """
    noise_multiplier, clients_per_round = _check_noise(noise_multiplier,
                                                       clients_per_round)
    initial_l2_norm_clip = validation.as_positive(initial_l2_norm_clip,
                                                  "initial_l2_norm_clip")
    target_unclipped_quantile = validation.as_unit_interval(
        target_unclipped_quantile, "target_unclipped_quantile")
    learning_rate = validation.as_nonnegative(learning_rate, "learning_rate")
    if clipped_count_stddev is not None:
      clipped_count_stddev = validation.as_nonnegative(
          clipped_count_stddev, "clipped_count_stddev")
    canaries = _check_config(canaries)
    value_noise_multiplier, clipped_count_stddev = (
        _tff_dp.adaptive_clip_noise_params(
            noise_multiplier, clients_per_round, clipped_count_stddev))
    arguments = dict(
        initial_l2_norm_clip=initial_l2_norm_clip,
        noise_multiplier=value_noise_multiplier,
        target_unclipped_quantile=target_unclipped_quantile,
        learning_rate=learning_rate,
        clipped_count_stddev=clipped_count_stddev,
        expected_num_records=clients_per_round,
        geometric_update=True,
    )
    if noise_seed is None:
      query = tfp.QuantileAdaptiveClipSumQuery(**arguments)
    else:
      query = seeded_query.SeededQuantileAdaptiveClipSumQuery(
          **arguments, noise_seed=noise_seed)
    query = tfp.NormalizedQuery(query, denominator=clients_per_round)
    return cls(query, canaries)

  @classmethod
  def gaussian_fixed(
      cls,
      noise_multiplier: float,
      clients_per_round: float,
      clip: float,
      *,
      canaries: canaries_lib.CanaryConfig,
      noise_seed: Optional[int] = None,
  ) -> CanaryDPFactory:
    """Fixed clipping and Gaussian noise, with canaries.

    The query TFF's `DifferentiallyPrivateFactory.gaussian_fixed` builds
    (DP-FedAvg, McMahan et al. 2018, https://arxiv.org/abs/1710.06963): clip
    each record to L2 norm `clip`, add N(0, (z * clip)^2) to the sum, divide by
    `clients_per_round`. Canaries (Andrew et al. 2024, arXiv 2302.03098) enter
    the sum at norm `clip`.

    Args:
      noise_multiplier: z >= 0.
      clients_per_round: Expected clients per round (> 0), the denominator.
      clip: The clip norm C > 0.
      canaries: The `CanaryConfig`.
      noise_seed: None (TFF's unseeded noise) or a seed for reproducible
        simulation noise; see the module docstring. Never in deployment.

    Returns:
      A `CanaryDPFactory`.

    Raises:
      TypeError, ValueError: for bad arguments, naming them.
    """
    noise_multiplier, clients_per_round = _check_noise(noise_multiplier,
                                                       clients_per_round)
    clip = validation.as_positive(clip, "clip")
    canaries = _check_config(canaries)
    if noise_seed is None:
      sum_query = tfp.GaussianSumQuery(l2_norm_clip=clip,
                                       stddev=clip * noise_multiplier)
    else:
      sum_query = seeded_query.SeededGaussianSumQuery(
          l2_norm_clip=clip, stddev=clip * noise_multiplier,
          noise_seed=noise_seed)
    query = tfp.NormalizedQuery(sum_query, denominator=clients_per_round)
    return cls(query, canaries)

  def __init__(
      self,
      query: tfp.DPQuery,
      canaries: canaries_lib.CanaryConfig,
      record_aggregation_factory: Optional[
          tff.aggregators.UnweightedAggregationFactory] = None,
  ):
    """Initializes the factory.

    Args:
      query: A `tfp.GaussianSumQuery` or `tfp.QuantileAdaptiveClipSumQuery`
        (or a subclass, such as the seeded queries of
        `tff_canary.federated.seeded_query`), optionally in a `tfp.NormalizedQuery`
        (what TFF's named constructors build). The noise is the query's.
      canaries: The `CanaryConfig`.
      record_aggregation_factory: Aggregates the clients' clipped records, as
        in TFF's factory (default `tff.aggregators.SumFactory`); it must
        implement a sum that does not increase sensitivity.

    Raises:
      TypeError: for a query or factory of another kind, or a `canaries` that
        is not a `CanaryConfig`.
    """
    self._adapter = _adapter_for(query)
    self._query = query
    self._canaries = _check_config(canaries)
    if record_aggregation_factory is None:
      record_aggregation_factory = tff.aggregators.SumFactory()
    if not isinstance(record_aggregation_factory,
                      tff.aggregators.UnweightedAggregationFactory):
      raise TypeError("record_aggregation_factory must be a "
                      "tff.aggregators.UnweightedAggregationFactory, got "
                      f"{record_aggregation_factory!r}.")
    self._record_aggregation_factory = record_aggregation_factory

  @property
  def canaries(self) -> canaries_lib.CanaryConfig:
    return self._canaries

  @property
  def query(self) -> tfp.DPQuery:
    return self._query

  def create(self, value_type) -> tff.templates.AggregationProcess:
    """Builds the aggregation process for `value_type` (the model weights).

    Warns (`tff_canary.federated.canaries.TooManyCanariesWarning`) when the number of
    canaries exceeds dim / 100.
    """
    value_type = tff.types.to_type(value_type)
    try:
      specs = tff.types.type_to_tf_tensor_specs(value_type)
    except Exception as e:  # pylint: disable=broad-except
      raise TypeError(f"value_type must be a structure of tensors, got "
                      f"{value_type}: {e}") from None
    dim = canaries_lib.tensor_specs_dim(specs)
    config = self._canaries
    canaries_lib.check_orthogonality(config.num_canaries, dim)
    adapter = self._adapter
    query = self._query
    seed = config.seed
    events = np.asarray(config.participation.events, np.int32)
    has_canaries = events.shape[0] > 0
    record_aggregate = config.record_aggregate

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
    query_record_type = get_query_record.type_signature.result
    record_agg_process = self._record_aggregation_factory.create(
        query_record_type)
    agg_output_type = record_agg_process.next.type_signature.result.result.member

    @tff.tensorflow.computation
    def canary_state_fn():
      return (tf.constant(0, tf.int32), tf.constant(seed, tf.int64),
              tf.constant(events, tf.int32, shape=events.shape))

    round_type, seed_type, schedule_type = (
        canary_state_fn.type_signature.result)

    @tff.tensorflow.computation(params_type, agg_output_type, round_type,
                                seed_type, schedule_type)
    def add_canaries(params, sample_state, round_num, seed_t, schedule):
      clip = adapter.clip(params)
      ids = tf.boolean_mask(schedule[:, 1], tf.equal(schedule[:, 0], round_num))
      count = tf.size(ids)
      if has_canaries:
        total = canaries_lib.canary_sum(seed_t, ids, dim)
        total = total * tf.cast(clip, tf.float32)
        canary_value = canaries_lib.unflatten_value(total, specs)
        sum_state = tf.nest.map_structure(
            lambda s, c: s + tf.cast(c, s.dtype),
            adapter.sum_part(sample_state), canary_value)
        sample_state = adapter.with_sum(sample_state, sum_state)
      return sample_state, count, tf.cast(clip, tf.float32)

    @tff.tensorflow.computation(agg_output_type, query_state_type)
    def get_noised_result(sample_state, global_state):
      return query.get_noised_result(sample_state, global_state)

    derive_metrics = tff.tensorflow.computation(query.derive_metrics,
                                                query_state_type)
    dp_event_type = get_noised_result.type_signature.result[2]
    convert_dp_event = tff.tensorflow.computation(
        lambda event: event.to_named_tuple(), dp_event_type)
    result_type = get_noised_result.type_signature.result[0]
    flatten_result = tff.tensorflow.computation(canaries_lib.flatten_value,
                                                result_type)
    next_round = tff.tensorflow.computation(lambda r: r + 1, round_type)

    @tff.federated_computation()
    def init_fn():
      query_initial_state = tff.federated_eval(query_initial_state_fn,
                                               tff.SERVER)
      query_sample_state = tff.federated_eval(query_sample_state_fn,
                                              tff.SERVER)
      round_num, seed_v, schedule = tff.federated_eval(canary_state_fn,
                                                       tff.SERVER)
      _, _, dp_event = tff.federated_map(
          get_noised_result, (query_sample_state, query_initial_state))
      dp_event = tff.federated_map(convert_dp_event, dp_event)
      is_init_state = tff.federated_value(True, tff.SERVER)
      state = CanaryDPAggregatorState(
          query_initial_state, record_agg_process.initialize(), dp_event,
          is_init_state, round_num, seed_v, schedule)
      return tff.federated_zip(state)

    @tff.federated_computation(init_fn.type_signature.result,
                               tff.FederatedType(value_type, tff.CLIENTS))
    def next_fn(state, value):
      query_state, agg_state, _, _, round_num, seed_v, schedule = state
      server_params = tff.federated_map(derive_sample_params, query_state)
      params = tff.federated_broadcast(server_params)
      record = tff.federated_map(get_query_record, (params, value))
      record_agg_output = record_agg_process.next(agg_state, record)
      sample_state, count, clip = tff.federated_map(
          add_canaries, (server_params, record_agg_output.result, round_num,
                         seed_v, schedule))
      result, new_query_state, dp_event = tff.federated_map(
          get_noised_result, (sample_state, query_state))
      dp_event = tff.federated_map(convert_dp_event, dp_event)
      is_init_state = tff.federated_value(False, tff.SERVER)
      query_metrics = tff.federated_map(derive_metrics, new_query_state)
      new_state = CanaryDPAggregatorState(
          new_query_state, record_agg_output.state, dp_event, is_init_state,
          tff.federated_map(next_round, round_num), seed_v, schedule)
      measurements = collections.OrderedDict(
          dp_query_metrics=query_metrics,
          dp=record_agg_output.measurements,
          canaries_inserted=count,
          clip=clip,
          round_num=round_num)
      if record_aggregate:
        measurements["noised_aggregate"] = tff.federated_map(
            flatten_result, result)
      return tff.templates.MeasuredProcessOutput(
          tff.federated_zip(new_state), result,
          tff.federated_zip(measurements))

    return tff.templates.AggregationProcess(init_fn, next_fn)


def with_zeroing(inner_factory):
  """Wraps a factory in TFF's default adaptive zeroing.

  Exactly the zeroing of `tff.learning.dp_aggregator(..., zeroing=True)` (TFF
  0.87's `model_update_aggregator._default_zeroing`, called, not copied: zero
  a client value whose norm exceeds about 2x the 0.98 quantile of the norms
  seen, plus 1). With a `CanaryDPFactory` inside, it zeroes client values
  only, never canaries.
  """
  return _model_update_aggregator._default_zeroing(inner_factory)  # pylint: disable=protected-access


def canary_dp_aggregator(
    noise_multiplier: float,
    clients_per_round: float,
    canaries: canaries_lib.CanaryConfig,
    zeroing: bool = True,
    noise_seed: Optional[int] = None,
) -> tff.aggregators.UnweightedAggregationFactory:
  """`tff.learning.dp_aggregator` with canaries.

  Adaptive clipping and Gaussian noise with TFF's defaults
  (`CanaryDPFactory.gaussian_adaptive`; McMahan et al. 2018, Andrew et al.
  2021), wrapped, with `zeroing`, in TFF's default adaptive zeroing. Zeroing
  acts on client values before the DP factory; canaries are added inside it at
  the server and are never zeroed.

  Args:
    noise_multiplier: Effective noise multiplier z >= 0.
    clients_per_round: Expected clients per round (> 0).
    canaries: The `CanaryConfig`.
    zeroing: Whether to add TFF's default adaptive zeroing.
    noise_seed: None (unseeded noise, as in TFF) or a seed of simulated noise
      (`CanaryDPFactory.gaussian_adaptive`). Never in deployment.

  Returns:
    A `tff.aggregators.UnweightedAggregationFactory`.
  """
  if not isinstance(zeroing, (bool, np.bool_)):
    raise TypeError(f"zeroing must be a bool, got {zeroing!r}.")
  factory = CanaryDPFactory.gaussian_adaptive(noise_multiplier,
                                              clients_per_round,
                                              canaries=canaries,
                                              noise_seed=noise_seed)
  if zeroing:
    return with_zeroing(factory)
  return factory


__all__ = [
    "CanaryDPAggregatorState",
    "CanaryDPFactory",
    "canary_dp_aggregator",
]
