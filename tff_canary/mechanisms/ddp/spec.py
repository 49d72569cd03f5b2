"""TFF's distributed DP: the `ddp_*` settings, their refusals and the DDP claim.

TFF's distributed-DP chain (docs/guide/distributed-dp.md) with the `ddp_*`
settings (None: `DEFAULTS`, TFF's factory defaults, bits as tff.learning's
DDP aggregator), canary clients only, a fixed clip and no zeroing (each
refusal's reason: `DdpMechanism.requirements`), bits TFF accepts for the
cohort (`resolve`) and an int32 L1 bound with Skellam noise (`check_dim`).
The queries emit no DpEvent: the claim is the DDP bound of the factory's
parameters (`ddp_claim`). Its TFF half is `tff_canary.mechanisms.ddp.tff`.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Optional

import numpy as np

from tff_canary.mechanisms import protocol
from tff_canary.mechanisms.cosine import spec as cosine_spec
from tff_canary.mechanisms.ddp import claim as ddp_claim
from tff_canary.stats import validation
from tff_canary.stats.accounting import ddp_parameters

# TFF's distributed queries check each client's integer L1 norm as int32.
INT32_MAX = 2**31 - 1
# The ddp_* settings; their values when None are TFF's
# DistributedDpSumFactory defaults, bits as tff.learning's DDP aggregator.
SETTINGS = dict(
    ddp_mechanism=protocol.Setting(
        "distributed_skellam", str,
        "With --aggregator=ddp: distributed_skellam or distributed_dgauss "
        "(default distributed_skellam).",
        lambda x, name: validation.as_choice(x, name,
                                             ddp_parameters.MECHANISMS)),
    ddp_bits=protocol.Setting(
        20, int,
        "With --aggregator=ddp: SecAgg bit width b, the sum is taken modulo "
        "2^b (1-22; default 20, tff.learning's).",
        lambda x, name: validation.as_int(x, name, 1)),
    ddp_beta=protocol.Setting(
        0.0, float,
        "With --aggregator=ddp: conditional rounding's beta in [0, 1) "
        "(default 0, unconditional rounding).",
        lambda x, name: validation.as_unit_interval(x, name,
                                                    include_high=False)),
    ddp_rotation=protocol.Setting(
        "dft", str,
        "With --aggregator=ddp: dft or hd (randomized Hadamard, pads d to a "
        "power of two; default dft).",
        lambda x, name: validation.as_choice(x, name,
                                             ddp_parameters.ROTATIONS)),
)
DEFAULTS = {name: setting.default for name, setting in SETTINGS.items()}


@dataclasses.dataclass(frozen=True)
class DdpMechanism(cosine_spec.CosineMechanism):
  """TFF's distributed-DP chain (module docstring)."""

  name = "ddp"
  help = ("TFF's distributed DP: DistributedDpSumFactory's chain with plain "
          "sums for SecAgg (the --ddp_* flags); needs --insertion=clients "
          "and a fixed --clip, no --zeroing; its analytical ε is the DDP "
          "bound of its parameters.")
  settings = SETTINGS
  records_ledger = False

  def subject(self, config) -> str:
    return self.flag

  def requirements(self, config) -> list[protocol.Requirement]:
    missing = []
    if config.insertion != "clients":
      missing.append(protocol.Requirement(
          "--insertion=clients", "insertion='clients'",
          "server-side canaries cannot enter TFF's DDP chain"))
    missing += protocol.client_requirements(config)
    if config.clip is None:
      missing.append(protocol.Requirement(
          "--clip=C (e.g. --clip=0.1)", "clip=C",
          "the DDP accounting models a fixed clip"))
    if config.zeroing:
      missing.append(protocol.Requirement(
          "--nozeroing", "zeroing=False",
          "TFF's DDP zeroing needs secure aggregation"))
    return missing

  def resolve(self, config) -> dict[str, Any]:
    values = {name: (default if getattr(config, name) is None
                     else getattr(config, name))
              for name, default in DEFAULTS.items()}
    if values["ddp_bits"] > ddp_parameters.MAX_BITS:
      raise ValueError(f"ddp_bits must be at most {ddp_parameters.MAX_BITS} "
                       f"(TFF's limit), got {values['ddp_bits']}.")
    try:  # TFF's checks of bits against the cohort (dim does not matter)
      ddp_parameters.ddp_parameters(
          config.noise_multiplier, config.clients_per_round,
          values["ddp_bits"], config.clip, 1, beta=values["ddp_beta"],
          mechanism=values["ddp_mechanism"], rotation=values["ddp_rotation"])
    except ValueError as e:
      raise ValueError(f"aggregator='ddp' with ddp_bits={values['ddp_bits']},"
                       f" clients_per_round={config.clients_per_round}: "
                       f"{e}") from None
    return values

  def check_dim(self, settings, dim: int) -> None:
    """Skellam noise: each client's integer L1 norm bound fits int32."""
    if settings.ddp_mechanism != "distributed_skellam":
      return  # DistributedDiscreteGaussianSumQuery checks the L2 norm only
    params = ddp_claim.parameters_of(settings, dim)
    if params.l1_sensitivity <= INT32_MAX:
      return
    fits = [b for b in range(1, settings.ddp_bits)
            if _l1_fits(settings, dim, b)]
    advice = [f"use --ddp_bits={fits[-1]} or fewer" if fits
              else "no bit width fits this model"]
    # While TFF's scale is at its cap (1e6), the bound grows with the clip:
    # the largest clip that fits, by bisection, rounded down to 3 digits.
    low, high = 0.0, settings.clip
    for _ in range(60):
      middle = (low + high) / 2
      low, high = ((middle, high) if _l1_fits(settings, dim, clip=middle)
                   else (low, middle))
    clip = float(f"{low:.3g}")
    if clip > 0 and _l1_fits(settings, dim, clip=clip):
      advice.append(f"--clip={clip:g} or less")
    advice.append("--ddp_mechanism=distributed_dgauss (its query checks no "
                  "L1 norm)")
    raise ValueError(
        f"aggregator='ddp' with --ddp_bits={settings.ddp_bits}, --clip="
        f"{settings.clip} and d = {dim:,}: each client's integer L1 norm bound "
        f"would be {params.l1_sensitivity:,}, above the int32 limit "
        f"{INT32_MAX:,} that TFF's Skellam query checks it in (it wraps to a "
        "negative bound, so every client fails the check and every round "
        f"fails); {', or '.join(advice)} (the bound scales with the scale, "
        "2^bits up to its 1e6 x clip cap, and sqrt(d)).")

  def claim(self, records, delta: float, canary_rate: Optional[float]
            ) -> protocol.AnalyticalClaim:
    """The DDP bound of the factory's parameters (`ddp_claim`): no
    ledger, no amplification."""
    values, max_participation, detail = ddp_claim.analytical(
        records.config, records.events, delta)
    return protocol.AnalyticalClaim(values, max_participation,
                                    label="analytical DDP bound",
                                    gaussian=False, detail=detail)

  def chain(self, settings) -> Optional[str]:
    return ddp_claim.describe_chain(self.settings_of(settings).as_dict())


def _l1_fits(settings, dim: int, bits=None, clip=None) -> bool:
  if clip is not None and clip <= 0:
    return False
  try:
    params = ddp_claim.parameters_of(settings, dim, bits=bits, clip=clip)
  except ValueError:  # too few bits for the cohort
    return False
  return params.l1_sensitivity <= INT32_MAX


MECHANISM = DdpMechanism()
