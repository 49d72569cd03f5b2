"""Canary clients that are clients: the client-insertion mode.

docs/guide/insertion-modes.md. Server-side canaries (`factory`) measure the
noise step only; here, as in the paper's production recipe (Andrew et al.,
"One-shot Empirical Privacy Estimation for Federated Learning", ICLR 2024,
arXiv 2302.03098, Section 4 and Algorithm 2), a canary client's update is
replaced by `canary_norm * c_j` (c_j of `canary_directions`, or of
`orthogonal_transform`, laid out by `flat_layout`) and enters the user's
aggregator like any client's, so a clip, zeroing stage or user factory
before the noise acts on it (tests/federated/insertion/test_canary_clients.py).

Client data. A client is `OrderedDict(canary_id=ids, data=dataset)`, two
sequences (`compose_learning_process` wants a structure of sequences):
`ids` holds the client's canary id (int32, `REAL_CLIENT` = -1 for a real
client) and `data` the user's dataset, untouched (`wrap_dataset`); a canary
client j has an empty `data` of the real clients' element spec
(`canary_client`). `with_canary_clients` builds a round's list and
`scheduled_canary_ids` gives a round's canaries from a `CanaryConfig`'s
schedule (the server-side mode's events).

Client work (`build_canary_client_work`): the inner work's result for real
clients and, for a canary client, `ClientResult(canary_norm * c_j,
update_weight=1)`. The sign is a client update's (initial minus trained), so
the model moves along -c_j as with server-side canaries
(docs/method/sign-convention.md); the measurements add `canary_clients`.

The norm. `DEFAULT_CANARY_NORM` = 10, "a very large update" (Section 4)
above the clip, so the aggregator under test does the clipping: 100 times
TFF's initial adaptive clip (0.1), 10 times the paper's fixed clip of 1
(Section 5.4), and below the first threshold of TFF's default adaptive
zeroing (2 * 10 + 1 = 21). Under a fixed clip above the norm, a canary
enters at its norm. Zeroing and adaptive clipping see canary clients as
clients (the page above); `canary_client_outcomes` records a dropped canary
as a finding.
"""

from __future__ import annotations

import collections
from typing import Any, Callable, Optional, Sequence

import numpy as np
import tensorflow as tf
import tensorflow_federated as tff

from tff_canary.federated.insertion import canary_directions
from tff_canary.federated.insertion import construction
from tff_canary.federated.insertion import orthogonal_transform
from tff_canary.federated.insertion import scoring_factory
from tff_canary.federated.structures import flat_layout
from tff_canary.federated.runtime import worker_guard
from tff_canary.stats.canaries import canary_config
from tff_canary.stats.canaries import schedules
from tff_canary.stats import validation

worker_guard.install()

CANARY_ID = "canary_id"
DATA = "data"
REAL_CLIENT = -1
DEFAULT_CANARY_NORM = canary_config.DEFAULT_CANARY_NORM  # 10.0
MEASUREMENT_KEY = "canary_clients"


def _ids(canary_id: int) -> tf.data.Dataset:
  return tf.data.Dataset.from_tensors(tf.constant(canary_id, tf.int32))


def _check_dataset(dataset: Any, name: str) -> tf.data.Dataset:
  if not isinstance(dataset, tf.data.Dataset):
    raise TypeError(f"{name} must be a tf.data.Dataset, got "
                    f"{validation.show(dataset)}.")
  return dataset


def wrap_dataset(dataset: tf.data.Dataset) -> collections.OrderedDict:
  """A real client: `OrderedDict(canary_id=[-1], data=dataset)`."""
  return collections.OrderedDict([
      (CANARY_ID, _ids(REAL_CLIENT)),
      (DATA, _check_dataset(dataset, "dataset"))])


def canary_client(canary_id: int, like: tf.data.Dataset
                  ) -> collections.OrderedDict:
  """Canary client j: `OrderedDict(canary_id=[j], data=like.take(0))`.

  `like.take(0)` is empty and has exactly `like`'s element spec, so every
  client of a round has one TFF type.
  """
  canary_id = validation.as_int(canary_id, "canary_id", minimum=0)
  if canary_id > np.iinfo(np.int32).max:
    raise ValueError(f"canary_id must fit in int32, got {canary_id}.")
  like = _check_dataset(like, "like")
  return collections.OrderedDict([(CANARY_ID, _ids(canary_id)),
                                  (DATA, like.take(0))])


