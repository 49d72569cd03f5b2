"""An experiment's DP-FedAvg process, and the noise check of its aggregator.

`build_process` is `tff.learning.algorithms.build_unweighted_fed_avg` with
the canary aggregator of `canary_aggregator` (`tff_canary.federated.insertion.factory`):
fixed clipping when the config's `clip` is set, else adaptive, with TFF's
zeroing if asked. `run_noise_check` builds the same aggregator afresh
without canaries and tests its noise on zero client values
(`tff_canary.federated.audit.noise_check`) before training.

With `insertion="clients"` the process is
`canary_clients.build_canary_client_fedavg` (canary clients of norm
`canary_norm`, docs/guide/insertion-modes.md) over TFF's OWN aggregator,
`tff_aggregator`: `tff.aggregators.DifferentiallyPrivateFactory.
gaussian_fixed` or `gaussian_adaptive` with the same arguments, wrapped in
the same TFF zeroing (`factory.with_zeroing`, TFF's default adaptive
zeroing) when asked. Its noise is TFF's, unseeded (the config refuses a
noise seed in this mode), and so is the noise check's.

With `aggregator="ddp"` (client mode only) `tff_aggregator` is TFF's
distributed-DP chain instead (`ddp_chain.ddp_mean_factory`: TFF's parts,
plain sums for SecAgg, under `UnweightedMeanFactory`) for
`ddp_parameters_of(config, dim)`: the run's noise_multiplier,
clients_per_round (the factory's expected_clients_per_round: the real
clients; canary clients come on top), fixed clip and `ddp_*` knobs. Its
noise check runs the SUM chain as configured on zero values from
`clients_per_round` clients and tests it where the clients added it: each
round's release rotated back with the round's rotation seed, against the
factory's claim per rotated coordinate (`ddp_noise_check.check_ddp_noise`),
as `planted_bug_runs` does. A chain whose summed noise is under
`ddp_noise_check.MIN_INTEGER_STD` integer units (a few bits for many
clients) is too coarse for that check; its noise is tested as released
against the std the factory claims (`ddp_chain.claimed_std`).

With `aggregator="tree"` the aggregator is DP-FTRL with the fixed clip,
its tree restarted after every epoch of `rounds_per_epoch` rounds (the
client sampler's): server-side, `CanaryDPFactory.tree_aggregation`; with
canary clients, TFF's own public `DifferentiallyPrivateFactory` over the
same tree query (`tree_factory.TreeAggregation.tff_factory`: TFF's
`tree_aggregation` has no restart argument), unseeded, wrapped in
`CanaryScoringFactory(..., scores="dot_products")`, which reports each
round's <c_j, result> (`client_insertion` turns them into the scores). The
noise check is the tree's (`tree_noise_check`) either way.
"""

from __future__ import annotations

from typing import Optional

import tensorflow_federated as tff

from tff_canary.stats.canaries import canary_config
from tff_canary.federated.insertion import canary_clients
from tff_canary.federated.insertion import ddp_chain
from tff_canary.federated.insertion import factory
from tff_canary.federated.insertion import tree_factory
from tff_canary.federated.audit import ddp_noise_check
from tff_canary.federated.audit import noise_check
from tff_canary.federated.audit import tree_noise_check
from tff_canary.harness import ddp_claim
from tff_canary.harness import experiment_config
from tff_canary.harness import tasks
from tff_canary.stats.accounting import ddp_parameters
from tff_canary.stats.canaries import schedules

_NOISE_CHECK_TAG = factory.NOISE_CHECK_SEED_TAG
# DP-FTRL's noise check spans two restarts in at most this many rounds
# (`tree_check_period`).
MAX_TREE_CHECK_ROUNDS = 256


def canary_aggregator(config: experiment_config.ExperimentConfig,
                      canaries: canary_config.CanaryConfig,
                      noise_seed: Optional[int],
                      rounds_per_epoch: Optional[int] = None):
  """The run's DP aggregator with its canaries (module docstring);
  `rounds_per_epoch`: the tree's restart period (DP-FTRL only)."""
  if config.aggregator == "tree":
    if rounds_per_epoch is None:
      raise ValueError("aggregator='tree' needs rounds_per_epoch, the tree's "
                       "restart period; got None.")
    return factory.CanaryDPFactory.tree_aggregation(
        config.noise_multiplier, config.clients_per_round, config.clip,
        canaries=canaries, noise_seed=noise_seed,
        restart_period=rounds_per_epoch)
  if config.clip is not None:
    aggregator = factory.CanaryDPFactory.gaussian_fixed(
        config.noise_multiplier, config.clients_per_round, config.clip,
        canaries=canaries, noise_seed=noise_seed)
  else:
    aggregator = factory.CanaryDPFactory.gaussian_adaptive(
        config.noise_multiplier, config.clients_per_round,
        initial_l2_norm_clip=config.initial_clip,
        target_unclipped_quantile=config.target_unclipped_quantile,
        canaries=canaries, noise_seed=noise_seed)
  return factory.with_zeroing(aggregator) if config.zeroing else aggregator


