"""A small EMNIST model for the in-process end-to-end runs.

The runs of the harness's tests check what a run records and reports (the
canaries' schedule, scores and accounting, checkpoints, resume, the noise
self-test), none of which depends on the model's architecture; training
TFF's 1,206,590-parameter `cnn_dropout` made most of each run's cost (a
4-round run of 6 clients: about 20 CPU-s warm with it, 10-14 with this model,
measured for tff-canary issue 35 on the project's 2-core machine). The
scripts' runs (experiments/emnist.py --smoke, the reproducibility and
crash-resume pair, the sweep) still train the real CNN end to end, and
tests/harness/data/test_tasks.py pins its layers and size.

`emnist_cnn()` swaps `tff_canary.harness.data.tasks.emnist_cnn` for
`small_cnn` while it is open (pytest's public `MonkeyPatch`), so the runs
started inside train the small model through the harness's own task code:
the same data, preprocessing, deterministic dropout and seeded weights. A
test module asks for it for all its runs with tests/conftest.py's fixture,
`pytestmark = pytest.mark.usefixtures("small_emnist_model")`.
"""

import contextlib

import pytest

# 3*3*4 + 4 (conv) + 6*6*4*62 + 62 (dense).
DIM = 9_030


def small_cnn():
  """Conv 4x3x3, max-pool 4x4, dropout, dense to the 62 EMNIST classes."""
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  from tff_canary.harness.data import tasks  # pylint: disable=g-import-not-at-top
  return tf.keras.models.Sequential([
      tf.keras.layers.Conv2D(4, kernel_size=(3, 3), activation="relu",
                             input_shape=(28, 28, 1)),
      tf.keras.layers.MaxPool2D(pool_size=(4, 4)),
      tasks.DeterministicDropout(0.25, seed=1),
      tf.keras.layers.Flatten(),
      tf.keras.layers.Dense(tasks.EMNIST_CLASSES, activation=tf.nn.softmax),
  ])


@contextlib.contextmanager
def emnist_cnn():
  """Runs started inside train `small_cnn` as the EMNIST task's model."""
  from tff_canary.harness.data import tasks  # pylint: disable=g-import-not-at-top
  with pytest.MonkeyPatch.context() as patch:
    patch.setattr(tasks, "emnist_cnn", small_cnn)
    yield