def with_canary_clients(
    client_datasets: Sequence[tf.data.Dataset],
    canary_ids: Sequence[int] | np.ndarray,
    canaries: Optional[canary_config.CanaryConfig] = None,
) -> list[collections.OrderedDict]:
  """A round's client data: the real clients wrapped, then one per canary.

  Args:
    client_datasets: The round's real client datasets (at least one), all of
      one element spec (the model's input).
    canary_ids: The canary clients of the round: distinct integers >= 0 (may
      be empty).
    canaries: Optional `CanaryConfig`; given, every id must be one of its
      inserted canaries (a held-out canary in training would make the audit
      compare inserted with inserted).

  Returns:
    `[wrap_dataset(d) for d in client_datasets]` followed by
    `canary_client(j, client_datasets[0])` for each j, for the `next` of a
    process from `build_canary_client_fedavg`.
  """
  if isinstance(client_datasets, tf.data.Dataset) or not isinstance(
      client_datasets, Sequence) or not client_datasets:
    raise TypeError("client_datasets must be a non-empty list of "
                    f"tf.data.Dataset, got {validation.show(client_datasets)}.")
  datasets = [_check_dataset(d, f"client_datasets[{i}]")
              for i, d in enumerate(client_datasets)]
  spec = datasets[0].element_spec
  for i, dataset in enumerate(datasets[1:], start=1):
    if dataset.element_spec != spec:
      raise ValueError(f"client_datasets[{i}] has element spec "
                       f"{dataset.element_spec}, client_datasets[0] {spec}.")
  ids = [validation.as_int(j, f"canary_ids[{i}]", minimum=0)
         for i, j in enumerate(np.asarray(canary_ids).reshape(-1).tolist()
                               if isinstance(canary_ids, np.ndarray)
                               else list(canary_ids))]
  if canaries is not None:
    canaries = construction.as_canaries(canaries)
    for i, j in enumerate(ids):
      if j >= canaries.num_canaries or not canaries.inserted[j]:
        kind = ("held out" if j < canaries.num_canaries else
                f"not one of its {canaries.num_canaries} canaries")
        raise ValueError(f"canary_ids[{i}] = {j} is {kind} in canaries; "
                         "only inserted canaries may join training.")
  if len(set(ids)) != len(ids):
    repeated = sorted({j for j in ids if ids.count(j) > 1})
    raise ValueError(f"canary_ids must be distinct, got {repeated} more than "
                     "once.")
  return ([wrap_dataset(d) for d in datasets]
          + [canary_client(j, datasets[0]) for j in ids])


def scheduled_canary_ids(canaries: canary_config.CanaryConfig,
                         round_num: int) -> np.ndarray:
  """The inserted canaries that a `CanaryConfig`'s schedule puts in a round.

  The same (round, canary id) events as the server-side mode
  (`canaries.participation`), so both modes run one schedule; held-out
  canaries never join. Pass them to `with_canary_clients`.
  """
  canaries = construction.as_canaries(canaries)
  round_num = validation.as_int(round_num, "round_num", minimum=0)
  if round_num >= canaries.num_rounds:
    raise ValueError(f"round_num must be below the schedule's num_rounds = "
                     f"{canaries.num_rounds}, got {round_num}.")
  events = np.asarray(canaries.participation.events)
  return events[events[:, 0] == round_num, 1].astype(np.int64)


def _keep_latest(unused_state, canary_id):
  return canary_id


def _first_id(ids):
  """The id in a client's one-element id sequence (-1 if it is empty)."""
  return ids.take(1).reduce(tf.constant(REAL_CLIENT, tf.int32), _keep_latest)


