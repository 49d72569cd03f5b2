"""The paper's two federated tasks, built with TFF's own baselines.

  * EMNIST character recognition (62 classes) with TFF's `cnn_dropout` CNN
    (1,206,590 parameters), as in the paper's §5.2.1;
  * StackOverflow next-word prediction with TFF's baseline word LSTM
    (4,050,748 parameters with a 10,000-word vocabulary; the paper's 4.1M).

Both go through `tff.simulation.baselines` (`create_character_recognition_
task_from_datasets`, `create_word_prediction_task_from_datasets`), so the
preprocessing and the losses are TFF's, whichever data source (`datasets`)
is used. A `Task` adds a seeded Keras model with the same architecture,
built eagerly, for the initial weights and for fast centralized evaluation.

Reproducibility (docs/guide/reproducibility.md). TFF's models draw
randomness that cannot be replayed: unseeded initializers (so the
experiments overwrite the initial weights with those of the seeded Keras
twin), and, in the EMNIST CNN, Keras `Dropout`, whose stateful generator
TFF's runtime keeps across rounds and restarts in every new process (an
op-seeded `tf.random.uniform` in a TFF computation gives three different
values in three calls, and the same three again in a fresh process, so a
resumed run would replay masks from round 0). The EMNIST model is therefore
TFF's `cnn_dropout` with `DeterministicDropout`. The two orders TFF's data
pipelines leave to chance are fixed too (`_PIPELINE_SEED`,
`Task.test_dataset`).
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable

import numpy as np
import tensorflow as tf
import tensorflow_federated as tff
from tensorflow_federated.python.simulation.baselines.stackoverflow import word_prediction_models
from tensorflow_federated.python.simulation.baselines.stackoverflow import word_prediction_preprocessing

from tff_canary.harness.data import datasets
from tff_canary.stats import validation
from tff_canary.federated.runtime import worker_guard

worker_guard.install()

EMNIST_CLASSES = datasets.EMNIST_CLASSES


class DeterministicDropout(tf.keras.layers.Layer):
  """Dropout whose mask is a stateless function of the layer's input.

  While training, the mask is `tf.random.stateless_uniform(shape) >= rate`
  with a seed hashed from the bits of the input activations (and the layer's
  `seed`): fresh for every batch and every round, since activations change
  with the data and the weights, yet the same whenever the same computation is
  repeated. Scaled by 1 / (1 - rate) like Keras's `Dropout`; the identity at
  inference.
  """

  def __init__(self, rate: float, seed: int = 0, **kwargs):
    super().__init__(**kwargs)
    self.rate = float(rate)
    self.seed = int(seed)

  def call(self, inputs, training=None):
    if not training or self.rate == 0.0:
      return inputs
    bits = tf.cast(tf.reshape(tf.bitcast(inputs, tf.int32), [-1]), tf.int64)
    index = tf.range(1, tf.size(bits, out_type=tf.int64) + 1)
    seed = tf.stack([tf.reduce_sum(bits) + self.seed,
                     tf.reduce_sum(bits * (2 * index + 1))])
    keep = tf.random.stateless_uniform(tf.shape(inputs), seed=seed) >= self.rate
    return inputs * tf.cast(keep, inputs.dtype) / (1.0 - self.rate)

  def get_config(self):
    return dict(super().get_config(), rate=self.rate, seed=self.seed)


def emnist_cnn() -> tf.keras.Model:
  """TFF's `cnn_dropout` for EMNIST-62 with `DeterministicDropout`.

  Layers as `tff.simulation.baselines.emnist.emnist_models.
  create_conv_dropout_model(only_digits=False)`: 1,206,590 parameters.
  """
  return tf.keras.models.Sequential([
      tf.keras.layers.Conv2D(32, kernel_size=(3, 3), activation="relu",
                             input_shape=(28, 28, 1)),
      tf.keras.layers.Conv2D(64, kernel_size=(3, 3), activation="relu"),
      tf.keras.layers.MaxPool2D(pool_size=(2, 2)),
      DeterministicDropout(0.25, seed=1),
      tf.keras.layers.Flatten(),
      tf.keras.layers.Dense(128, activation="relu"),
      DeterministicDropout(0.5, seed=2),
      tf.keras.layers.Dense(EMNIST_CLASSES, activation=tf.nn.softmax),
  ])


@dataclasses.dataclass(frozen=True)
class Task:
  """A TFF baseline task, its TFF model and a seeded Keras twin.

  Attributes:
    name: "emnist" or "stackoverflow".
    baseline: the TFF baseline task (datasets and preprocessing).
    model_fn: the `tff.learning` model constructor for training.
    keras_model_fn: builds the same architecture as a compiled Keras model;
      under `tf.keras.utils.set_random_seed(s)` its weights depend on s only.
  """

  name: str
  baseline: tff.simulation.baselines.BaselineTask
  model_fn: Callable[[], Any]
  keras_model_fn: Callable[[], tf.keras.Model]

  def initial_weights(self, seed: int) -> list[np.ndarray]:
    """Trainable weights of the Keras twin built eagerly with `seed`."""
    tf.keras.utils.set_random_seed(seed)
    return [v.numpy() for v in self.keras_model_fn().trainable_variables]

  def preprocessed_client(self, client_id: str) -> tf.data.Dataset:
    """One training client's dataset, preprocessed for training."""
    data = self.baseline.datasets
    return data.train_preprocess_fn(
        data.train_data.create_tf_dataset_for_client(client_id))

  def test_dataset(self, max_examples: int | None = None) -> tf.data.Dataset:
    """The centralized, preprocessed test set (optionally truncated), its
    clients joined in a fixed order (TFF's `get_centralized_test_data()`
    joins them in an unseeded one, which changes the evaluation loss and,
    with `max_examples`, which examples are kept)."""
    datasets_ = self.baseline.datasets
    data = datasets_.test_data
    if isinstance(data, tff.simulation.datasets.ClientData):
      data = data.create_tf_dataset_from_all_clients(seed=_TEST_ORDER_SEED)
    if datasets_.eval_preprocess_fn is not None:
      data = datasets_.eval_preprocess_fn(data)
    if max_examples is not None:
      data = data.unbatch().take(max_examples).batch(64)
    return data


