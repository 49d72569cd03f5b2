"""Matrix-factorization DP-FTRL (banded, BLT): what the two mechanisms share.

DP-FTRL in streaming form with a lower-triangular Toeplitz strategy C
(docs/method/matrix-mechanisms.md; Choquette-Choo et al. 2023, arXiv
2306.08153) adds row t of C^-1 xi to round t's clipped sum. With shuffled
epochs its buffers are zeroed after every epoch (`restart_every` =
rounds_per_epoch, one participation per epoch). With cyclic sampling (every
client exactly one epoch apart, production BLT's rule: McMahan, Xu & Zhang
2024, arXiv 2408.08868) one C serves all rounds, never restarted, and is
accounted for at most k = ceil(rounds / rounds_per_epoch) participations at
least rounds_per_epoch apart (`rule`: `separation.MinSeparation`; its noise
a `separation.SeparatedNoise`). Its runs are the correlated family's
(`tff_canary.mechanisms.correlated.spec`, as the tree's) in everything but the
noise: a fixed clip, orthogonal canaries inserted by fair coins once per
epoch, no ledger, each round's canary scores in units of z C
(tree_scores.npy, `round_scores`) and the DP-FTRL report section, whose
claimed noise is `round_noise`: B = C^-1 per epoch
(`stats.matrix.strategy_noise`), or over the run under the rule. The claim
is the exact GDP epsilon of mu = sens / z, sens = the noise's worst case
(`LinearNoise.claim`, the same value as `analytical.matrix_epsilon`).

`banded` and `blt` subclass `MatrixMechanism` with their strategy's
coefficients; their TFF half is `tff_canary.mechanisms.matrix.tff`.
Canary clients are the tree's too: TFF's own factory over the same query,
unseeded.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, Optional

import numpy as np

from tff_canary.mechanisms import protocol
from tff_canary.mechanisms.correlated import spec as correlated_spec
from tff_canary.stats.correlated import linear_noise
from tff_canary.stats.matrix import separation
from tff_canary.stats.matrix import strategy_noise


def value_of(config, key: str) -> Any:
  """`key` of an `ExperimentConfig` or of a config.json's values (the
  mechanisms read their `protocol.MechanismSettings` instead:
  `Mechanism.settings_of`)."""
  return config[key] if isinstance(config, dict) else getattr(config, key)


def run_rounds(settings: protocol.MechanismSettings,
               rounds_per_epoch: int) -> int:
  """The run's rounds: num_rounds, or epochs x rounds_per_epoch."""
  rounds = settings.num_rounds
  return int(rounds if rounds is not None
             else settings.epochs * rounds_per_epoch)


def participation_rule(settings: protocol.MechanismSettings,
                       rounds_per_epoch: int
                       ) -> Optional[separation.MinSeparation]:
  """With cyclic sampling, the clients' rule: at most ceil(n / E) rounds,
  E = rounds_per_epoch apart, in the run's n rounds; else None."""
  if settings.sampling != "cyclic":
    return None
  n = run_rounds(settings, rounds_per_epoch)
  return separation.MinSeparation(
      rounds=n, participations=math.ceil(n / rounds_per_epoch),
      separation=rounds_per_epoch)


@dataclasses.dataclass(frozen=True)
class MatrixMechanism(correlated_spec.CorrelatedMechanism):
  """A matrix mechanism restarted every epoch (module docstring); a
  subclass sets `name`, `settings`, `strategy_name` and `coefficients`."""
  client_aggregator = " (DP-FTRL matrix mechanism)"
  client_accounting = ("the matrix mechanism's accounting (the analytical ε)"
                       " is that of clients_per_round real clients, each "
                       "once per epoch")
  samplings = ("shuffle", "cyclic")
  sampling_reason = ("the matrix mechanism's accounting needs each client "
                     "once per epoch: shuffled (restarted every epoch) or "
                     "cyclic (exactly one epoch apart, never restarted)")
  strategy_name = ""
  scores_of = "the strategy's"
  # Swept as the tree is.
  sweep = protocol.SweepDefaults(("0.5", "1", "2", "4"), ("1",), clip=0.1)

  def resolve(self, config) -> dict[str, Any]:
    if config.noise_multiplier == 0.0:
      raise ValueError(f"aggregator={self.name!r} needs noise_multiplier > "
                       "0: its scores are in units of its fresh noise z C; "
                       "got noise_multiplier=0.0.")
    return {key: (setting.default if getattr(config, key) is None
                  else setting.check(getattr(config, key), key))
            for key, setting in self.settings.items()}

  def restart_every(self, settings, rounds_per_epoch: int) -> Optional[int]:
    """The epoch with shuffled epochs; None (never) with cyclic sampling."""
    settings = self.settings_of(settings)
    if participation_rule(settings, rounds_per_epoch) is None:
      return rounds_per_epoch
    return None

  def horizon(self, settings, rounds_per_epoch: int) -> int:
    """The rounds one C serves: the epoch, or the run without restarts."""
    rule = participation_rule(self.settings_of(settings), rounds_per_epoch)
    return rounds_per_epoch if rule is None else rule.rounds

  def coefficients(self, settings, rounds_per_epoch: int) -> np.ndarray:
    """C's c_0, c_1, ... for `settings` (`protocol.MechanismSettings`, or
    what `settings_of` reads: an `ExperimentConfig`, config.json's values)
    and epochs of `rounds_per_epoch` rounds."""
    raise NotImplementedError

  def strategy_kwargs(self, settings, rounds_per_epoch: int
                      ) -> dict[str, Any]:
    """The arguments of `MatrixAggregation` that give its C."""
    return dict(coefficients=self.coefficients(settings, rounds_per_epoch))

  def round_noise(self, settings, num_rounds: int, rounds_per_epoch: int
                  ) -> linear_noise.LinearNoise:
    """The claimed released noise of the run's rounds (module docstring)."""
    settings = self.settings_of(settings)
    coefficients = self.coefficients(settings, rounds_per_epoch)
    rule = participation_rule(settings, rounds_per_epoch)
    if rule is None:
      return strategy_noise.strategy_noise(coefficients, num_rounds,
                                           restart_every=rounds_per_epoch)
    noise = separation.separated_noise(coefficients, rule)
    try:
      noise.sensitivity   # the rule's worst case, or why it has none here
    except ValueError as error:
      raise ValueError(
          f"{self.flag} with sampling='cyclic' (--sampling=cyclic) over "
          f"{rule.rounds} rounds has no claim: {error} Its worst case over "
          f"{rule} is then unknown. Use a strategy whose coefficients are "
          "nonnegative and non-increasing (for a BLT: positive output "
          "scales summing to at most 1, decays in (0, 1); the fitted BLT "
          "is one), or --sampling=shuffle (restarted every epoch: exact "
          "for any strategy).") from None
    return noise

  def restarts_text(self, settings) -> str:
    """How the noise restarts, for the report's settings line."""
    if self.settings_of(settings).sampling != "cyclic":
      return "restarted every epoch"
    return ("never restarted (cyclic sampling: each client exactly one "
            "epoch apart)")

  def section_settings(self, settings) -> list[str]:
    """The report's settings lines for this mechanism's strategy."""
    return [f"{self.strategy_name} {self.restarts_text(settings)}"]


__all__ = ["MatrixMechanism", "participation_rule", "run_rounds",
           "value_of"]
