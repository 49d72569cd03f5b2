"""BLT DP-FTRL: the `blt_buffers` setting, the BLT fitted to the epoch.

A buffered linear Toeplitz C (Dvijotham et al. 2024, arXiv 2404.16706;
McMahan, Xu & Zhang 2024, arXiv 2408.08868) of `blt_buffers` buffers,
fitted with SciPy (`stats.matrix.blt_fit.fit_blt`, deterministic: seed 0)
to one participation in an epoch of rounds_per_epoch rounds, restarted
every epoch; everything else is `matrix.MatrixMechanism`'s.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any

import numpy as np

from tff_canary.harness.mechanisms import matrix
from tff_canary.harness.mechanisms import protocol
from tff_canary.stats.matrix import blt_fit
from tff_canary.stats import validation

SETTINGS = dict(blt_buffers=protocol.Setting(
    3, int, "With --aggregator=blt: the BLT's buffers, fitted to one "
    "participation per epoch (default 3).",
    lambda x, name: validation.as_int(x, name, minimum=1)))


@functools.lru_cache(maxsize=8)
def fitted(rounds_per_epoch: int, buffers: int):
  """The BLT fitted to one participation in `rounds_per_epoch` rounds."""
  return blt_fit.fit_blt(rounds=max(int(rounds_per_epoch), 2),
                         participations=1, separation=1,
                         num_buffers=int(buffers)).strategy


@dataclasses.dataclass(frozen=True)
class BltMechanism(matrix.MatrixMechanism):
  """BLT DP-FTRL (module docstring)."""

  name = "blt"
  settings = SETTINGS
  strategy_name = "fitted BLT strategy"

  def strategy(self, config, rounds_per_epoch: int):
    return fitted(rounds_per_epoch, matrix.value_of(config, "blt_buffers"))

  def coefficients(self, config, rounds_per_epoch: int) -> np.ndarray:
    return self.strategy(config, rounds_per_epoch).coefficients(
        rounds_per_epoch)

  def strategy_kwargs(self, config, rounds_per_epoch: int) -> dict[str, Any]:
    return dict(strategy=self.strategy(config, rounds_per_epoch))

  def section_settings(self, config) -> list[str]:
    return [f"BLT of {matrix.value_of(config, 'blt_buffers')} buffers fitted "
            "to one participation per epoch, restarted every epoch"]


MECHANISM = BltMechanism()
