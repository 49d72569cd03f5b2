"""Is this `CanaryConfig` the one a run's aggregator trained with?

The canaries are never stored: after training they are regenerated from the
`CanaryConfig`'s seed, and their participations come from its schedule. A
config that differs from the training one (another seed, another schedule)
gives cosines of directions the model never carried, and no error of its own.
The aggregator's state carries the seed and the
(round, canary id) events it used (`canary_process.CanaryDPAggregatorState`),
so `check_state` compares them with the config before any cosine is taken.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from tff_canary.federated.insertion import construction
from tff_canary.federated.structures import nested_search
from tff_canary.stats.canaries import canary_config


def find_canary_state(tree: Any) -> Any:
  """The node of a state structure with `seed` and `schedule` fields."""
  return nested_search.find_first(
      tree, lambda node: hasattr(node, "_fields")
      and {"seed", "schedule"} <= set(node._fields))


def check_state(canaries: canary_config.CanaryConfig, state: Any) -> None:
  """Checks that `canaries` are the ones the aggregator trained with.

  Args:
    canaries: The `CanaryConfig` the cosines are to be computed for.
    state: The learning process state (its aggregator part is searched, also
      under a zeroing wrapper), a checkpoint loaded into one, or the
      `canary_process.CanaryDPAggregatorState` itself: any structure holding
      a named tuple with `seed` and `schedule` fields. Only those fields are
      read.

  Raises:
    ValueError: if no canary aggregator state is found, or its seed or its
      (round, canary id) events differ from those of `canaries` (the message
      shows both values).
  """
  construction.as_canaries(canaries)
  node = find_canary_state(getattr(state, "aggregator", state))
  if node is None:
    raise ValueError("state holds no canary aggregator state (a named tuple "
                     "with seed and schedule fields, canary_process."
                     f"CanaryDPAggregatorState); got {type(state).__name__}.")
  seed = int(np.asarray(node.seed))
  if seed != canaries.seed:
    raise ValueError(f"canaries.seed = {canaries.seed} but "
                     f"the aggregator state has seed = {seed}: these are not "
                     "the canaries this run trained with.")
  ours = canaries.participation.events
  theirs = np.asarray(node.schedule).reshape(-1, 2).astype(np.int64)
  if ours.shape == theirs.shape and np.array_equal(ours, theirs):
    return
  common = min(len(ours), len(theirs))
  unequal = np.flatnonzero(np.any(ours[:common] != theirs[:common], axis=1))
  differ = int(unequal[0]) if unequal.size else common

  def show(events):
    if differ < len(events):
      return f"(round {events[differ][0]}, canary {events[differ][1]})"
    return "nothing"

  raise ValueError(
      f"canaries.schedule ({len(ours)} (round, canary id) events, "
      f"{canaries.schedule!r}) differs from the aggregator state's "
      f"({len(theirs)} events): event {differ} is {show(ours)} in "
      f"canaries and {show(theirs)} in the state. These are not the "
      "canaries this run trained with.")
