"""An experiment's DP-FedAvg process, and the noise check of its aggregator.

`build_process` is `tff.learning.algorithms.build_unweighted_fed_avg` with
the run's mechanism's aggregator with server-side canaries, or, with
`insertion="clients"`, `canary_clients.build_canary_client_fedavg` (canary
clients of norm `canary_norm`, docs/guide/insertion-modes.md) over TFF's
own aggregator of the same settings, its noise unseeded: the mechanism's
TFF half chooses (`TffMechanism.aggregator`), given its settings
(`ExperimentConfig.mechanism_settings`). `run_noise_check`
tests the noise of the same aggregator built afresh without canaries, on
zero client values, before training. What each builds is the mechanism's
TFF half's (`protocol_tff.TffMechanism`); this module never asks which
mechanism it is.
"""

from __future__ import annotations

from typing import Optional

import numpy as np
import tensorflow_federated as tff

from tff_canary.federated.audit import noise_check
from tff_canary.federated.insertion import canary_clients
from tff_canary.harness.config import experiment_config
from tff_canary.harness.data import tasks
from tff_canary.mechanisms import protocol_tff
from tff_canary.stats.canaries import canary_config
from tff_canary.stats.canaries import schedules


def _optimizer(name, learning_rate, momentum=None):
  if name == "sgd":
    return tff.learning.optimizers.build_sgdm(learning_rate=learning_rate,
                                              momentum=momentum or None)
  return tff.learning.optimizers.build_adam(learning_rate=learning_rate)


def build_process(config: experiment_config.ExperimentConfig,
                  task: tasks.Task, dim: int,
                  canaries: canary_config.CanaryConfig,
                  noise_seed: Optional[int],
                  rounds_per_epoch: Optional[int] = None):
  """The run's DP-FedAvg learning process (module docstring) of `task`,
  whose model has `dim` trainable parameters; `rounds_per_epoch`: the
  client sampler's epoch (DP-FTRL's restarts)."""
  client_optimizer = _optimizer(config.client_optimizer,
                                config.client_learning_rate)
  server_optimizer = _optimizer(config.server_optimizer,
                                config.server_learning_rate,
                                config.server_momentum)
  settings = config.mechanism_settings
  mechanism = protocol_tff.of(settings)
  # The mechanism's half chooses it: TFF's own with canary clients.
  aggregator = mechanism.aggregator(
      settings, canaries, noise_seed,
      protocol_tff.trainable_type(task.model_fn), dim, rounds_per_epoch)
  if config.insertion == "clients":
    return canary_clients.build_canary_client_fedavg(
        task.model_fn, client_optimizer, server_optimizer,
        model_aggregator=aggregator,
        canary_seed=canaries.seed, canary_norm=config.canary_norm,
        canaries=canaries, scores=mechanism.client_scores)
  return tff.learning.algorithms.build_unweighted_fed_avg(
      task.model_fn, client_optimizer_fn=client_optimizer,
      server_optimizer_fn=server_optimizer, model_aggregator=aggregator)


def run_noise_check(config: experiment_config.ExperimentConfig,
                    task: tasks.Task, canary_seed: int,
                    noise_seed: Optional[int],
                    rounds_per_epoch: Optional[int] = None):
  """The noise check of the run's aggregator, built afresh without
  canaries, on zero client values (module docstring).

  With seeded noise the check draws from its own seed (noise_seed +
  `protocol_tff.NOISE_CHECK_TAG`), so its result holds statistics of the
  same noise code path, never of the run's own draws.
  """
  no_canaries = canary_config.CanaryConfig(
      seed=canary_seed, num_inserted=0, num_held_out=0,
      schedule=schedules.FixedPresentations(
          num_rounds=noise_check.DEFAULT_ROUNDS, presentations=0),
      assignment="fixed", directions="gaussian", record_aggregates=False)
  value_type = protocol_tff.trainable_type(task.model_fn)
  weights = task.keras_model_fn().trainable_weights  # one model, not two
  names = [w.name.split(":")[0] for w in weights]
  if len(set(names)) != len(names) or len(names) != len(value_type):
    names = None
  dim = sum(int(np.prod(w.shape)) for w in weights)  # tasks.num_parameters
  settings = config.mechanism_settings
  return protocol_tff.of(settings).noise_check(
      settings, protocol_tff.NoiseCheckInputs(
          value_type=value_type, dim=dim,
          tensor_names=names,
          no_canaries=no_canaries,
          seed=(None if noise_seed is None
                else noise_seed + protocol_tff.NOISE_CHECK_TAG),
          rounds_per_epoch=rounds_per_epoch))
