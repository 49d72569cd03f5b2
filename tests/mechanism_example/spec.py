"""A test mechanism: Gaussian noise with a different claim (tests only).

DP-FedAvg's Gaussian noise, whose claim is the exact Gaussian-mechanism
epsilon at the noise multiplier times `claim_noise_scale` (its one
setting): a mechanism that claims more noise than it adds when the scale is
above 1. It is a package registered by one line in `registry.MECHANISMS`
and touches nothing else (tests/mechanisms/test_registry.py); its TFF half is
tests/mechanism_example/tff.py.
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np

from tff_canary.mechanisms import protocol
from tff_canary.mechanisms.cosine import spec as cosine_spec
from tff_canary.stats import validation
from tff_canary.stats.accounting import gaussian_accounting

NAME = "scaled_claim_gaussian"


@dataclasses.dataclass(frozen=True)
class ScaledClaimGaussian(cosine_spec.CosineMechanism):
  """Gaussian noise, claimed at `claim_noise_scale` x the noise multiplier."""

  name = NAME
  help = ("Gaussian noise claimed at --claim_noise_scale times the noise "
          "multiplier (tests/mechanism_example/).")
  settings = dict(claim_noise_scale=protocol.Setting(
      1.0, float, "The claim's noise multiplier over the real one.",
      lambda x, name: validation.as_positive(x, name)))

  def resolve(self, config):
    return dict(claim_noise_scale=(1.0 if config.claim_noise_scale is None
                                   else config.claim_noise_scale))

  def claim(self, records, delta, canary_rate):
    """mu = sqrt(r) / (scale x z) for r participations (Dong, Roth & Su
    2019, Cor. 3.3), epsilon by Balle & Wang 2018, Thm 8."""
    config = records.config
    z = config["noise_multiplier"] * config["claim_noise_scale"]
    counts = np.unique(np.asarray(records.events)[:, 1],
                       return_counts=True)[1]
    most = int(counts.max()) if counts.size else 0
    epsilons = {"one participation": gaussian_accounting.gaussian_epsilon(
        z, delta)}
    if most > 1:
      epsilons[f"{most} participations"] = (
          gaussian_accounting.gaussian_epsilon_of_mu(math.sqrt(most) / z,
                                                     delta))
    return protocol.AnalyticalClaim(epsilons, most,
                                    label="analytical ε (scaled claim)")


MECHANISM = ScaledClaimGaussian()
