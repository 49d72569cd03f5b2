"""How many trainable parameters each task's model has, without TensorFlow.

The canaries' dimension d is the model's parameter count. The experiments
need it before TensorFlow loads, to refuse a command that cannot work (more
canaries than dimensions, an integer bound that overflows TFF's int32 check)
in a second and writing nothing. The counts follow the layers of the models
`tasks` builds; tests/harness/data/test_tasks.py checks them against the Keras models.
"""

from __future__ import annotations

from tff_canary.stats import validation

# TFF's EMNIST character CNN (`tasks.emnist_cnn`, the layers of
# `create_conv_dropout_model(only_digits=False)`).
EMNIST_CNN = 1_206_590
# The StackOverflow word vocabulary of the experiments (datasets.
# SYNTHETIC_VOCAB_SIZE; TFF's data takes the same number of words), and the
# special tokens TFF's word-prediction preprocessing adds with one
# out-of-vocabulary bucket: pad, one OOV bucket, beginning and end of sentence.
STACKOVERFLOW_VOCAB = 10_000
STACKOVERFLOW_SPECIAL_TOKENS = 4
# TFF's `create_recurrent_model` defaults.
_EMBEDDING, _LATENT = 96, 670


def stackoverflow_lstm(vocab_size: int = STACKOVERFLOW_VOCAB) -> int:
  """Parameters of TFF's baseline word LSTM over `vocab_size` words.

  Embedding V' x 96, one LSTM layer 4 (670 (96 + 670) + 670), a dense layer
  670 -> 96 and the output layer 96 -> V', with V' = vocab_size + 4 special
  tokens (4,050,748 for 10,000 words, the paper's 4.1M).
  """
  v = validation.as_int(vocab_size, "vocab_size", minimum=1)
  v += STACKOVERFLOW_SPECIAL_TOKENS
  lstm = 4 * (_LATENT * (_EMBEDDING + _LATENT) + _LATENT)
  return (v * _EMBEDDING + lstm + _LATENT * _EMBEDDING + _EMBEDDING
          + _EMBEDDING * v + v)


# d of each experiment task's model, by task (an `ExperimentConfig`'s task,
# checked, indexes it).
DIMS = {"emnist": EMNIST_CNN, "stackoverflow": stackoverflow_lstm()}


def task_dim(task: str) -> int:
  """d of an experiment task's model ("emnist" or "stackoverflow")."""
  return DIMS[validation.as_choice(task, "task", tuple(DIMS))]
