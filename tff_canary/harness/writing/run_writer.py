"""A run directory from any TFF training loop: `RunWriter`.

Give a learning process this package's canary aggregator
(`tff_canary.federated.insertion.factory`), then

    writer = run_writer.RunWriter("runs/mine", config,
                                  process.get_model_weights(state), delta=1e-6)
    for each round:
      output = process.next(state, client_data)
      state = output.state
      writer.round(output)
    report = writer.finish(state)

and the directory holds the files an experiment writes (`run_dir` lists
them; not checkpoints/), so `python -m tff_canary report DIR` recomputes it
at any delta (docs/guide/drop-in.md). Each `round(output)` pops the round's
`noised_aggregate` out of `output.metrics` into aggregates.npy and keeps a
row of metrics.csv and the round's DpEvent; `finish(state)` writes the rest
(`run_results.write_results`).

Derived, not asked for: dim, clients_per_round and the noise multiplier
(docs/guide/drop-in.md), the round (the aggregator's `round_num`
measurement, so the loop's own numbering, 0- or 1-based, does not matter),
the clip and canaries inserted (measurements). Checked as they come: the
canaries inserted each round against `canaries`' schedule (so a writer
given another CanaryConfig than the aggregator's fails at the first round
where the counts differ, else at `finish`), each round recorded once, the
state after a round against that round. A DP-FTRL
run is refused at its first round (`RunWriter.round`). Without a state
(`release_manager.CanaryReleaseManager`), a round's DpEvent is the trained
state's at `finish`: exact for this package's aggregator, whose DpEvent
depends only on its noise multipliers, which are fixed for the run.

Not resumable: the aggregates reach the disk each round, the rest at
`finish`. After a crash the directory holds aggregates.npy,
initial_weights.npy and participation.npz but no config.json; a new writer
refuses it unless `overwrite=True`, which starts over, and `finish` refuses
a run whose rounds were not all recorded by one writer: rerun the loop from
the start into a new directory.
"""

from __future__ import annotations

import os
import time
from typing import Any, Optional

import numpy as np

from tff_canary.stats.canaries import canary_config
from tff_canary.federated.scores import aggregate_recorder
from tff_canary.federated.scores import cosine_pass
from tff_canary.federated.insertion import measurement_keys
from tff_canary.federated.insertion import state_check
from tff_canary.harness.writing import loop_settings
from tff_canary.harness.reporting import report as report_lib
from tff_canary.harness.writing import round_metrics
from tff_canary.harness.recording import run_dir as run_dir_lib
from tff_canary.harness.writing import run_results
from tff_canary.stats.accounting import effective_noise
from tff_canary.stats.accounting import ledger as ledger_lib
from tff_canary.stats import atomic_files
from tff_canary.stats import validation

# Files of an earlier run that a writer with overwrite=True deletes.
_EARLIER = (run_dir_lib.CONFIG, run_dir_lib.METRICS, run_dir_lib.LEDGER,
            run_dir_lib.COSINES_CSV, run_dir_lib.COSINES_NPZ,
            run_dir_lib.REPORT_JSON, run_dir_lib.REPORT_MD,
            run_dir_lib.INITIAL_WEIGHTS, run_dir_lib.FINAL_WEIGHTS,
            run_dir_lib.NOISE_CHECK, run_dir_lib.AGGREGATES,
            run_dir_lib.AGGREGATES + ".rounds.json")