def ddp_parameters_of(config: experiment_config.ExperimentConfig,
                      dim: int) -> ddp_parameters.DdpParameters:
  """What the run's DDP factory derives for `dim` trainable parameters."""
  if config.aggregator != "ddp":
    raise ValueError(f"ddp_parameters_of needs aggregator='ddp', got "
                     f"{config.aggregator!r}.")
  # The report's own reading of config.json: one source of the parameters.
  return ddp_claim.parameters(dict(config.as_dict(), dim=dim))


def tff_tree(config: experiment_config.ExperimentConfig,
             restart_period: Optional[int]) -> tree_factory.TreeAggregation:
  """DP-FTRL's tree of the run's settings restarted every `restart_period`
  rounds, for TFF's own factory (`TreeAggregation.tff_factory`, no seed)."""
  if restart_period is None:
    raise ValueError("aggregator='tree' needs rounds_per_epoch, the tree's "
                     "restart period; got None.")
  return tree_factory.TreeAggregation(
      noise_multiplier=config.noise_multiplier, clip=config.clip,
      efficient=True, restart_period=restart_period)


def tff_aggregator(config: experiment_config.ExperimentConfig,
                   dim: Optional[int] = None, *, record_specs=None,
                   rounds_per_epoch: Optional[int] = None):
  """TFF's own DP aggregator of the run's settings, no canaries (client
  mode; module docstring). `dim`: the trainable parameters (DDP only);
  `record_specs` (the trainable weights' tensor specs) and
  `rounds_per_epoch`: DP-FTRL only."""
  if config.aggregator == "ddp":
    return ddp_chain.ddp_mean_factory(ddp_parameters_of(config, dim))
  if config.aggregator == "tree":
    if record_specs is None:
      raise ValueError("aggregator='tree' needs record_specs, the specs of "
                       "the trainable weights; got None.")
    return tff_tree(config, rounds_per_epoch).tff_factory(
        record_specs, config.clients_per_round)
  dp = tff.aggregators.DifferentiallyPrivateFactory
  if config.clip is not None:
    aggregator = dp.gaussian_fixed(
        noise_multiplier=config.noise_multiplier,
        clients_per_round=float(config.clients_per_round), clip=config.clip)
  else:
    aggregator = dp.gaussian_adaptive(
        noise_multiplier=config.noise_multiplier,
        clients_per_round=float(config.clients_per_round),
        initial_l2_norm_clip=config.initial_clip,
        target_unclipped_quantile=config.target_unclipped_quantile)
  return factory.with_zeroing(aggregator) if config.zeroing else aggregator


def _trainable_type(task: tasks.Task):
  return tff.learning.models.weights_type_from_model(task.model_fn).trainable


def _optimizer(name, learning_rate, momentum=None):
  if name == "sgd":
    return tff.learning.optimizers.build_sgdm(learning_rate=learning_rate,
                                              momentum=momentum or None)
  return tff.learning.optimizers.build_adam(learning_rate=learning_rate)


def build_process(config: experiment_config.ExperimentConfig,
                  task: tasks.Task, canaries: canary_config.CanaryConfig,
                  noise_seed: Optional[int],
                  rounds_per_epoch: Optional[int] = None):
  """The run's DP-FedAvg learning process (module docstring)."""
  client_optimizer = _optimizer(config.client_optimizer,
                                config.client_learning_rate)
  server_optimizer = _optimizer(config.server_optimizer,
                                config.server_learning_rate,
                                config.server_momentum)
  if config.insertion == "clients":
    tree = config.aggregator == "tree"
    aggregator = tff_aggregator(
        config, tasks.num_parameters(task), rounds_per_epoch=rounds_per_epoch,
        record_specs=(tff.types.type_to_tf_tensor_specs(
            _trainable_type(task)) if tree else None))
    return canary_clients.build_canary_client_fedavg(
        task.model_fn, client_optimizer, server_optimizer,
        model_aggregator=aggregator, canary_seed=canaries.seed,
        canary_norm=config.canary_norm, canaries=canaries,
        scores="dot_products" if tree else "cosines")
  return tff.learning.algorithms.build_unweighted_fed_avg(
      task.model_fn, client_optimizer_fn=client_optimizer,
      server_optimizer_fn=server_optimizer,
      model_aggregator=canary_aggregator(config, canaries, noise_seed,
                                         rounds_per_epoch))


