"""TFF's distributed DP in TFF: the TFF half of `mechanisms.ddp`.

Canary clients go through TFF's distributed-DP chain
(`ddp_chain.ddp_mean_factory`) for `ddp_claim.parameters_of(settings, dim)`,
the parameters the report's bound is of (docs/guide/distributed-dp.md: the
factory is told the real clients; canary clients come on top). There are
no server-side canaries, and no DpEvent (TFF's distributed queries emit
none; the report's analytical epsilon is the DDP bound, `ddp_claim`).

Its noise self-test runs the SUM chain as configured on zero values from
`clients_per_round` clients and tests the noise where the clients added it
(`ddp_noise_check.check_ddp_noise`, as `ddp_planted` does). A chain whose
summed noise is under `ddp_noise_check.MIN_INTEGER_STD` integer units is
too coarse for that check; its noise is tested as released against the
std the factory claims (`ddp_chain.claimed_std`). The DP query clips at the
settings' clip; a recorded aggregate is rescaled to sum / clients_per_round
(`DdpTff.client_aggregate`).
"""

from __future__ import annotations

from typing import Optional

import numpy as np

from tff_canary.federated.audit import noise_check as noise_check_lib
from tff_canary.mechanisms import protocol_tff
from tff_canary.mechanisms.ddp import chain as ddp_chain
from tff_canary.mechanisms.ddp import claim as ddp_claim
from tff_canary.mechanisms.ddp import noise_check as ddp_noise_check


class DdpTff(protocol_tff.TffMechanism):
  """TFF's distributed-DP chain (module docstring)."""

  def tff_aggregator(self, settings, value_type, dim: int,
                     rounds_per_epoch: Optional[int] = None):
    return ddp_chain.ddp_mean_factory(ddp_claim.parameters_of(settings, dim))

  def noise_check(self, settings, inputs: protocol_tff.NoiseCheckInputs):
    params = ddp_claim.parameters_of(settings, inputs.dim)
    chain = ddp_chain.ddp_sum_factory(params)
    if params.total_noise_std() >= ddp_noise_check.MIN_INTEGER_STD:
      return ddp_noise_check.check_ddp_noise(
          chain, params, num_clients=settings.clients_per_round)
    return noise_check_lib.check_aggregation_noise(
        chain, inputs.value_type, tensor_names=inputs.tensor_names,
        num_clients=settings.clients_per_round,
        claimed_std=ddp_chain.claimed_std(params))

  def client_round(self, settings, output, clip: float):
    return None, None  # no DpEvent (module docstring)

  def client_clip(self, settings, state) -> float:
    return float(settings.clip)

  def client_aggregate(self, settings, aggregate: np.ndarray,
                       participants: int) -> np.ndarray:
    # The chain's mean divides by every participant, canary clients
    # included -> sum / clients_per_round, as the Gaussian runs record.
    return aggregate * np.float32(participants / settings.clients_per_round)


TFF_MECHANISM = DdpTff()
