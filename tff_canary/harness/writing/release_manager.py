"""A `tff.program.ReleaseManager` that records a program loop into a run.

Program-style loops (`tff.simulation.run_training_process`,
`tff.learning.programs.train_model`) have no per-round hook; they hand each
round's metrics to release managers. `CanaryReleaseManager` passes every
release that holds the canary aggregator's measurements to a
`run_writer.RunWriter` (`RunWriter.round`, which pops `noised_aggregate`
out of it) and lets the others through (evaluation releases carry no
aggregator metrics). A release holding a learning process state (what
`train_model` gives its `model_output_manager`) is kept, the latest by its
aggregator's round counter, for `finish()`. Every release, with the
aggregate popped, is then passed on to the managers in `forward_to`.
docs/guide/drop-in.md shows both loops.
"""

from __future__ import annotations

from typing import Any, Optional, Sequence

import numpy as np
import tensorflow_federated as tff

from tff_canary.harness.reporting import report as report_lib
from tff_canary.harness.writing import round_metrics
from tff_canary.harness.writing import run_writer
from tff_canary.stats import validation


class CanaryReleaseManager(tff.program.ReleaseManager):
  """Records released training rounds into a `RunWriter` (module docstring)."""

  def __init__(self, writer: run_writer.RunWriter,
               forward_to: Sequence[tff.program.ReleaseManager] = ()):
    """Records into `writer`.

    Args:
      forward_to: Release managers that get every release after it is
        recorded (without `noised_aggregate`).
    """
    if not isinstance(writer, run_writer.RunWriter):
      raise TypeError(f"writer must be a RunWriter, got "
                      f"{validation.show(writer)}.")
    forward_to = tuple(forward_to)
    for i, manager in enumerate(forward_to):
      if not isinstance(manager, tff.program.ReleaseManager):
        raise TypeError(f"forward_to[{i}] must be a tff.program."
                        f"ReleaseManager, got {validation.show(manager)}.")
    self.writer = writer
    self._forward_to = forward_to
    self._state = None
    self._state_rounds = -1

  @property
  def state(self) -> Any:
    """The latest released learning process state (None if none was)."""
    return self._state

  async def release(self, value: Any, key: Any = None) -> None:
    """Records `value` if it is a training round's metrics, keeps it if it
    is a state, and passes it on to `forward_to`."""
    value = await tff.program.materialize_value(value)
    if round_metrics.canary_measurements(value) is not None:
      self.writer.round(value)
    else:
      node = round_metrics.canary_state(value)
      if node is not None and int(np.asarray(node.round_num)) > (
          self._state_rounds):
        self._state = value
        self._state_rounds = int(np.asarray(node.round_num))
    for manager in self._forward_to:
      await manager.release(value, key)

  def finish(self, state: Optional[Any] = None, final_weights: Any = None, *,
             initial_weights: Any = None,
             plots: bool = True) -> report_lib.RunReport:
    """`RunWriter.finish` with `state`, default the latest released one."""
    if state is None:
      state = self._state
    if state is None:
      raise ValueError(
          "no state: pass the trained state (run_training_process returns "
          "it), or give this manager to train_model as its "
          "model_output_manager too.")
    return self.writer.finish(state, final_weights,
                              initial_weights=initial_weights, plots=plots)


__all__ = ["CanaryReleaseManager"]
