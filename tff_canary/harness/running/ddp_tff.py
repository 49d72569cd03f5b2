"""TFF's distributed DP in TFF: the TFF half of `mechanisms.ddp`.

Canary clients go through TFF's distributed-DP chain
(`ddp_chain.ddp_mean_factory`: TFF's parts, plain sums for SecAgg, under
`UnweightedMeanFactory`) for `ddp_claim.parameters_of(config, dim)`, the
parameters the report's bound is of: the run's noise_multiplier,
clients_per_round (the factory's expected_clients_per_round: the real
clients; canary clients come on top), fixed clip and `ddp_*` settings.
There are no server-side canaries.

Its noise self-test runs the SUM chain as configured on zero values from
`clients_per_round` clients and tests it where the clients added it: each
round's release rotated back with the round's rotation seed, against the
factory's claim per rotated coordinate (`ddp_noise_check.check_ddp_noise`),
as its planted-bug runs do (`ddp_planted`). A chain whose summed noise is
under `ddp_noise_check.MIN_INTEGER_STD` integer units (a few bits for many
clients) is too coarse for that check; its noise is tested as released
against the std the factory claims (`ddp_chain.claimed_std`).

Its rounds record no DpEvent (TFF's distributed queries emit none; the
report's analytical epsilon is the DDP bound, `ddp_claim`). The DP query
clips at the config's clip (the chain's L2 clip before rounding; its
query's norm bounds are in the rounded integer domain), and the chain's mean
(`UnweightedMeanFactory`, as TFF's DDP aggregator) divides by every
participant, canary clients included, so a recorded aggregate is rescaled
to sum / clients_per_round, the quantity the Gaussian runs record (a
round's cosines do not change with its scale).
"""

from __future__ import annotations

from typing import Optional

import numpy as np

from tff_canary.federated.audit import ddp_noise_check
from tff_canary.federated.audit import noise_check as noise_check_lib
from tff_canary.federated.insertion import ddp_chain
from tff_canary.harness.mechanisms import ddp_claim
from tff_canary.harness.running import mechanism_tff
from tff_canary.harness.running import tasks


class DdpTff(mechanism_tff.TffMechanism):
  """TFF's distributed-DP chain (module docstring)."""

  planted_bugs_module = "tff_canary.harness.running.ddp_planted"

  def tff_aggregator(self, config, task: tasks.Task, dim: Optional[int],
                     rounds_per_epoch: Optional[int] = None):
    if dim is None:
      dim = tasks.num_parameters(task)
    return ddp_chain.ddp_mean_factory(ddp_claim.parameters_of(config, dim))

  def noise_check(self, config, inputs: mechanism_tff.NoiseCheckInputs):
    params = ddp_claim.parameters_of(config,
                                     tasks.num_parameters(inputs.task))
    chain = ddp_chain.ddp_sum_factory(params)
    if params.total_noise_std() >= ddp_noise_check.MIN_INTEGER_STD:
      return ddp_noise_check.check_ddp_noise(
          chain, params, num_clients=config.clients_per_round)
    return noise_check_lib.check_aggregation_noise(
        chain, inputs.value_type, tensor_names=inputs.tensor_names,
        num_clients=config.clients_per_round,
        claimed_std=ddp_chain.claimed_std(params))

  def client_round(self, config, output, clip: float):
    return None, None  # no DpEvent (module docstring)

  def client_clip(self, config, state) -> float:
    return float(config.clip)

  def client_aggregate(self, config, aggregate: np.ndarray,
                       participants: int) -> np.ndarray:
    # The mean of all participants -> sum / clients_per_round.
    return aggregate * np.float32(participants / config.clients_per_round)


TFF_MECHANISM = DdpTff()
