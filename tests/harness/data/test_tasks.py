"""The two tasks: TFF's models (parameter counts), deterministic dropout, seeds."""

import numpy as np
import pytest
import tensorflow as tf
from tensorflow_federated.python.simulation.baselines.emnist import emnist_models

from tff_canary.harness.data import datasets
from tff_canary.harness.data import tasks
from tff_canary.harness.config import model_sizes

pytestmark = pytest.mark.tff


@pytest.fixture(scope="module")
def emnist():
  return tasks.emnist_task(datasets.synthetic_emnist(num_clients=50,
                                                     examples_per_client=20))


def test_emnist_cnn_is_tffs_cnn_dropout(emnist):
  ours = tasks.emnist_cnn()
  theirs = emnist_models.create_conv_dropout_model(only_digits=False)
  assert [v.shape for v in ours.trainable_variables] == [
      v.shape for v in theirs.trainable_variables]
  assert tasks.num_parameters(emnist) == 1_206_590
  # The TF-free count the experiments check canaries against before TF loads.
  assert model_sizes.task_dim("emnist") == tasks.num_parameters(emnist)
  dropout = [l for l in ours.layers if isinstance(l, tasks.DeterministicDropout)]
  assert [l.rate for l in dropout] == [0.25, 0.5]


def test_stackoverflow_lstm_has_the_papers_size():
  task = tasks.stackoverflow_task(datasets.synthetic_stackoverflow(num_clients=10))
  assert tasks.num_parameters(task) == 4_050_748
  assert model_sizes.task_dim("stackoverflow") == tasks.num_parameters(task)
  assert model_sizes.STACKOVERFLOW_VOCAB == datasets.SYNTHETIC_VOCAB_SIZE
  # The formula in the vocabulary size, against the Keras model at another.
  small = tasks.stackoverflow_task(datasets.synthetic_stackoverflow(
      num_clients=10, vocab_size=50))
  assert model_sizes.stackoverflow_lstm(50) == tasks.num_parameters(small)


def test_deterministic_dropout():
  layer = tasks.DeterministicDropout(0.25, seed=3)
  x = tf.random.stateless_uniform([64, 500], seed=[1, 2]) + 0.1
  a, b = layer(x, training=True), layer(x, training=True)
  np.testing.assert_array_equal(a, b)  # a function of its input
  dropped = np.mean(a.numpy() == 0)
  # 32000 Bernoulli(0.25) draws: std 0.0024; 0.02 is > 8 std.
  assert abs(dropped - 0.25) < 0.02
  np.testing.assert_allclose(a.numpy()[a.numpy() != 0],
                             (x.numpy() / 0.75)[a.numpy() != 0], rtol=1e-6)
  other = layer(x * 1.0001, training=True)
  assert np.mean((a.numpy() == 0) != (other.numpy() == 0)) > 0.2  # fresh mask
  np.testing.assert_array_equal(layer(x, training=False), x)


def test_seeded_initial_weights(emnist):
  a, b, c = emnist.initial_weights(1), emnist.initial_weights(1), emnist.initial_weights(2)
  assert all(np.array_equal(x, y) for x, y in zip(a, b))
  assert not np.array_equal(a[0], c[0])


def test_emnist_keras_twin_evaluates(emnist):
  model = emnist.keras_model_fn()
  loss, accuracy = model.evaluate(emnist.test_dataset(64), verbose=0)
  assert np.isfinite(loss) and 0.0 <= accuracy <= 1.0
