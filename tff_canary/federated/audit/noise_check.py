"""A noise self-test for any DP aggregation process (the TFF side).

docs/method/noise-self-test.md: `check_aggregation_noise(aggregator,
value_type)` builds a FRESH aggregation process (from an unweighted factory,
or a given `tff.templates.AggregationProcess` `initialize`d anew, so no
state of a real run is touched), runs it for `num_rounds` rounds on clients
whose values are all ZERO, so that each round's result is its noise alone,
and tests that noise with `tff_canary.stats.noise.noise_stats.check_noise`.

The claimed per-coordinate std of round t is that of DP-FedAvg (McMahan et
al., ICLR 2018, arXiv 1710.06963, Algorithm 1):

    s_t = z_t * C_t / denominator

  * z_t: the value's noise multiplier in the DpEvent the state carries after
    round t (`tff.aggregators.differential_privacy.
    extract_dp_event_from_state`): a `GaussianDpEvent`, or for adaptive
    clipping a `ComposedDpEvent` whose FIRST event is the value's
    `GaussianDpEvent` (the second is the clipped count's).
  * C_t: the clip BEFORE round t (zero values move an adaptive clip), read
    from the DP query's global state by public field names: the
    tensorflow_privacy `NormalizedQuery` state's `numerator_state`, an
    adaptive query's `sum_state`, then `l2_norm_clip` (TFF's factories and
    `CanaryDPFactory` all have it).
  * denominator: the `NormalizedQuery` state's `denominator` field
    (clients_per_round in TFF's factories); a query without one is a plain
    sum (denominator 1). `clients_per_round=` overrides it.

The DP state is found anywhere in the process state (e.g. under TFF's zeroing
wrapper's `inner_agg`) as the first node with `query_state` and `dp_event`
fields (TFF's `DPAggregatorState`, `CanaryDPAggregatorState`). For any other
process, give `claimed_std` (one number, or one per round): it overrides the
whole derivation. Noise correlated across rounds (DP-FTRL's tree, banded,
BLT) has its own self-test, `tff_canary.mechanisms.correlated.noise_check`,
and TFF's distributed-DP chain (noise added after a random rotation)
`tff_canary.mechanisms.ddp.noise_check`. Every self-test runs its
computations in a private synchronous context when the user's loop has
installed a program or asynchronous one (`tff_canary.federated.runtime.
sync_context`).
"""

from __future__ import annotations

import contextlib
from typing import Any, Optional, Sequence

import dp_accounting
import numpy as np
import tensorflow as tf
import tensorflow_federated as tff

from tff_canary.stats.noise import noise_stats
from tff_canary.federated.structures import nested_search
from tff_canary.stats import validation
from tff_canary.federated.runtime import sync_context
from tff_canary.federated.runtime import worker_guard

worker_guard.install()

DEFAULT_ROUNDS = 4

_extract_dp_event = tff.aggregators.differential_privacy.extract_dp_event_from_state


class NoClaimError(ValueError):
  """The process state does not say which noise it claims; give claimed_std."""


def find_dp_state(state: Any, remedy: Optional[str] = None) -> Optional[Any]:
  """The first node (depth first) with `query_state` and `dp_event` fields;
  if there is none, None, or with `remedy` a `NoClaimError` ending with it."""
  node = nested_search.find_first(
      state, lambda node: hasattr(node, "query_state")
      and hasattr(node, "dp_event"))
  if node is None and remedy is not None:
    raise NoClaimError("the process state has no DP aggregator state (fields "
                       f"query_state and dp_event); {remedy}")
  return node


def denominator_of(query_state: Any) -> tuple[float, Any]:
  """(the `NormalizedQuery` state's denominator, its numerator's state), or
  (1, `query_state`) for a plain sum (module docstring)."""
  if hasattr(query_state, "denominator") and hasattr(query_state,
                                                     "numerator_state"):
    return float(query_state.denominator), query_state.numerator_state
  return 1.0, query_state


def clip_and_denominator(query_state: Any) -> tuple[float, float]:
  """(C, denominator) from a DP query's global state (module docstring)."""
  denominator, node = denominator_of(query_state)
  if hasattr(node, "sum_state"):
    node = node.sum_state
  if not hasattr(node, "l2_norm_clip"):
    if nested_search.find_first(node, lambda n: hasattr(n, "tree_state")):
      raise NoClaimError(
          "the DP query is a DP-FTRL tree (its state has a tree_state): its "
          "noise is correlated across rounds, which no per-round std "
          "describes; use tff_canary.mechanisms.correlated.noise_check."
          "check_correlated_noise.")
    raise NoClaimError(
        "the DP query's global state has no l2_norm_clip field (looked in "
        "numerator_state and sum_state) in "
        f"{validation.show(query_state)}; pass claimed_std.")
  return float(node.l2_norm_clip), denominator


def value_noise_multiplier(event: Any) -> float:
  """z of the value's Gaussian in a round's DpEvent (module docstring)."""
  if isinstance(event, dp_accounting.ComposedDpEvent) and event.events:
    event = event.events[0]
  # By class: a LaplaceDpEvent has a noise_multiplier too.
  if not isinstance(event, dp_accounting.GaussianDpEvent):
    raise NoClaimError(f"the round's DpEvent {event!r} is not a "
                       "GaussianDpEvent (or a ComposedDpEvent starting with "
                       "one); pass claimed_std.")
  return float(event.noise_multiplier)


