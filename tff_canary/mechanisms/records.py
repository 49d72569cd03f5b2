"""What a finished run recorded, loaded: `RunRecords` (NumPy only).

The harness reads a run directory once (`tff_canary.harness.reporting.
report.load_records`, every file checked there) and hands a mechanism's
claim (`protocol.Mechanism.claim`) and its report section the records, never
the directory: which files a run has is the mechanism's own declaration
(`Mechanism.records_ledger`, `Mechanism.round_scores`), and the records hold
just those.
"""

from __future__ import annotations

import dataclasses
import os
from typing import Any, Optional

import numpy as np


class RunDirError(ValueError):
  """A run directory is missing a file, or a file is corrupt or inconsistent
  (raised by its loading, `recording.run_dir`, and by what reads its
  records)."""


@dataclasses.dataclass(frozen=True)
class RunRecords:
  """A run's records (module docstring).

  Attributes:
    source: Where they were read from (the run directory), for messages.
    config: config.json's values.
    events: participation.npz's [n, 2] (round, canary id) events of the
      inserted canaries.
    ledger: The DpEvent ledger (`stats.accounting.ledger.Ledger`) of a
      mechanism that records one, else None.
    table: The cosine table (`stats.canaries.cosine_table.CosineTable`) of a
      mechanism scored by cosines, else None.
    scores: [candidates, rounds] float64, every candidate's score in every
      round (tree_scores.npy) of a mechanism with `round_scores`, else None.
    canaries: The run's `CanaryConfig` (its seeds, schedule and coins), with
      `scores`; else None.
    rounds_per_epoch: The client sampler's epoch, with `scores`; else None.
    insertion: Where the canaries entered, "server" or "clients".
  """

  source: str
  config: dict[str, Any]
  events: np.ndarray
  ledger: Any = None
  table: Any = None
  scores: Optional[np.ndarray] = None
  canaries: Any = None
  rounds_per_epoch: Optional[int] = None
  insertion: str = "server"

  def file(self, name: str) -> str:
    """The path of the run's file `name`, for messages."""
    return os.path.join(self.source, name)


__all__ = ["RunDirError", "RunRecords"]
