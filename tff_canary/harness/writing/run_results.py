"""After training: the cosine table and the report, into a run directory.

`write_results` is the last step of every run directory, whoever trained:
final_weights.npy, the cosine table (`cosine_pass.compute_cosine_table`, checked
against the seed and schedule in the trained aggregator state) as
cosines.npz and cosines.csv, then report.json, report.md and the plots
(`report.build_report`, `report.write_report`). config.json, ledger.json
and participation.npz must already be there (the report reads them).
"""

from __future__ import annotations

from typing import Any, Optional

import numpy as np

from tff_canary.stats.canaries import canary_config
from tff_canary.federated.scores import cosine_pass
from tff_canary.harness.reporting import report as report_lib
from tff_canary.harness.recording import run_dir as run_dir_lib
from tff_canary.stats import atomic_files


def write_results(rd: run_dir_lib.RunDir,
                  canaries: canary_config.CanaryConfig,
                  initial_weights: np.ndarray,
                  final_weights: np.ndarray,
                  aggregates: Optional[str],
                  *,
                  state: Any,
                  memory_budget_bytes: int = cosine_pass.DEFAULT_MEMORY_BUDGET_BYTES,
                  progress: bool = False,
                  plots: bool = True) -> report_lib.RunReport:
  """Writes final_weights.npy, the cosine table and the report; returns it.

  Args:
    initial_weights: theta_0, flat float32.
    final_weights: theta_T, flat float32.
    aggregates: The path of the recorded aggregates, or None (final-model
      cosines only).
    state: The trained learning process state (its canary seed and schedule
      are checked against `canaries`).
    memory_budget_bytes: Bound of the cosine work's arrays.
    progress: Show a progress bar over the canaries.
    plots: Draw plots/ too.
  """
  atomic_files.save_npy(rd.file(run_dir_lib.FINAL_WEIGHTS), final_weights)
  table = cosine_pass.compute_cosine_table(
      canaries, initial_weights, final_weights, aggregates,
      memory_budget_bytes=memory_budget_bytes, progress=progress, state=state)
  table.save_npz(rd.file(run_dir_lib.COSINES_NPZ))
  table.save_csv(rd.file(run_dir_lib.COSINES_CSV))
  report = report_lib.build_report(rd.path)
  report_lib.write_report(report, plots=plots)
  return report


__all__ = ["write_results"]