def process_and_type(aggregator, value_type, check_type=None):
  """(a fresh process of `aggregator`, its value type): a factory's
  `create(value_type)`, or a given unweighted process (its own type; a given
  `value_type` must match it). `check_type(value_type)` runs before the
  factory builds anything."""
  if isinstance(aggregator, tff.templates.AggregationProcess):
    parameter = aggregator.next.type_signature.parameter
    if len(parameter) != 2:
      raise TypeError("aggregator must be an unweighted AggregationProcess "
                      "(next(state, value)); got one whose next takes "
                      f"{parameter}.")
    member = parameter[1].member
    if value_type is not None and not tff.types.to_type(
        value_type).is_equivalent_to(member):
      raise TypeError(f"value_type {value_type} differs from the process's "
                      f"value type {member}.")
    if check_type is not None:
      check_type(member)
    return aggregator, member
  if isinstance(aggregator, tff.aggregators.UnweightedAggregationFactory):
    if value_type is None:
      raise TypeError("value_type is required with a factory, got None.")
    try:
      value_type = tff.types.to_type(value_type)
    except Exception as e:  # pylint: disable=broad-except
      raise TypeError(f"value_type must be a TFF type (or convertible), got "
                      f"{validation.show(value_type)}: {e}") from None
    if check_type is not None:
      check_type(value_type)
    return aggregator.create(value_type), value_type
  raise TypeError("aggregator must be a tff.aggregators."
                  "UnweightedAggregationFactory or a tff.templates."
                  f"AggregationProcess, got {validation.show(aggregator)}.")


def zero_rounds(aggregator, value_type, num_rounds: int, num_clients: int,
                check_type=None):
  """Yields (the state before, the output) of each of `num_rounds` rounds of
  a fresh process of `aggregator` (`process_and_type`) on `num_clients`
  clients of zero values, in a private synchronous context (module
  docstring): every self-test's loop. Iterate it in `contextlib.closing`, so
  that an error while reading a round leaves that context at once."""
  process, value_type = process_and_type(aggregator, value_type, check_type)
  zeros = tf.nest.map_structure(
      lambda s: np.zeros(s.shape, s.dtype.as_numpy_dtype),
      tff.types.type_to_tf_tensor_specs(value_type))
  with sync_context.synchronous():
    state = process.initialize()
    for _ in range(num_rounds):
      output = process.next(state, [zeros] * num_clients)
      yield state, output
      state = output.state


def flat_tensors(result) -> list[np.ndarray]:
  """A round's result as flat float64 tensors, in `tf.nest.flatten` order."""
  return [np.asarray(x, np.float64).reshape(-1)
          for x in tf.nest.flatten(result)]


def check_aggregation_noise(
    aggregator: Any,
    value_type: Any = None,
    *,
    num_rounds: int = DEFAULT_ROUNDS,
    num_clients: int = 1,
    clients_per_round: Optional[float] = None,
    claimed_std: Any = None,
    level: float = noise_stats.DEFAULT_LEVEL,
    seed: int = 0,
    tensor_names: Optional[Sequence[str]] = None,
) -> noise_stats.NoiseCheck:
  """Runs a fresh aggregation on zero values and tests its noise.

  Args:
    aggregator: an unweighted aggregation factory (`create(value_type)` is
      called) or an unweighted `tff.templates.AggregationProcess` (initialized
      anew).
    value_type: the value's TFF type (e.g. a model's trainable weights type,
      `tff.learning.models.weights_type_from_model(model_fn).trainable`, or a
      list of `(np.float32, shape)`); optional for a process.
    num_rounds: rounds to run (>= 1); each round's result is one noise draw.
    num_clients: zero-valued clients per round (>= 1); the noise does not
      depend on it.
    clients_per_round: the normalizing denominator; default the query state's
      `denominator` (module docstring).
    claimed_std: the claimed per-coordinate std of the result, one number or
      one per round; overrides the derivation from the state.
    level: family-wise level of `noise_stats.check_noise`.
    seed: its subsample seed.
    tensor_names: names of the value's tensors in `tf.nest.flatten` order
      (default tensor0, ...).

  Returns:
    A `noise_stats.NoiseCheck`; its `claim` says how s_t was obtained.

  Raises:
    TypeError, ValueError: for bad arguments, naming them.
    NoClaimError: when the state does not give the claim and claimed_std is
      None.
  """
  num_rounds = validation.as_int(num_rounds, "num_rounds", minimum=1)
  num_clients = validation.as_int(num_clients, "num_clients", minimum=1)
  if clients_per_round is not None:
    clients_per_round = validation.as_positive(clients_per_round,
                                               "clients_per_round")
  if claimed_std is not None:
    claimed = noise_stats.as_claimed_stds(claimed_std, num_rounds)
  noise, stds, described = [], [], []
  with contextlib.closing(zero_rounds(aggregator, value_type, num_rounds,
                                      num_clients)) as zero:
    for state, output in zero:
      if claimed_std is None:
        clip, denominator = clip_and_denominator(
            find_dp_state(state, "pass claimed_std.").query_state)
        if clients_per_round is not None:
          denominator = clients_per_round
        z = value_noise_multiplier(_extract_dp_event(find_dp_state(
            output.state)))
        stds.append(z * clip / denominator)
        described.append(f"z={z:.6g}, C={clip:.6g}")
      noise.append(flat_tensors(output.result))
  if claimed_std is None:
    claim = (f"s_t = z_t (DpEvent) x C_t (l2_norm_clip before the round) / "
             f"denominator {denominator:g} "
             f"({'given' if clients_per_round is not None else 'query state'})"
             f"; {'; '.join(described)}")
  else:
    stds = claimed
    claim = "claimed_std given by the caller"
  return noise_stats.check_noise(noise, stds, level=level, seed=seed,
                                 tensor_names=tensor_names, claim=claim)


__all__ = ["DEFAULT_ROUNDS", "NoClaimError", "check_aggregation_noise",
           "clip_and_denominator", "denominator_of", "find_dp_state",
           "flat_tensors", "process_and_type", "value_noise_multiplier",
           "zero_rounds"]
