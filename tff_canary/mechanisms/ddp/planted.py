"""TFF's distributed DP's planted-bug runs: the DDP mechanism's `PlantedBugs`.

Its aggregator is TFF's distributed-DP chain (`planted_bugs.ddp_sum_factory`,
distributed Skellam, `bits`, DFT rotation) under `UnweightedMeanFactory`,
told `expected_clients_per_round` = bug_size x clients_per_round for the
shortfall bug (1 x otherwise; `parameters`); its clip bug clips at
bug_size x C with the query's norm bounds to match (`ddp_sum_factory`'s
`clip_factor`); its reuse bug is `planted_bugs.ShareReuseSkellamQuery` (each
client's share repeated between the halves of its rotated vector). It runs
with canary clients only. The claim, `ddp_accounting.ddp_epsilon` for the
parameters the factory was told, is not a Gaussian mechanism's; the noise
self-test is the rotated-domain one (`ddp_noise_check.check_ddp_noise`,
`ddp_tff`), where the share reuse shows.
"""

from __future__ import annotations

import tensorflow_federated as tff

from tff_canary.mechanisms import planted_runs
from tff_canary.mechanisms.ddp import chain as ddp_chain
from tff_canary.mechanisms.ddp import noise_check as ddp_noise_check
from tff_canary.mechanisms.ddp import planted_bugs
from tff_canary.stats.accounting import ddp_accounting
from tff_canary.stats.accounting import ddp_parameters


def parameters(config: planted_runs.BugRunConfig
               ) -> ddp_parameters.DdpParameters:
  """What the distributed-DP factory derives from what it was told."""
  k = config.bug_size if config.bug == "shortfall" else 1.0
  return ddp_parameters.ddp_parameters(
      config.noise_multiplier, int(round(k * config.clients_per_round)),
      config.bits, config.l2_clip, config.dim, mechanism="distributed_skellam",
      rotation="dft")


def _sum_factory(config: planted_runs.BugRunConfig):
  return planted_bugs.ddp_sum_factory(
      parameters(config), share_reuse=config.bug == "reuse",
      clip_factor=config.bug_size if config.bug == "clip" else 1.0)


class DdpPlanted(planted_runs.PlantedBugs):
  """TFF's distributed DP's planted bugs (module docstring)."""

  bugs = ("none", "clip", "shortfall", "reuse")
  modes = ("client",)
  table = (("none", "client"), ("clip", "client"), ("reuse", "client"),
           ("shortfall", "client"))
  gaussian_claim = False

  def aggregators(self, config, canaries):
    """The claimed std is the factory's in model units; the self-test
    takes `parameters(config)` instead (`noise_check`)."""
    training = tff.aggregators.UnweightedMeanFactory(
        value_sum_factory=_sum_factory(config))
    return (training, _sum_factory(config),
            ddp_chain.claimed_std(parameters(config)))

  def claim(self, config):
    eps = ddp_accounting.ddp_epsilon(parameters(config), delta=config.delta)
    return eps.epsilon, str(eps)

  def noise_check(self, config, checked, claimed_std):
    # In the rotated domain (module docstring).
    return ddp_noise_check.check_ddp_noise(
        checked, parameters(config), num_rounds=config.noise_check_rounds,
        num_clients=config.clients_per_round, seed=config.seed)


PLANTED_BUGS = DdpPlanted()

__all__ = ["DdpPlanted", "PLANTED_BUGS", "parameters"]
