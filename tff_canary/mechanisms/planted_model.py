"""The planted-bug runs' model: a 2-layer MLP trained with canaries.

`train` trains it for a `planted_runs.BugRunConfig` in either mode, and
`cosine_table_of` turns its iterates into the canaries' `CosineTable`.
"""

from __future__ import annotations

import warnings

import numpy as np
import tensorflow as tf
import tensorflow_federated as tff

from tff_canary.federated.insertion import canary_clients
from tff_canary.federated.insertion import canary_directions
from tff_canary.federated.structures import flat_layout
from tff_canary.stats.canaries import canary_config
from tff_canary.stats.canaries import cosine_table


def _model_fn(config):
  def model_fn():
    keras_model = tf.keras.Sequential([
        tf.keras.layers.InputLayer(input_shape=(config.features,)),
        tf.keras.layers.Dense(config.hidden, activation="relu",
                              kernel_initializer=tf.keras.initializers
                              .GlorotUniform(seed=1)),
        tf.keras.layers.Dense(config.classes,
                              kernel_initializer=tf.keras.initializers
                              .GlorotUniform(seed=2)),
    ])
    return tff.learning.models.from_keras_model(
        keras_model,
        loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        input_spec=(tf.TensorSpec([None, config.features], tf.float32),
                    tf.TensorSpec([None], tf.int32)))
  return model_fn


def _client_pool(config) -> list[tf.data.Dataset]:
  rng = np.random.default_rng([config.seed, 1])
  means = rng.normal(size=(config.classes, config.features))
  pool = []
  for _ in range(config.pool_clients):
    y = rng.integers(0, config.classes, config.examples_per_client)
    x = means[y] + rng.normal(size=(y.size, config.features))
    pool.append(tf.data.Dataset.from_tensor_slices(
        (x.astype(np.float32), y.astype(np.int32))).batch(
            config.examples_per_client))
  return pool


def trainable_type(config):
  """The TFF type of the run's model's trainable weights."""
  return tff.learning.models.weights_type_from_model(
      _model_fn(config)).trainable


def train(config, canaries, training_aggregator) -> np.ndarray:
  """Flat trainable weights theta_0..theta_R, [R + 1, d]."""
  model_fn = _model_fn(config)
  client_opt = tff.learning.optimizers.build_sgdm(learning_rate=0.1)
  server_opt = tff.learning.optimizers.build_sgdm(learning_rate=1.0)
  if config.mode == "client":  # (server mode: CanaryDPFactory.create warns)
    process = canary_clients.build_canary_client_fedavg(
        model_fn, client_opt, server_opt,
        model_aggregator=training_aggregator, canary_seed=canaries.seed,
        canary_norm=config.canary_norm * config.l2_clip)
  else:
    with warnings.catch_warnings():  # as in planted_runs.coin_canaries
      warnings.simplefilter("ignore", canary_config.TooManyCanariesWarning)
      process = tff.learning.algorithms.build_unweighted_fed_avg(
          model_fn, client_opt, server_opt,
          model_aggregator=training_aggregator)
  pool = _client_pool(config)
  rng = np.random.default_rng([config.seed, 2])
  state = process.initialize()
  weights = [flat_layout.flatten_numpy(
      process.get_model_weights(state).trainable)]
  for t in range(config.num_rounds):
    ids = (canary_clients.scheduled_canary_ids(canaries, t)
           if config.mode == "client" else [])
    real = config.clients_per_round - len(ids)
    if real < 1:
      raise ValueError(f"clients_per_round = {config.clients_per_round} "
                       f"cannot hold round {t}'s {len(ids)} canary clients "
                       "and a real client.")
    chosen = [pool[i] for i in rng.choice(len(pool), real,
                                          replace=real > len(pool))]
    data = (canary_clients.with_canary_clients(chosen, ids, canaries)
            if config.mode == "client" else chosen)
    state = process.next(state, data).state
    weights.append(flat_layout.flatten_numpy(
        process.get_model_weights(state).trainable))
  return np.stack(weights).astype(np.float64)


def cosine_table_of(weights: np.ndarray,
                    canaries: canary_config.CanaryConfig
                    ) -> cosine_table.CosineTable:
  """The cosine table of a run from its weights theta_0..theta_R: each
  canary's cosine with theta_0 - theta_R (final model) and its max over
  rounds of the cosine with theta_t - theta_{t+1} (all iterates)."""
  dim = weights.shape[1]
  ids = np.arange(canaries.num_canaries)
  directions = canary_directions.canary_block(canaries.seed, ids, dim)
  final = weights[0] - weights[-1]
  rounds = weights[:-1] - weights[1:]
  final_cos = directions @ final / np.linalg.norm(final)
  round_cos = (directions @ rounds.T) / np.linalg.norm(rounds, axis=1)
  return cosine_table.of_canaries(
      canaries, final_cosine=final_cos, max_cosine=round_cos.max(axis=1),
      max_round=round_cos.argmax(axis=1), dim=dim,
      rounds_recorded=len(rounds), generator=canary_directions.GENERATOR)


__all__ = ["cosine_table_of", "train", "trainable_type"]
