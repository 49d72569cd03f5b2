"""The paper's two federated tasks, built with TFF's own baselines.

  * EMNIST character recognition (62 classes) with TFF's `cnn_dropout` CNN
    (1,206,590 parameters), as in the paper's §5.2.1;
  * StackOverflow next-word prediction with TFF's baseline word LSTM
    (4,050,748 parameters with a 10,000-word vocabulary; the paper's 4.1M).

Both go through `tff.simulation.baselines` (`create_character_recognition_
task_from_datasets`, `create_word_prediction_task_from_datasets`), so the
preprocessing, the models and the losses are TFF's, whichever data source
(`tff_canary.datasets`) is used. A `Task` adds what the experiments need on
top: a Keras model with the same architecture for fast centralized evaluation.
"""

from __future__ import annotations

import dataclasses
from typing import Callable

import tensorflow as tf
import tensorflow_federated as tff
from tensorflow_federated.python.simulation.baselines.emnist import emnist_models
from tensorflow_federated.python.simulation.baselines.stackoverflow import word_prediction_models
from tensorflow_federated.python.simulation.baselines.stackoverflow import word_prediction_preprocessing

from tff_canary import datasets
from tff_canary import validation
from tff_canary import worker_guard

worker_guard.install()

TASKS = ("emnist", "stackoverflow")


@dataclasses.dataclass(frozen=True)
class Task:
  """A TFF baseline task plus a compiled Keras twin for evaluation."""

  name: str
  baseline: tff.simulation.baselines.BaselineTask
  keras_model_fn: Callable[[], tf.keras.Model]

  @property
  def model_fn(self):
    return self.baseline.model_fn

  def preprocessed_client(self, client_id: str) -> tf.data.Dataset:
    """One training client's dataset, preprocessed for training."""
    data = self.baseline.datasets
    return data.train_preprocess_fn(
        data.train_data.create_tf_dataset_for_client(client_id))

  def test_dataset(self, max_examples: int | None = None) -> tf.data.Dataset:
    """The centralized, preprocessed test set (optionally truncated)."""
    data = self.baseline.datasets.get_centralized_test_data()
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
                  test_data=data.test))

  def keras_model_fn():
    model = emnist_models.create_conv_dropout_model(only_digits=False)
    model.compile(loss=tf.keras.losses.SparseCategoricalCrossentropy(),
                  metrics=[tf.keras.metrics.SparseCategoricalAccuracy(
                      name="accuracy")])
    return model

  return Task("emnist", baseline, keras_model_fn)


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

  return Task("stackoverflow", baseline, keras_model_fn)


def num_parameters(task: Task) -> int:
  """Number of trainable parameters, the canaries' dimension d."""
  return int(sum(tf.size(v).numpy() for v in
                 task.keras_model_fn().trainable_variables))