def build_canary_client_work(
    client_work: tff.learning.templates.ClientWorkProcess,
    canary_seed: int,
    canary_norm: float = DEFAULT_CANARY_NORM,
    *,
    canaries: Optional[canary_config.CanaryConfig] = None,
) -> tff.learning.templates.ClientWorkProcess:
  """Wraps `client_work` so that canary clients return their canary.

  Args:
    client_work: The inner `ClientWorkProcess`, whose data is a sequence.
    canary_seed: The canary seed s (canary j is `canary_direction(s, j, d)`).
    canary_norm: The L2 norm of a canary client's update (> 0); see the
      module docstring for the default.
    canaries: Optional `CanaryConfig` with seed s: with
      directions="orthogonal", canary j is its orthogonal canary
      (`orthogonal_transform`, one inverse transform per canary client).

  Returns:
    A `ClientWorkProcess` with the inner state, whose data is the
    `OrderedDict(canary_id=, data=)` of two sequences (module docstring)
    and whose measurements add `canary_clients`.

  Raises:
    TypeError, ValueError: for bad arguments, naming them.
  """
  if not isinstance(client_work, tff.learning.templates.ClientWorkProcess):
    raise TypeError("client_work must be a tff.learning.templates."
                    f"ClientWorkProcess, got {validation.show(client_work)}.")
  seed = schedules.as_seed(canary_seed, "canary_seed")
  norm = validation.as_positive(canary_norm, "canary_norm")
  orthogonal = construction.orthogonal(canaries, seed)
  signature = client_work.next.type_signature
  state_type, weights_type, data_type = signature.parameter
  if not isinstance(data_type.member, tff.SequenceType):
    raise TypeError("client_work must take a sequence of client data, got "
                    f"{data_type}.")
  result_type = signature.result.result.member
  specs = tff.types.type_to_tf_tensor_specs(result_type.update)
  dim = flat_layout.tensor_specs_dim(specs)
  if orthogonal:
    rows = orthogonal_transform.rows(seed, dim, canaries.num_canaries)
  wrapped_type = tff.StructWithPythonType(
      [(CANARY_ID, tff.SequenceType(np.int32)), (DATA, data_type.member)],
      collections.OrderedDict)

  # One computation per client: read the id, replace, count (each extra
  # federated_map costs the runtime a call per client).
  @tff.tensorflow.computation(result_type, tff.SequenceType(np.int32))
  def replace(result, ids):
    canary_id = _first_id(ids)

    def canary():
      if orthogonal:
        flat = norm * orthogonal_transform.canary_sum(
            tf.constant(seed, tf.int64), canary_id, dim, rows)
      else:
        flat = norm * canary_directions.canary_direction(seed, canary_id, dim)
      leaves = tf.nest.flatten(flat_layout.unflatten_value(flat, specs))
      return tf.nest.pack_sequence_as(result.update, leaves)

    is_canary = canary_id >= 0
    update = tf.cond(is_canary, canary, lambda: result.update)
    weight = tf.where(is_canary, tf.ones_like(result.update_weight),
                      result.update_weight)
    return (tff.learning.templates.ClientResult(update=update,
                                                update_weight=weight),
            tf.cast(is_canary, tf.int32))

  inner_names = tff.structure.name_list(signature.result.measurements.member)

  @tff.federated_computation(state_type, weights_type,
                             tff.FederatedType(wrapped_type, tff.CLIENTS))
  def next_fn(state, weights, client_data):
    output = client_work.next(state, weights, client_data[DATA])
    result, is_canary = tff.federated_map(
        replace, (output.result, client_data[CANARY_ID]))
    measurements = collections.OrderedDict(
        (name, output.measurements[name]) for name in inner_names)
    measurements[MEASUREMENT_KEY] = tff.federated_sum(is_canary)
    return tff.templates.MeasuredProcessOutput(
        output.state, result, tff.federated_zip(measurements))

  return tff.learning.templates.ClientWorkProcess(
      client_work.initialize, next_fn,
      get_hparams_fn=client_work.get_hparams,
      set_hparams_fn=client_work.set_hparams)


