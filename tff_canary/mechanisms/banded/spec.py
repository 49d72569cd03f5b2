"""Banded matrix-factorization DP-FTRL: the `bands` setting.

The b-banded square root C (Choquette-Choo et al. 2023, arXiv 2306.08153;
`stats.matrix.toeplitz.square_root_coefficients`), restarted every epoch
or, with cyclic sampling, never; everything else is
`matrix.MatrixMechanism`'s.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from tff_canary.mechanisms import protocol
from tff_canary.mechanisms.matrix import spec as matrix
from tff_canary.stats import validation
from tff_canary.stats.matrix import toeplitz

SETTINGS = dict(bands=protocol.Setting(
    4, int, "With --aggregator=banded: the strategy's bands b, its noise "
    "keeps the last b - 1 rounds' (default 4).",
    lambda x, name: validation.as_int(x, name, minimum=1)))


@dataclasses.dataclass(frozen=True)
class BandedMechanism(matrix.MatrixMechanism):
  """Banded DP-FTRL (module docstring)."""

  name = "banded"
  help = ("banded matrix-factorization DP-FTRL: the banded square root of "
          "--bands bands, restarted every epoch (never, with "
          "--sampling=cyclic); needs a fixed --clip; "
          "docs/method/matrix-mechanisms.md.")
  settings = SETTINGS
  strategy_name = "banded square-root strategy"

  def coefficients(self, settings, rounds_per_epoch: int) -> np.ndarray:
    return toeplitz.square_root_coefficients(self.settings_of(settings).bands)

  def section_settings(self, settings) -> list[str]:
    settings = self.settings_of(settings)
    return [f"{self.strategy_name} of {settings.bands} "
            f"bands, {self.restarts_text(settings)}"]


MECHANISM = BandedMechanism()