class RunWriter:
  """Writes a run directory from a training loop (module docstring)."""

  def __init__(self, output_dir: str | os.PathLike,
               canaries: canary_config.CanaryConfig,
               initial_weights: Any = None, *, overwrite: bool = False,
               memory_budget_bytes: int = cosine_pass.DEFAULT_MEMORY_BUDGET_BYTES,
               progress: bool = False, **settings: Any):
    """Starts a run directory; writes participation.npz (and
    initial_weights.npy when given).

    Args:
      output_dir: The run directory (created).
      canaries: The `CanaryConfig` the aggregator was built with.
      initial_weights: theta_0: the initial state, its `ModelWeights`, or
        the trainable weights (structure or flat); or None, to give it to
        `finish`.
      overwrite: Start over a directory that holds a run (its results and
        aggregates are deleted).
      memory_budget_bytes: Bound of the cosine work's arrays at `finish`.
      progress: Show a progress bar over the canaries at `finish`.
      **settings: `loop_settings.LoopSettings` fields: `delta` (or
        `num_clients` for the paper's default), `num_clients`, `sampling`,
        `clients_per_round`, `task`, `seed`.

    Raises:
      TypeError, ValueError: for bad arguments (the message names them).
      FileExistsError: if `output_dir` holds a run and not `overwrite`.
    """
    if not isinstance(output_dir, (str, os.PathLike)) or not output_dir:
      raise TypeError(f"output_dir must be a non-empty path, got "
                      f"{validation.show(output_dir)}.")
    if not isinstance(canaries, canary_config.CanaryConfig):
      raise TypeError(f"canaries must be a CanaryConfig, got "
                      f"{validation.show(canaries)}.")
    if canaries.num_canaries == 0:
      raise ValueError("canaries has no canaries (num_inserted = num_held_out "
                       "= 0): there is nothing to estimate.")
    self.settings = loop_settings.LoopSettings(**settings)
    self._initial = self._dim = None
    if initial_weights is not None:
      self._initial = round_metrics.flat_trainable(initial_weights,
                                                   "initial_weights")
      self._dim = validation.as_dim(self._initial.size,
                                    "dim (of initial_weights)")
    validation.as_bool(overwrite, "overwrite")
    self._budget = validation.as_int(memory_budget_bytes,
                                     "memory_budget_bytes", minimum=1)
    self._progress = bool(progress)
    self.canaries = canaries
    self._scheduled = np.bincount(canaries.participation.events[:, 0],
                                  minlength=canaries.num_rounds)
    self._rows: dict[int, dict[str, Any]] = {}
    self._events: dict[int, Any] = {}
    self._recorder = None  # made at the first round, when dim is known
    self._finished = False

    self.run_dir = rd = run_dir_lib.RunDir(output_dir)
    existing = [n for n in (run_dir_lib.CONFIG, run_dir_lib.AGGREGATES)
                if rd.exists(n)]
    if existing and not overwrite:
      raise FileExistsError(
          f"{rd.path} already holds {existing}: choose a new output_dir, or "
          "pass overwrite=True to start it over.")
    os.makedirs(rd.path, exist_ok=True)
    for name in _EARLIER:
      if rd.exists(name):
        os.remove(rd.file(name))
    if self._initial is not None:
      atomic_files.save_npy(rd.file(run_dir_lib.INITIAL_WEIGHTS),
                            self._initial)
    atomic_files.save_npz(rd.file(run_dir_lib.PARTICIPATION),
                          events=canaries.participation.events)
    self._last = time.perf_counter()

  @property
  def dim(self) -> Optional[int]:
    """The number of trainable parameters (None until weights or an
    aggregate are seen)."""
    return self._dim

  @property
  def num_rounds(self) -> int:
    """Rounds of the canaries' schedule: the run must do exactly these."""
    return self.canaries.num_rounds

  @property
  def rounds_recorded(self) -> list[int]:
    return sorted(self._rows)

  def record_noise_check(self, result: Any) -> None:
    """Saves a noise self-test's result as the run's noise_check.json.

    `result` is what `tff_canary.mechanisms.canary_noise_check.check_noise`
    (or `noise_check.check_aggregation_noise`) returns for the loop's
    aggregator; the report's headline then shows its verdict instead of
    "not run".
    """
    self._check_open()
    if not callable(getattr(result, "as_dict", None)):
      raise TypeError(f"result must be a noise check result (as_dict()), got "
                      f"{type(result).__name__}.")
    atomic_files.write_json(self.run_dir.file(run_dir_lib.NOISE_CHECK),
                            result.as_dict())

  def _check_open(self) -> None:
    if self._finished:
      raise ValueError(f"this RunWriter has finished {self.run_dir.path}; "
                       "start a new one for another run.")

  def round(self, output: Any, state: Any = None) -> int:
    """Records one round; returns its index (the aggregator's `round_num`).

    Args:
      output: The round's `LearningProcessOutput` (its `metrics` and
        `state` are used), or its metrics (any nesting, e.g. as a
        `tff.program.ReleaseManager` receives them). `noised_aggregate` is
        popped out of them.
      state: The state after the round, when `output` is metrics only
        (optional: without it the round's DpEvent is taken at `finish`).

    Raises:
      ValueError: if the metrics hold no canary measurements (or no
        `noised_aggregate` when `canaries.record_aggregates`), the round is
        past the schedule or was recorded already, its canaries inserted
        differ from the schedule's, the state is not the one after it, or
        the round is DP-FTRL's (module docstring).
    """
    self._check_open()
    metrics = output
    if hasattr(output, "metrics") and hasattr(output, "state"):
      if state is not None:
        raise ValueError("give the state in output or as state=, not both.")
      metrics, state = output.metrics, output.state
    measurements = round_metrics.canary_measurements(metrics)
    if measurements is None:
      raise ValueError(
          f"output holds no canary measurements (canaries_inserted, "
          f"round_num, clip): is the process built with this package's "
          f"aggregator as its model_aggregator? Got "
          f"{validation.show(metrics)}.")
    round_num = validation.as_int(np.asarray(measurements["round_num"]),
                                  "the round_num measurement", minimum=0)
    if round_num >= self.num_rounds:
      raise ValueError(
          f"round {round_num} is past the canaries' schedule of "
          f"{self.num_rounds} rounds: build the CanaryConfig for the rounds "
          "the loop runs.")
    if round_num in self._rows:
      raise ValueError(f"round {round_num} was recorded already (a loop "
                       "that reruns a round must not record it twice).")
    inserted = int(np.asarray(measurements["canaries_inserted"]))
    if inserted != self._scheduled[round_num]:
      raise ValueError(
          f"round {round_num} inserted {inserted} canaries but canaries' "
          f"schedule has {self._scheduled[round_num]}: canaries is not the "
          "CanaryConfig the aggregator was built with.")
    if measurement_keys.TREE_SCORES_KEY in measurements:
      raise ValueError(
          f"round {round_num} reports {measurement_keys.TREE_SCORES_KEY!r}: "
          "a DP-FTRL (tree aggregation) run, whose rounds' noises are "
          "correlated and whose privacy is per tree. A RunWriter records "
          "DP-FedAvg runs; keep the scores of each round and use "
          "tff_canary.stats.correlated (gls_statistics, tree_accounting).")
    event = None if state is None else self._event_after(state, round_num)
    if event is not None:  # refused now, not at finish: a clear message
      effective_noise.effective_noise_multiplier(
          event, where=f"the DpEvent of round {round_num}")
    if self.canaries.record_aggregates:
      self._record_aggregate(metrics, measurements, round_num)
    loss, accuracy = round_metrics.train_loss_accuracy(metrics)
    now = time.perf_counter()
    self._rows[round_num] = dict(
        round=round_num, loss=loss, accuracy=accuracy,
        clip=float(np.asarray(measurements["clip"])),
        canaries_inserted=inserted, seconds=round(now - self._last, 3))
    self._last = now
    self._events[round_num] = event
    return round_num

  def _record_aggregate(self, metrics, measurements, round_num) -> None:
    if aggregate_recorder.AGGREGATE_KEY not in measurements:
      raise ValueError(
          f"the measurements of round {round_num} hold no "
          f"{aggregate_recorder.AGGREGATE_KEY!r}: build the CanaryConfig with "
          "record_aggregates=True (or the writer's with False).")
    if self._recorder is None:
      if self._dim is None:
        size = np.size(measurements[aggregate_recorder.AGGREGATE_KEY])
        self._dim = validation.as_dim(size, "dim (of the noised aggregate)")
      self._recorder = aggregate_recorder.AggregateRecorder(
          self.run_dir.file(run_dir_lib.AGGREGATES), self._dim,
          self.num_rounds)
    self._recorder.record(metrics)

  def _canary_state(self, state: Any) -> Any:
    node = round_metrics.canary_state(state)
    if node is None:
      raise ValueError(f"state holds no canary aggregator state "
                       f"(canary_process.CanaryDPAggregatorState); got "
                       f"{validation.show(state)}.")
    return node

  def _event_after(self, state: Any, round_num: int) -> Any:
    """The DpEvent of `round_num` from the state after it (checked)."""
    node = self._canary_state(state)
    done = int(np.asarray(node.round_num))
    if done != round_num + 1:
      raise ValueError(f"state is the state after {done} rounds, not after "
                       f"round {round_num}: pass the state next() returned "
                       "with these metrics.")
    return node.dp_event

  def finish(self, state: Any, final_weights: Any = None, *,
             initial_weights: Any = None,
             plots: bool = True) -> report_lib.RunReport:
    """Writes the rest of the run directory; returns its report.

    Args:
      state: The learning process state after the last round.
      final_weights: theta_T; default the state's `global_model_weights`.
      initial_weights: theta_0, if the constructor was not given it.
      plots: Draw plots/ too.

    Raises:
      ValueError: if a round of the schedule was not recorded, the state is
        not after the last round, or its canary seed or schedule is not
        `canaries`' (`state_check.check_state`); if theta_0 is given twice or
        never.
    """
    self._check_open()
    if (initial_weights is None) == (self._initial is None):
      raise ValueError("give initial_weights once: to the RunWriter or to "
                       "finish (got " + ("both" if initial_weights is not None
                                         else "neither") + ").")
    node = self._canary_state(state)
    missing = [r for r in range(self.num_rounds) if r not in self._rows]
    if missing:
      raise ValueError(
          f"rounds {missing[:10]}{' ...' if len(missing) > 10 else ''} of "
          f"the canaries' {self.num_rounds} were not recorded ({len(missing)} "
          "missing): the canaries scheduled there would count as inserted "
          "without their aggregates. Record every round with one writer.")
    done = int(np.asarray(node.round_num))
    if done != self.num_rounds:
      raise ValueError(f"state is after {done} rounds, but the run recorded "
                       f"{self.num_rounds}: pass the state after the last "
                       "round.")
    state_check.check_state(self.canaries, state)
    clients_per_round = self.settings.resolve_clients_per_round(
        round_metrics.clients_per_round(node))
    initial = self._initial
    if initial_weights is not None:
      initial = round_metrics.flat_trainable(initial_weights,
                                             "initial_weights")
    final = round_metrics.flat_trainable(
        state if final_weights is None else final_weights, "final_weights")
    dims = {"initial_weights": initial.size, "final_weights": final.size}
    if self._dim is not None:
      dims["the recorded aggregates"] = self._dim
    if len(set(dims.values())) > 1:
      raise ValueError(f"the dims differ: {dims}.")
    self._dim = validation.as_dim(final.size, "dim (of final_weights)")
    if initial_weights is not None:
      self._initial = initial
      atomic_files.save_npy(self.run_dir.file(run_dir_lib.INITIAL_WEIGHTS),
                            initial)
    events = [node.dp_event if self._events[r] is None else self._events[r]
              for r in range(self.num_rounds)]
    ledger = ledger_lib.Ledger(events)
    rd = self.run_dir
    rd.save_config(self.settings.config(self.canaries, self._dim, ledger,
                                        clients_per_round, rd.path))
    rd.save_metrics([self._rows[r] for r in range(self.num_rounds)])
    rd.save_ledger(ledger.events)
    aggregates = None
    if self._recorder is not None:
      self._recorder.close()
      aggregates = rd.file(run_dir_lib.AGGREGATES)
    report = run_results.write_results(
        rd, self.canaries, self._initial, final, aggregates, state=state,
        memory_budget_bytes=self._budget, progress=self._progress,
        plots=plots)
    self._finished = True
    return report


__all__ = ["RunWriter"]
