"""What a round of a TFF learning process reports, found by what it is.

TFF nests the canary aggregator's measurements and state at depths that
depend on the composition (under TFF's zeroing, docs/guide/drop-in.md), and
program loops rename the training metrics (`train_model` releases
`client_work/train` as `model_metrics`). These functions find each part
anywhere (`nested_search.find_first`), so a caller never hard-codes a path.
`flat_trainable` takes the model's trainable weights out of a state.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Optional

import numpy as np

from tff_canary.federated.structures import flat_layout
from tff_canary.federated.insertion import canary_process
from tff_canary.federated.structures import nested_search
from tff_canary.stats import validation

# Keys of the canary aggregator's measurements that identify them.
_MEASUREMENT_KEYS = ("canaries_inserted", "round_num", "clip")


def canary_measurements(metrics: Any) -> Optional[Mapping]:
  """The mapping of the canary aggregator's measurements (the one holding
  `canaries_inserted`, `round_num`, `clip` and, when recorded,
  `noised_aggregate`), or None if `metrics` has none (e.g. an evaluation)."""
  return nested_search.find_first(
      metrics, lambda m: isinstance(m, Mapping)
      and all(k in m for k in _MEASUREMENT_KEYS))


# The canary aggregator's state in a process state (`canary_process.state_in`).
canary_state = canary_process.state_in


def train_loss_accuracy(metrics: Any) -> tuple[float, float]:
  """(loss, accuracy) of the round's training, NaN where not reported.

  Looked up under `client_work` (a learning process's own metrics) or
  `model_metrics` (as `train_model` releases them), else anywhere; the
  accuracy is the first metric whose name contains "accuracy".
  """
  nan = float("nan")
  if not isinstance(metrics, Mapping):
    return nan, nan
  where = metrics.get("client_work", metrics.get("model_metrics", metrics))
  train = nested_search.find_first(
      where, lambda m: isinstance(m, Mapping) and "loss" in m)
  if not train:
    return nan, nan
  accuracy = next((v for k, v in train.items() if "accuracy" in k), nan)
  return float(train["loss"]), float(accuracy)


def clients_per_round(state: canary_process.CanaryDPAggregatorState
                     ) -> Optional[float]:
  """The query's fixed denominator (the `clients_per_round` the factory was
  built with), or None if the query is not a `tfp.NormalizedQuery`."""
  denominator = getattr(state.query_state, "denominator", None)
  return None if denominator is None else float(denominator)


def flat_trainable(weights: Any, name: str = "weights",
                   finite: bool = True) -> np.ndarray:
  """Trainable weights as a flat float32 vector, from a learning process
  state (its `global_model_weights`), `ModelWeights` (its `trainable`), a
  structure of arrays in `tf.nest.flatten` order, or a flat vector. With
  `finite` False, a diverged model's NaN weights pass (they are saved as
  they are)."""
  weights = getattr(weights, "global_model_weights", weights)
  weights = getattr(weights, "trainable", weights)
  if weights is None or isinstance(weights, (str, bytes)):
    raise TypeError(f"{name} must be model weights (a state, ModelWeights or "
                    f"arrays), got {validation.show(weights)}.")
  return flat_layout.flatten_numpy(weights, name, finite)


__all__ = ["canary_measurements", "canary_state", "clients_per_round",
           "flat_trainable", "train_loss_accuracy"]
