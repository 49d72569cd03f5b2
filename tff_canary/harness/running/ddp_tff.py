"""TFF's distributed DP in TFF: the TFF half of `mechanisms.ddp`.

Canary clients go through TFF's distributed-DP chain
(`ddp_chain.ddp_mean_factory`: TFF's parts, plain sums for SecAgg, under
`UnweightedMeanFactory`) for `parameters(config, dim)`: the run's
noise_multiplier, clients_per_round (the factory's
expected_clients_per_round: the real clients; canary clients come on top),
fixed clip and `ddp_*` settings. There are no server-side canaries.

Its noise self-test runs the SUM chain as configured on zero values from
`clients_per_round` clients and tests it where the clients added it: each
round's release rotated back with the round's rotation seed, against the
factory's claim per rotated coordinate (`ddp_noise_check.check_ddp_noise`),
as its planted-bug runs do (`ddp_planted`). A chain whose summed noise is
under `ddp_noise_check.MIN_INTEGER_STD` integer units (a few bits for many
clients) is too coarse for that check; its noise is tested as released
against the std the factory claims (`ddp_chain.claimed_std`).

Its rounds record no DpEvent (TFF's distributed queries emit none); the DP
query clips at the config's clip, and the chain's mean divides by every
participant, so a recorded aggregate is rescaled to sum / clients_per_round.
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
from tff_canary.stats.accounting import ddp_parameters


def parameters(config, dim: int) -> ddp_parameters.DdpParameters:
  """What the run's DDP factory derives for `dim` trainable parameters (the
  report's own reading of config.json: one source of the parameters)."""
  return ddp_claim.parameters(dict(config.as_dict(), dim=dim))


class DdpTff(mechanism_tff.TffMechanism):
  """TFF's distributed-DP chain (module docstring)."""

  planted_bugs_module = "tff_canary.harness.running.ddp_planted"

  def tff_aggregator(self, config, task: tasks.Task, dim: Optional[int],
                     rounds_per_epoch: Optional[int] = None):
    if dim is None:
      dim = tasks.num_parameters(task)
    return ddp_chain.ddp_mean_factory(parameters(config, dim))

  def noise_check(self, config, inputs: mechanism_tff.NoiseCheckInputs):
    params = parameters(config, tasks.num_parameters(inputs.task))
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
