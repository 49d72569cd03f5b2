"""Matrix-factorization DP-FTRL (banded, BLT): what the two mechanisms share.

DP-FTRL in streaming form with a lower-triangular Toeplitz strategy C
(docs/method/matrix-mechanisms.md; Choquette-Choo et al. 2023, arXiv
2306.08153) adds row t of C^-1 xi to round t's clipped sum, its buffers
zeroed after every shuffled epoch (`restart_every` = rounds_per_epoch, one
participation per epoch). Its runs are the tree's in everything but the
noise: a fixed clip, orthogonal canaries inserted by fair coins once per
epoch, no ledger, each round's canary scores in units of z C
(tree_scores.npy, `round_scores`) and the DP-FTRL report section, whose
claimed noise is `round_noise`: B = C^-1 per epoch
(`stats.matrix.strategy_noise`). The claim is the exact GDP epsilon of
mu = sens / z, sens = `sensitivity.restarted_sensitivity` of that noise
(`LinearNoise.claim`, the same value as `analytical.matrix_epsilon`).

`banded` and `blt` subclass `MatrixMechanism` with their strategy's
coefficients; their TFF half is `tff_canary.harness.running.matrix_tff`.
Canary clients are the tree's too: TFF's own factory over the same query,
unseeded.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

from tff_canary.harness.mechanisms import tree
from tff_canary.stats.correlated import linear_noise
from tff_canary.stats.matrix import strategy_noise


def value_of(config, key: str) -> Any:
  """`key` of an `ExperimentConfig` or of a config.json's values."""
  return config[key] if isinstance(config, dict) else getattr(config, key)


@dataclasses.dataclass(frozen=True)
class MatrixMechanism(tree.TreeMechanism):
  """A matrix mechanism restarted every epoch (module docstring); a
  subclass sets `name`, `settings`, `strategy_name` and `coefficients`."""

  tff_half = "tff_canary.harness.running.matrix_tff"
  client_aggregator = " (DP-FTRL matrix mechanism)"
  client_accounting = ("the matrix mechanism's accounting (the analytical ε)"
                       " is that of clients_per_round real clients, each "
                       "once per epoch")
  strategy_name = ""
  scores_of = "the strategy's"

  def resolve(self, config) -> dict[str, Any]:
    if config.noise_multiplier == 0.0:
      raise ValueError(f"aggregator={self.name!r} needs noise_multiplier > "
                       "0: its scores are in units of its fresh noise z C; "
                       "got noise_multiplier=0.0.")
    return {key: (setting.default if getattr(config, key) is None
                  else setting.check(getattr(config, key), key))
            for key, setting in self.settings.items()}

  def coefficients(self, config, rounds_per_epoch: int) -> np.ndarray:
    """C's c_0, c_1, ... for `config` (an `ExperimentConfig` or config.json
    values) and epochs of `rounds_per_epoch` rounds."""
    raise NotImplementedError

  def strategy_kwargs(self, config, rounds_per_epoch: int) -> dict[str, Any]:
    """The arguments of `MatrixAggregation` that give its C."""
    return dict(coefficients=self.coefficients(config, rounds_per_epoch))

  def round_noise(self, config, num_rounds: int, rounds_per_epoch: int
                  ) -> linear_noise.LinearNoise:
    """The claimed released noise of the run's rounds (module docstring)."""
    return strategy_noise.strategy_noise(
        self.coefficients(config, rounds_per_epoch), num_rounds,
        restart_every=rounds_per_epoch)

  def section_settings(self, config) -> list[str]:
    """The report's settings lines for this mechanism's strategy."""
    return [f"{self.strategy_name} restarted every epoch"]


__all__ = ["MatrixMechanism", "value_of"]