def _client_spec(batch_size, client_epochs, max_elements):
  return tff.simulation.baselines.ClientSpec(
      num_epochs=validation.as_int(client_epochs, "client_epochs", minimum=1),
      batch_size=validation.as_int(batch_size, "batch_size", minimum=1),
      max_elements=None if max_elements is None else validation.as_int(
          max_elements, "max_elements", minimum=1),
      shuffle_buffer_size=1)  # deterministic order: reproducible runs


# TFF's EMNIST preprocessing maps each client's batches with
# `num_parallel_calls=AUTOTUNE, deterministic=debug_seed is not None`: any
# `debug_seed` keeps their order (docs/guide/reproducibility.md); its other
# effects do not reach the experiments (it seeds the shuffle buffer, which
# `_client_spec` sets to 1, and the baseline's own Keras model, which
# `Task.model_fn` replaces).
_PIPELINE_SEED = 0
# The order in which `Task.test_dataset` joins the test clients.
_TEST_ORDER_SEED = 0


def emnist_task(data: datasets.FederatedData, batch_size: int = 16,
                client_epochs: int = 1,
                max_elements: int | None = None) -> Task:
  """EMNIST-62 character recognition with TFF's `cnn_dropout` model."""
  baseline = (tff.simulation.baselines.emnist.char_recognition_tasks.
              create_character_recognition_task_from_datasets(
                  train_client_spec=_client_spec(batch_size, client_epochs,
                                                 max_elements),
                  eval_client_spec=None, model_id="cnn_dropout",
                  only_digits=False, train_data=data.train,
                  test_data=data.test, debug_seed=_PIPELINE_SEED))

  def keras_model_fn():
    model = emnist_cnn()
    model.compile(loss=tf.keras.losses.SparseCategoricalCrossentropy(),
                  metrics=[tf.keras.metrics.SparseCategoricalAccuracy(
                      name="accuracy")])
    return model

  input_spec = baseline.datasets.element_type_structure

  def model_fn():
    return tff.learning.models.from_keras_model(
        keras_model=emnist_cnn(),
        loss=tf.keras.losses.SparseCategoricalCrossentropy(),
        input_spec=input_spec,
        metrics=[tf.keras.metrics.SparseCategoricalAccuracy()])

  return Task("emnist", baseline, model_fn, keras_model_fn)


def stackoverflow_task(data: datasets.FederatedData, batch_size: int = 16,
                       client_epochs: int = 1,
                       max_elements: int | None = None,
                       sequence_length: int = 20,
                       num_out_of_vocab_buckets: int = 1) -> Task:
  """StackOverflow next-word prediction with TFF's baseline word LSTM."""
  if data.vocab is None:
    raise ValueError("StackOverflow data needs a vocabulary; got data with "
                     "vocab=None.")
  sequence_length = validation.as_int(sequence_length, "sequence_length",
                                      minimum=1)
  vocab = list(data.vocab)
  baseline = (tff.simulation.baselines.stackoverflow.word_prediction_tasks.
              create_word_prediction_task_from_datasets(
                  train_client_spec=_client_spec(batch_size, client_epochs,
                                                 max_elements),
                  eval_client_spec=None, sequence_length=sequence_length,
                  vocab=vocab,
                  num_out_of_vocab_buckets=num_out_of_vocab_buckets,
                  train_data=data.train, test_data=data.test,
                  validation_data=None))
  special = word_prediction_preprocessing.get_special_tokens(
      len(vocab), num_out_of_vocab_buckets)
  extended = len(vocab) + special.get_number_of_special_tokens()

  def keras_model_fn():
    model = word_prediction_models.create_recurrent_model(
        vocab_size=extended)
    model.compile(
        loss=tf.keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        metrics=[tf.keras.metrics.SparseCategoricalAccuracy(name="accuracy")])
    return model

  return Task("stackoverflow", baseline, baseline.model_fn, keras_model_fn)


def build(settings, data: datasets.FederatedData) -> Task:
  """A run's task over its `data`, of its `run_settings.DataSettings`."""
  builder = emnist_task if settings.task == "emnist" else stackoverflow_task
  return builder(data, batch_size=settings.batch_size,
                 client_epochs=settings.client_epochs)


def num_parameters(task: Task) -> int:
  """Number of trainable parameters, the canaries' dimension d."""
  return int(sum(tf.size(v).numpy() for v in
                 task.keras_model_fn().trainable_variables))
