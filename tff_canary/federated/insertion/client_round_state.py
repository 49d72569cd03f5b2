"""What a round of the client-insertion mode leaves in TFF's process state.

With canary clients (`canary_clients`) the canaries go through TFF's own
`DifferentiallyPrivateFactory`, which, unlike `factory`, reports neither the
noised aggregate nor the clip it used. The process state tells both, and the
round's DpEvent (docs/guide/insertion-modes.md): `dp_aggregator_state`
(TFF's `DPAggregatorState`, also under zeroing's `inner_agg`), `dp_event`
(TFF's public `extract_dp_event_from_state`), `query_clip` (the clip C_r of
the round that follows the state; TFF's `dp_query_metrics['clip']` is the
next round's) and `round_aggregate`: FedAvg's server step with SGD without
momentum is theta_t = theta_{t-1} - eta a_t (McMahan et al. 2018, arXiv
1710.06963, Algorithm 1; a_t the noised mean of the clipped client updates,
canary clients included, denominator clients_per_round), so a_t =
(theta_{t-1} - theta_t) / eta, laid out by `flat_layout`. With momentum (or
Adam) the weight change mixes earlier rounds' aggregates; the experiments
refuse that combination (`experiment_config`).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import tensorflow_federated as tff

from tff_canary.federated.structures import flat_layout
from tff_canary.federated.structures import nested_search
from tff_canary.stats import validation

_DP_STATE_FIELDS = {"query_state", "agg_state", "dp_event", "is_init_state"}


def dp_aggregator_state(state: Any) -> Any:
  """TFF's `DPAggregatorState` in a learning process state (searched under
  `state.aggregator` when there is one); ValueError if there is none."""
  node = nested_search.find_first(
      getattr(state, "aggregator", state),
      lambda s: hasattr(s, "_fields") and _DP_STATE_FIELDS <= set(s._fields))
  if node is None:
    raise ValueError("state holds no DifferentiallyPrivateFactory state "
                     "(TFF's DPAggregatorState); got "
                     f"{validation.show(state)}.")
  return node


def dp_event(state: Any) -> Any:
  """The DpEvent of the round that produced `state` (TFF's own)."""
  return tff.aggregators.differential_privacy.extract_dp_event_from_state(
      dp_aggregator_state(state))


# tensorflow_privacy's wrapper states, by their public fields: (the fields
# that name the wrapper, the field that holds the wrapped query's state).
_WRAPPERS = (
    ({"numerator_state", "denominator"}, "numerator_state"),  # Normalized
    ({"inner_query_state", "indicator_state"}, "inner_query_state"),  # Restart
    ({"sum_state", "quantile_estimator_state"}, "sum_state"),  # adaptive
    # matrix_query.MatrixFactorizationQuery: its fresh-noise query clips.
    ({"fresh_state", "buffers"}, "fresh_state"),
)


def _fields(node: Any) -> set[str]:
  return set(getattr(node, "_fields", ()) or ())


def query_clip(state: Any) -> float:
  """The DP sum query's clip in `state` (before a round, that round's clip).

  Found by tensorflow_privacy's public state fields from the outside in
  (`NormalizedQuery`, `RestartQuery`, an adaptive query's `sum_state`, down
  to a Gaussian query's `l2_norm_clip` or a DP-FTRL tree query's
  `clip_value`); ValueError naming the fields for a state of another kind.
  """
  query_state = dp_aggregator_state(state).query_state
  node, path = query_state, "query_state"
  for _ in range(16):  # wrappers nest a few levels deep
    fields = _fields(node)
    wrapped = next((inner for names, inner in _WRAPPERS if names <= fields),
                   None)
    if wrapped is None:
      break
    node, path = getattr(node, wrapped), f"{path}.{wrapped}"
  fields = _fields(node)
  if "l2_norm_clip" in fields:
    name = "l2_norm_clip"
  elif {"clip_value", "tree_state"} <= fields:
    name = "clip_value"
  else:
    raise ValueError(
        f"the DP query state at {path} is neither a Gaussian sum query's "
        "(l2_norm_clip) nor a DP-FTRL tree query's (clip_value, tree_state), "
        "under tensorflow_privacy's NormalizedQuery, RestartQuery or "
        "adaptive-clip wrappers or a MatrixFactorizationQuery: its fields "
        f"are {sorted(fields) or 'none'} in {validation.show(node)}.")
  return validation.as_nonnegative(float(np.asarray(getattr(node, name))),
                                   f"the query's {name} ({path}.{name})")


def round_aggregate(before: Any, after: Any,
                    server_learning_rate: float) -> np.ndarray:
  """a_t = (theta_{t-1} - theta_t) / eta, flat float32 (module docstring).

  Args:
    before: theta_{t-1}: the trainable weights before the round (a
      structure of arrays or a flat vector).
    after: theta_t, the same layout.
    server_learning_rate: eta > 0, of server SGD without momentum.
  """
  eta = validation.as_positive(server_learning_rate, "server_learning_rate")
  before = flat_layout.flatten_numpy(before, "before")
  after = flat_layout.flatten_numpy(after, "after")
  if before.shape != after.shape:
    raise ValueError(f"before and after differ in size: {before.size} and "
                     f"{after.size}.")
  delta = before.astype(np.float64) - after.astype(np.float64)
  return (delta / eta).astype(np.float32)


__all__ = ["dp_aggregator_state", "dp_event", "query_clip", "round_aggregate"]