def tree_check_period(rounds_per_epoch: Optional[int]) -> int:
  """The restart period of DP-FTRL's noise check: the run's, when two
  restarts fit in `MAX_TREE_CHECK_ROUNDS` rounds, else the largest period
  that fits (the same query, restarted sooner), so that the check's [rounds,
  d] noise stays in memory at StackOverflow's epochs of thousands of rounds."""
  if rounds_per_epoch is None:
    raise ValueError("aggregator='tree' needs rounds_per_epoch, the tree's "
                     "restart period; got None.")
  return min(int(rounds_per_epoch), (MAX_TREE_CHECK_ROUNDS - 2) // 2)


def run_noise_check(config: experiment_config.ExperimentConfig,
                    task: tasks.Task, canary_seed: int,
                    noise_seed: Optional[int],
                    rounds_per_epoch: Optional[int] = None):
  """The noise check (a `NoiseCheck`) of the run's aggregator, built afresh
  without canaries, on zero client values (`tff_canary.federated.audit.noise_check`).

  With seeded noise the check draws from its own seed (noise_seed + a tag),
  so its result holds statistics of the same noise code path, never of the
  run's own draws. DP-FTRL's (`aggregator="tree"`) is the tree's
  (`tree_noise_check.check_tree_noise`): the released noise over two
  restarts of the run's tree (restarted at `tree_check_period`), whitened
  by the tree's claimed covariance. Distributed DP's is in the rotated
  domain (`ddp_noise_check.check_ddp_noise`, module docstring).
  """
  no_canaries = canary_config.CanaryConfig(
      seed=canary_seed, num_inserted=0, num_held_out=0,
      schedule=schedules.FixedPresentations(
          num_rounds=noise_check.DEFAULT_ROUNDS, presentations=0),
      record_aggregates=False, directions="gaussian")  # no in-round scoring
  value_type = _trainable_type(task)
  names = [w.name.split(":")[0]
           for w in task.keras_model_fn().trainable_weights]
  if len(set(names)) != len(names) or len(names) != len(value_type):
    names = None
  if config.aggregator == "ddp":  # the sum chain, its own claim (module doc)
    params = ddp_parameters_of(config, tasks.num_parameters(task))
    chain = ddp_chain.ddp_sum_factory(params)
    if params.total_noise_std() >= ddp_noise_check.MIN_INTEGER_STD:
      return ddp_noise_check.check_ddp_noise(
          chain, params, num_clients=config.clients_per_round)
    return noise_check.check_aggregation_noise(
        chain, value_type, tensor_names=names,
        num_clients=config.clients_per_round,
        claimed_std=ddp_chain.claimed_std(params))
  if config.aggregator == "tree":
    period = tree_check_period(rounds_per_epoch)
    if config.insertion == "clients":  # TFF's factory, unseeded
      tree = tff_tree(config, period)
      return tree_noise_check.check_tree_noise(
          tree.tff_factory(tff.types.type_to_tf_tensor_specs(value_type),
                           config.clients_per_round), value_type,
          noise=tree.noise(tree_noise_check.default_rounds(period)),
          noise_multiplier=config.noise_multiplier, tensor_names=names)
    aggregator = canary_aggregator(config, no_canaries, None if noise_seed
                                   is None else noise_seed + _NOISE_CHECK_TAG,
                                   period)
    return tree_noise_check.check_tree_noise(aggregator, value_type,
                                             tensor_names=names)
  if config.insertion == "clients":
    aggregator = tff_aggregator(config)  # TFF's, unseeded
  else:
    aggregator = canary_aggregator(config, no_canaries, None if noise_seed
                                   is None else noise_seed + _NOISE_CHECK_TAG)
  return noise_check.check_aggregation_noise(aggregator, value_type,
                                             tensor_names=names)
