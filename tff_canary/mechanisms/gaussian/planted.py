"""DP-FedAvg's planted-bug runs: the Gaussian mechanism's `PlantedBugs`.

Its aggregator is `tff.aggregators.DifferentiallyPrivateFactory(
NormalizedQuery(q, clients_per_round))`, q a seeded Gaussian sum query of
the bug (`sum_query`; the bugs: docs/guide/distributed-dp.md). With canary
clients the clients go through it; server-side, `CanaryDPFactory` on the
same query trains, and the self-test runs TFF's factory on it
(`CanaryDPFactory` adds that query's noise, and its scheduled canaries
would be in the self-test's rounds). The claim is the Gaussian mechanism's
exact epsilon at the claimed noise multiplier (`gaussian_accounting`); the
self-test reads the claimed std from the DpEvent.
"""

from __future__ import annotations

import tensorflow_federated as tff
import tensorflow_privacy as tfp

from tff_canary.federated.insertion import factory
from tff_canary.federated.insertion import seeded_query
from tff_canary.mechanisms import planted_runs
from tff_canary.mechanisms.gaussian import planted_bugs
from tff_canary.stats.accounting import gaussian_accounting


def sum_query(config: planted_runs.BugRunConfig):
  """The Gaussian sum query of `config`'s bug, seeded with config.seed."""
  c, seed = config.l2_clip, config.seed
  std = config.noise_multiplier * c
  if config.bug == "clip":
    return planted_bugs.ClipBugQuery(c, std, seed, clip_factor=config.bug_size)
  if config.bug == "reuse":
    return planted_bugs.NoiseReuseQuery(c, std, seed)
  return seeded_query.SeededGaussianSumQuery(c, std, seed)


class GaussianPlanted(planted_runs.PlantedBugs):
  """DP-FedAvg's planted bugs (module docstring)."""

  bugs = ("none", "clip", "reuse")
  modes = ("client", "server")
  table = (("none", "client"), ("none", "server"), ("clip", "client"),
           ("clip", "server"), ("reuse", "client"))

  def aggregators(self, config, canaries):
    checked = tff.aggregators.DifferentiallyPrivateFactory(
        tfp.NormalizedQuery(sum_query(config),
                            denominator=config.clients_per_round))
    if config.mode == "server":
      training = factory.CanaryDPFactory(
          sum_query(config), canaries,
          clients_per_round=config.clients_per_round)
      return training, checked, None
    return checked, checked, None

  def claim(self, config):
    eps = gaussian_accounting.gaussian_epsilon(config.noise_multiplier,
                                               config.delta)
    return eps, (f"Gaussian mechanism, z = {config.noise_multiplier:g}, one "
                 f"participation: ε = {eps:.4g} at δ = {config.delta:g}")


PLANTED_BUGS = GaussianPlanted()

__all__ = ["GaussianPlanted", "PLANTED_BUGS", "sum_query"]
