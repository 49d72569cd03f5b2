"""What the aggregator did with each canary client, as TFF's measurements tell.

Canary clients (`canary_clients`, docs/guide/insertion-modes.md) enter the
user's aggregator like any client, so a stage of it may drop or shrink them.
Of TFF's stages, two say what they did in their measurements:

  * `tff.aggregators.zeroing_factory` (and the default zeroing of
    `tff.learning.dp_aggregator`): `zeroing_norm` (this round's threshold)
    and `zeroed_count`. A value is zeroed iff its norm, in the stage's norm
    order (TFF's default: L-inf), exceeds `zeroing_norm`.
  * `tff.aggregators.clipping_factory`: `clipping_norm` and `clipped_count`,
    clipping in L2 iff the L2 norm exceeds `clipping_norm`.

Both nest their inner measurements under `zeroing` / `clipping`.
`canary_client_outcomes` follows the canary's exact norms (its direction
regenerated) through each stage from the outside in (a clip shrinks it, a
zeroing drops it: `zeroed=True`, never a silent zero), and refuses a stage
that would act on more canaries than its count says (a wrong
`zeroing_norm_order`, or measurements of another round). The DP query's own
clip is not in TFF's measurements (a fixed query reports none, an adaptive
one the NEXT round's), so `dp_clipped` is not recorded here.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, Literal, Mapping, Sequence

import numpy as np

from tff_canary.federated.insertion import canary_directions
from tff_canary.federated.insertion import construction
from tff_canary.federated.insertion import orthogonal_transform
from tff_canary.stats.canaries import schedules
from tff_canary.stats import validation

StageKind = Literal["zeroing", "clipping"]
_STAGES: dict[str, tuple[str, str]] = {
    "zeroing": ("zeroing_norm", "zeroed_count"),
    "clipping": ("clipping_norm", "clipped_count"),
}


@dataclasses.dataclass(frozen=True)
class StageOutcome:
  """One measured stage's action on one canary.

  Attributes:
    kind: "zeroing" or "clipping".
    threshold: The stage's norm this round (`zeroing_norm`/`clipping_norm`).
    count: The stage's measured count of clients it acted on (all clients).
    canary_norm: The canary's norm as the stage measures it (its order;
      after the outer stages).
    acted: Whether the stage zeroed / clipped this canary.
  """
  kind: StageKind
  threshold: float
  count: int
  canary_norm: float
  acted: bool


@dataclasses.dataclass(frozen=True)
class CanaryOutcome:
  """A canary client in one round, and what the measured stages did to it."""
  round_num: int
  canary_id: int
  norm: float
  stages: tuple[StageOutcome, ...]

  @property
  def zeroed(self) -> bool:
    return any(s.kind == "zeroing" and s.acted for s in self.stages)

  @property
  def clipped(self) -> bool:
    return any(s.kind == "clipping" and s.acted for s in self.stages)

  def summary(self) -> str:
    if not self.stages:
      return (f"round {self.round_num}, canary {self.canary_id} (norm "
              f"{self.norm:.4g}): no zeroing or clipping stage in the "
              "measurements; the DP query's clip is not measured.")
    parts = [f"{s.kind} at {s.threshold:.4g} "
             f"{'ACTED' if s.acted else 'passed'} (canary {s.canary_norm:.4g},"
             f" count {s.count})" for s in self.stages]
    verdict = (" ZEROED: this canary did not reach the sum." if self.zeroed
               else "")
    return (f"round {self.round_num}, canary {self.canary_id} (norm "
            f"{self.norm:.4g}): " + "; ".join(parts) + "." + verdict)

  def as_dict(self) -> dict[str, Any]:
    out = dataclasses.asdict(self)
    out.update(zeroed=self.zeroed, clipped=self.clipped)
    return out


def measured_stages(metrics: Mapping[str, Any]) -> list[tuple[str, float, int]]:
  """(kind, threshold, count) of each measured stage, outermost first.

  `metrics` is a round's metrics (its `aggregator` entry is used) or the
  aggregator's measurements.
  """
  if not isinstance(metrics, Mapping):
    raise TypeError("metrics must be a mapping, got "
                    f"{validation.show(metrics)}.")
  node: Any = metrics.get("aggregator", metrics)
  stages = []
  while isinstance(node, Mapping):
    for kind, (norm_key, count_key) in _STAGES.items():
      if norm_key in node and count_key in node:
        stages.append((kind, float(np.asarray(node[norm_key])),
                       int(np.asarray(node[count_key]))))
        node = node.get(kind)
        break
    else:
      break
  return stages


def _norm(direction: np.ndarray, order: float) -> float:
  return float(np.linalg.norm(direction.astype(np.float64), ord=order))


def canary_client_outcomes(
    metrics: Mapping[str, Any],
    round_num: int,
    canary_ids: Sequence[int] | np.ndarray,
    canary_seed: int,
    canary_norm: float,
    dim: int,
    zeroing_norm_order: float = math.inf,
    *,
    canaries: Any = None,
) -> tuple[CanaryOutcome, ...]:
  """What each measured stage did to each canary client of a round.

  Args:
    metrics: The round's `output.metrics` (or its aggregator measurements).
    round_num: The round, recorded with each outcome.
    canary_ids: The round's canary clients (as given to
      `canary_clients.with_canary_clients`).
    canary_seed: The seed the process was built with.
    canary_norm: The L2 norm the process was built with.
    dim: d, the number of trainable parameters.
    zeroing_norm_order: The norm order of the zeroing stages: 1, 2 or inf
      (TFF's default for `zeroing_factory` and `dp_aggregator`).
    canaries: Optional `CanaryConfig` of seed `canary_seed`: with
      directions="orthogonal" the canaries' norms are the orthogonal ones'.

  Returns:
    One `CanaryOutcome` per canary id, in the order given.

  Raises:
    TypeError, ValueError: for bad arguments, naming them, and when a stage
      would act on more canaries than its measured count.
  """
  round_num = validation.as_int(round_num, "round_num", minimum=0)
  canary_seed = schedules.as_seed(canary_seed, "canary_seed")
  canary_norm = validation.as_positive(canary_norm, "canary_norm")
  dim = validation.as_dim(dim)
  order = zeroing_norm_order
  if isinstance(order, bool) or order not in (1, 2, math.inf):
    raise ValueError("zeroing_norm_order must be 1, 2 or inf, got "
                     f"{validation.show(order)}.")
  order = float(order)
  ids = [validation.as_int(j, f"canary_ids[{i}]", minimum=0)
         for i, j in enumerate(np.asarray(canary_ids).reshape(-1).tolist())]
  stages = measured_stages(metrics)
  if construction.orthogonal(canaries, canary_seed):
    block = orthogonal_transform.canary_block(canary_seed, ids, dim)
  else:
    block = canary_directions.canary_block(canary_seed, ids, dim)
  outcomes = []
  for j, direction in zip(ids, block):
    scale = canary_norm  # the canary's L2 norm as it stands after each stage
    records = []
    for kind, threshold, count in stages:
      if kind == "zeroing":
        seen = scale * _norm(direction, order)
        acted = seen > threshold
      else:
        seen = scale
        acted = seen > threshold
      records.append(StageOutcome(kind, threshold, count, seen, acted))
      if acted and kind == "zeroing":
        break
      if acted:
        scale = threshold
    outcomes.append(CanaryOutcome(round_num, j, canary_norm, tuple(records)))
  for position, (kind, threshold, count) in enumerate(stages):
    acted = sum(1 for o in outcomes if len(o.stages) > position
                and o.stages[position].acted)
    if acted > count:
      raise ValueError(
          f"the {kind} stage at {threshold:.6g} would have acted on {acted} "
          f"canaries but its measured count is {count}: "
          f"zeroing_norm_order={zeroing_norm_order!r}, canary_norm="
          f"{canary_norm!r} or canary_seed={canary_seed!r} is not the run's, "
          "or the metrics are another round's.")
  return tuple(outcomes)