def build_canary_client_fedavg(
    model_fn: Callable[[], tff.learning.models.VariableModel],
    client_optimizer_fn: tff.learning.optimizers.Optimizer,
    server_optimizer_fn: Optional[tff.learning.optimizers.Optimizer] = None,
    model_distributor: Optional[
        tff.learning.templates.DistributionProcess] = None,
    model_aggregator: Optional[
        tff.aggregators.UnweightedAggregationFactory] = None,
    *,
    canary_seed: int,
    canary_norm: float = DEFAULT_CANARY_NORM,
    canaries: Optional[canary_config.CanaryConfig] = None,
    scores: str = "cosines",
    metrics_aggregator: Any = None,
    loop_implementation: Any = None,
) -> tff.learning.templates.LearningProcess:
  """`tff.learning.algorithms.build_unweighted_fed_avg` with canary clients.

  Composed as TFF composes unweighted FedAvg (McMahan et al. 2017; the DP
  variant McMahan et al. 2018, arXiv 1710.06963) from public parts:
  `build_broadcast_process`, `build_model_delta_client_work` (uniform
  weighting) wrapped by `build_canary_client_work`,
  `as_weighted_aggregator(model_aggregator)` and
  `build_apply_optimizer_finalizer`, joined by `compose_learning_process`.
  The arguments are the TFF builder's (a `tff.learning.models.VariableModel`
  callable; the default server optimizer is SGD at 1.0 as in TFF) plus the
  canary seed and norm; `next` takes `with_canary_clients(...)`'s data.

  With `canaries` (a `CanaryConfig` of seed `canary_seed`) whose directions
  are "orthogonal", canary clients return orthogonal canaries and the
  aggregator is wrapped in `scoring_factory.CanaryScoringFactory(...,
  scores=scores)` ("cosines" or "dot_products", as there).

  Raises:
    TypeError, ValueError: for bad arguments, naming them.
  """
  orthogonal = construction.orthogonal(canaries,
                           schedules.as_seed(canary_seed, "canary_seed"))
  validation.as_positive(canary_norm, "canary_norm")
  scores = validation.as_choice(scores, "scores", scoring_factory.SCORES)
  if scores != "cosines" and not orthogonal:
    raise ValueError(f"scores={scores!r} needs orthogonal canaries "
                     "(canaries=CanaryConfig(directions='orthogonal')), got "
                     f"canaries={validation.show(canaries)}.")
  if not callable(model_fn):
    raise TypeError("model_fn must be a callable that returns a "
                    f"tff.learning.models.VariableModel, got "
                    f"{validation.show(model_fn)}.")
  model_aggregator = construction.as_unweighted_factory(
      model_aggregator, "model_aggregator",
      tff.aggregators.UnweightedMeanFactory)
  if server_optimizer_fn is None:
    server_optimizer_fn = tff.learning.optimizers.build_sgdm(learning_rate=1.0)

  @tff.tensorflow.computation()
  def initial_model_weights_fn():
    return tff.learning.models.ModelWeights.from_model(model_fn())

  weights_type = initial_model_weights_fn.type_signature.result
  if model_distributor is None:
    model_distributor = tff.learning.templates.build_broadcast_process(
        weights_type)
  if orthogonal:
    model_aggregator = scoring_factory.CanaryScoringFactory(
        model_aggregator, canaries, scores=scores)
  aggregator = tff.aggregators.as_weighted_aggregator(model_aggregator).create(
      weights_type.trainable, tff.TensorType(np.float32))
  options = {}
  if metrics_aggregator is not None:
    options["metrics_aggregator"] = metrics_aggregator
  if loop_implementation is not None:
    options["loop_implementation"] = loop_implementation
  inner = tff.learning.templates.build_model_delta_client_work(
      model_fn, client_optimizer_fn,
      client_weighting=tff.learning.ClientWeighting.UNIFORM, **options)
  client_work = build_canary_client_work(inner, canary_seed, canary_norm,
                                         canaries=canaries)
  finalizer = tff.learning.templates.build_apply_optimizer_finalizer(
      server_optimizer_fn, weights_type)
  return tff.learning.templates.compose_learning_process(
      initial_model_weights_fn, model_distributor, client_work, aggregator,
      finalizer)
