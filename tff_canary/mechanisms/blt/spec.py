"""BLT DP-FTRL: the `blt_buffers` setting, the BLT fitted to the epoch.

A buffered linear Toeplitz C (Dvijotham et al. 2024, arXiv 2404.16706;
McMahan, Xu & Zhang 2024, arXiv 2408.08868) of `blt_buffers` buffers,
fitted with SciPy (`stats.matrix.blt_fit.fit_blt`, deterministic: seed 0)
to the clients' participation: one participation in an epoch of
rounds_per_epoch rounds, restarted every epoch; with cyclic sampling, the
run's rounds with at most k participations one epoch apart, never
restarted (`matrix.participation_rule`); or, with `blt_output_scale` and
`blt_buf_decay`, the BLT of
those parameters (`stats.matrix.blt.blt`); everything else is
`matrix.MatrixMechanism`'s.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any, Optional

import numpy as np

from tff_canary.mechanisms import protocol
from tff_canary.mechanisms.matrix import spec as matrix
from tff_canary.stats import validation
from tff_canary.stats.matrix import blt as blt_lib
from tff_canary.stats.matrix import blt_fit

def _numbers(text: Any, name: str) -> str:
  """Comma-separated numbers ("0.3,0.15"), as their canonical text."""
  try:
    if not isinstance(text, str):
      raise ValueError
    return ",".join(repr(float(part)) for part in text.split(","))
  except ValueError:
    raise ValueError(f"{name} must be comma-separated numbers (e.g. "
                     f"0.3,0.15), got {validation.show(text)}.") from None


def _given(config) -> Optional[blt_lib.BLT]:
  """The BLT of the given `blt_output_scale` and `blt_buf_decay`, or None."""
  # A config.json from before these settings has neither: a fitted BLT.
  scale, decay = ((config.get(key) if isinstance(config, dict)
                   else getattr(config, key))
                  for key in ("blt_output_scale", "blt_buf_decay"))
  if scale is None and decay is None:
    return None
  if scale is None or decay is None:
    raise ValueError("give both blt_output_scale and blt_buf_decay (a BLT's "
                     f"parameters) or neither (a fitted BLT); got "
                     f"blt_output_scale={scale!r}, blt_buf_decay={decay!r}.")
  try:
    return blt_lib.blt([float(x) for x in scale.split(",")],
                       [float(x) for x in decay.split(",")])
  except ValueError as error:  # name the flags, not blt()'s arguments
    raise ValueError(str(error).replace("output_scale", "blt_output_scale")
                     .replace("buf_decay", "blt_buf_decay")) from None


SETTINGS = dict(
    blt_buffers=protocol.Setting(
        3, int, "With --aggregator=blt: the BLT's buffers, fitted to the "
        "clients' participation (default 3; with --blt_output_scale, "
        "their number).",
        lambda x, name: validation.as_int(x, name, minimum=1)),
    blt_output_scale=protocol.Setting(
        None, str, "With --aggregator=blt: a given BLT's output scales, "
        "comma-separated, with --blt_buf_decay (default: the BLT fitted to "
        "the clients' participation).", _numbers),
    blt_buf_decay=protocol.Setting(
        None, str, "With --aggregator=blt and --blt_output_scale: the given "
        "BLT's buffer decays in (-1, 1), distinct, comma-separated.",
        _numbers))


@functools.lru_cache(maxsize=8)
def fitted(rounds: int, buffers: int, participations: int = 1,
           separation: int = 1):
  """The BLT fitted to `participations` rounds at least `separation` apart
  in `rounds` (default one participation)."""
  return blt_fit.fit_blt(rounds=max(int(rounds), 2),
                         participations=int(participations),
                         separation=int(separation),
                         num_buffers=int(buffers)).strategy


@dataclasses.dataclass(frozen=True)
class BltMechanism(matrix.MatrixMechanism):
  """BLT DP-FTRL (module docstring)."""

  name = "blt"
  help = ("BLT DP-FTRL: a buffered linear Toeplitz strategy of "
          "--blt_buffers buffers fitted to the clients' participation (or "
          "given by --blt_output_scale and --blt_buf_decay), restarted every "
          "epoch (never, with --sampling=cyclic); needs a fixed --clip; "
          "docs/method/matrix-mechanisms.md.")
  settings = SETTINGS
  strategy_name = "fitted BLT strategy"

  def resolve(self, config) -> dict[str, Any]:
    values = super().resolve(config)
    given = _given(values)
    if given is not None:
      if config.blt_buffers not in (None, given.num_buffers):
        raise ValueError(f"blt_buffers={config.blt_buffers} differs from the "
                         f"given BLT's {given.num_buffers} buffers "
                         "(blt_output_scale, blt_buf_decay); leave it unset.")
      values["blt_buffers"] = given.num_buffers
    return values

  def strategy(self, settings, rounds_per_epoch: int):
    settings = self.settings_of(settings)
    given = _given(settings)
    if given is not None:
      return given
    buffers = settings.blt_buffers
    rule = matrix.participation_rule(settings, rounds_per_epoch)
    if rule is None:
      return fitted(rounds_per_epoch, buffers)
    return fitted(rule.rounds, buffers, rule.participations, rule.separation)

  def coefficients(self, settings, rounds_per_epoch: int) -> np.ndarray:
    return self.strategy(settings, rounds_per_epoch).coefficients(
        self.horizon(settings, rounds_per_epoch))

  def strategy_kwargs(self, settings, rounds_per_epoch: int
                      ) -> dict[str, Any]:
    return dict(strategy=self.strategy(settings, rounds_per_epoch))

  def section_settings(self, settings) -> list[str]:
    settings = self.settings_of(settings)
    if _given(settings) is not None:
      return [f"BLT of output scales {settings.blt_output_scale} and buffer "
              f"decays {settings.blt_buf_decay} (given), "
              f"{self.restarts_text(settings)}"]
    fit = ("one participation per epoch" if settings.sampling != "cyclic"
           else "the run's participation")
    return [f"BLT of {settings.blt_buffers} buffers fitted "
            f"to {fit}, {self.restarts_text(settings)}"]


MECHANISM = BltMechanism()
