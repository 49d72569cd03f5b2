"""Federated datasets for the experiments: built-in synthetic data and TFF's own.

Two sources, with the element formats of TFF's datasets so the same
preprocessing and models apply to both: synthetic (the default; no
download), `synthetic_emnist` and `synthetic_stackoverflow`, whose clients
are generated on demand (`synthetic`); and TFF's cached SQLite files
(`--data=tff`), `load_emnist` and `load_stackoverflow`, read through TFF's
own loaders (docs/guide/experiments.md). Offline, a missing file is an
error that names the file and where to put it, raised before TFF is
called. StackOverflow's vocabulary comes from TFF's word-count file, which
TFF only fetches through a hash-checked download; offline it is read from
`<cache_dir>/stackoverflow.word_count` (or `vocab_path`), one "word count"
per line, most frequent first.

Client ids are "0", "1", ..., as strings (TFF's convention).
"""

from __future__ import annotations

import collections
import dataclasses
import os
from typing import Optional

import tensorflow as tf
import tensorflow_federated as tff

from tff_canary.harness.data import synthetic
from tff_canary.stats import validation
from tff_canary.federated.runtime import worker_guard

worker_guard.install()

EMNIST_CLASSES = synthetic.EMNIST_CLASSES
EMNIST_FILE = "emnist_all.sqlite"
STACKOVERFLOW_FILE = "stackoverflow.sqlite"
STACKOVERFLOW_VOCAB_FILE = "stackoverflow.word_count"
SYNTHETIC_VOCAB_SIZE = 10_000
# The synthetic sources' test clients and sentence length by default.
EMNIST_TEST_CLIENTS = 50
STACKOVERFLOW_TEST_CLIENTS = 20
SENTENCE_LENGTH = 12


@dataclasses.dataclass(frozen=True)
class FederatedData:
  """Train and test client data of one task, and where they came from."""

  train: tff.simulation.datasets.ClientData
  test: tff.simulation.datasets.ClientData
  source: str  # "synthetic" or "tff"
  vocab: Optional[tuple[str, ...]] = None  # StackOverflow only


def _client_index(client_id: tf.Tensor) -> tf.Tensor:
  return tf.strings.to_number(client_id, out_type=tf.int64)


def _check_counts(num_clients, examples, name, num_test_clients, seed):
  """The synthetic sources' common arguments, checked."""
  return (validation.as_int(num_clients, "num_clients", minimum=1),
          validation.as_int(examples, name, minimum=1),
          validation.as_int(num_test_clients, "num_test_clients", minimum=1),
          validation.as_int(seed, "seed", minimum=0))


def _synthetic(num_clients, num_test_clients, dataset_fn, vocab=None):
  """Training clients "0".."<num_clients - 1>", then the test clients."""
  make = tff.simulation.datasets.ClientData.from_clients_and_tf_fn
  return FederatedData(
      train=make([str(i) for i in range(num_clients)], dataset_fn),
      test=make([str(num_clients + i) for i in range(num_test_clients)],
                dataset_fn), source="synthetic", vocab=vocab)


def synthetic_emnist(num_clients: int = 100_000,
                     examples_per_client: int = 50, seed: int = 0,
                     num_test_clients: int = EMNIST_TEST_CLIENTS,
                     model: Optional[synthetic.HandwritingModel] = None
                     ) -> FederatedData:
  """EMNIST-shaped synthetic federated data (pixels [28, 28] float32, label int32).

  Drawn from `synthetic.HandwritingModel` (the default one unless `model`
  is given); lazy and deterministic from `seed` (module docstring). Test
  clients are further writers, unseen in training.

  Args:
    num_clients: training clients (ids "0" .. str(num_clients - 1)).
    seed: data seed (independent of the canary seed).
    num_test_clients: test clients (ids continue after the training ones).
  """
  num_clients, examples, num_test_clients, seed = _check_counts(
      num_clients, examples_per_client, "examples_per_client",
      num_test_clients, seed)
  model = synthetic.HandwritingModel() if model is None else model
  return _emnist_data(synthetic.emnist_generator(seed, examples, model),
                      num_clients, num_test_clients)


def _emnist_data(generate, num_clients, num_test_clients):
  """The EMNIST clients of the compiled generator `generate`."""

  def dataset_fn(client_id):
    client = generate(_client_index(client_id))
    return tf.data.Dataset.from_tensor_slices(collections.OrderedDict(
        label=client["label"], pixels=client["pixels"]))

  return _synthetic(num_clients, num_test_clients, dataset_fn)


def synthetic_vocab(size: int = SYNTHETIC_VOCAB_SIZE) -> tuple[str, ...]:
  """The synthetic StackOverflow vocabulary: "w0", "w1", ... (most frequent first)."""
  return tuple(f"w{i}" for i in range(size))


def synthetic_stackoverflow(num_clients: int = 100_000,
                            sentences_per_client: int = 20,
                            sentence_length: int = SENTENCE_LENGTH,
                            seed: int = 0,
                            num_test_clients: int = STACKOVERFLOW_TEST_CLIENTS,
                            vocab_size: int = SYNTHETIC_VOCAB_SIZE,
                            model: Optional[synthetic.SentenceModel] = None
                            ) -> FederatedData:
  """StackOverflow-shaped synthetic federated data over a `vocab_size` vocabulary.

  Elements have TFF's StackOverflow keys (creation_date, score, tags, title,
  tokens, type); `tokens` is a sentence of `sentence_length` space-separated
  words drawn from `synthetic.SentenceModel` (the default one unless `model`
  is given); lazy and deterministic from `seed` (module docstring).
  """
  num_clients, sentences, num_test_clients, seed = _check_counts(
      num_clients, sentences_per_client, "sentences_per_client",
      num_test_clients, seed)
  length = validation.as_int(sentence_length, "sentence_length", minimum=2)
  vocab_size = validation.as_int(vocab_size, "vocab_size", minimum=10)
  model = synthetic.SentenceModel() if model is None else model
  return _stackoverflow_data(
      synthetic.stackoverflow_generator(seed, sentences, length, vocab_size,
                                        model),
      synthetic_vocab(vocab_size), num_clients, num_test_clients)


def _stackoverflow_data(draw, vocab, num_clients, num_test_clients):
  """The StackOverflow clients of the compiled sentence generator `draw`
  over `vocab`."""

  @tf.function(input_signature=[tf.TensorSpec([], tf.int64)])
  def generate(index):
    return tf.strings.reduce_join(tf.gather(tf.constant(vocab),
                                            draw(index)["words"]),
                                  axis=1, separator=" ")

  def dataset_fn(client_id):
    tokens = generate(_client_index(client_id))
    n = tf.shape(tokens)[0]
    return tf.data.Dataset.from_tensor_slices(collections.OrderedDict(
        creation_date=tf.fill([n], "2010-01-01 00:00:00.000000 UTC"),
        score=tf.zeros([n], tf.int64),
        tags=tf.fill([n], "synthetic"),
        title=tf.fill([n], ""),
        tokens=tokens,
        type=tf.fill([n], "question")))

  return _synthetic(num_clients, num_test_clients, dataset_fn, vocab)


def _require_file(path: str, what: str, how: str) -> str:
  if not os.path.isfile(path):
    raise FileNotFoundError(
        f"{what} not found: {path} does not exist. This machine cannot "
        f"download it; {how}")
  return path


def load_emnist(cache_dir: str) -> FederatedData:
  """EMNIST-62 (TFF's federated EMNIST, 3383 writers) from `cache_dir`.

  Reads `<cache_dir>/emnist_all.sqlite` through
  `tff.simulation.datasets.emnist.load_data(only_digits=False)`.
  """
  cache_dir = os.path.abspath(os.path.expanduser(os.fspath(cache_dir)))
  _require_file(
      os.path.join(cache_dir, EMNIST_FILE), "The EMNIST database",
      f"copy {EMNIST_FILE} (TFF's federated EMNIST, decompressed from "
      "https://storage.googleapis.com/tff-datasets-public/"
      f"{EMNIST_FILE}.lzma) into {cache_dir}, or use --data=synthetic.")
  try:
    train, test = tff.simulation.datasets.emnist.load_data(
        only_digits=False, cache_dir=cache_dir)
  except Exception as e:  # a corrupt or foreign SQLite file
    raise ValueError(f"{os.path.join(cache_dir, EMNIST_FILE)} is not a TFF "
                     f"EMNIST database: {e}") from None
  return FederatedData(train=train, test=test, source="tff")


def read_vocab(path: str, vocab_size: int) -> tuple[str, ...]:
  """The first `vocab_size` words of a TFF word-count file ("word count" lines)."""
  return _read_vocab(path, validation.as_int(vocab_size, "vocab_size",
                                             minimum=1))


def _read_vocab(path, vocab_size):
  words = []
  with open(path, encoding="utf-8") as f:
    for number, line in enumerate(f, start=1):
      parts = line.split()
      if len(parts) != 2 or not parts[1].isdigit():
        raise ValueError(f"{path}, line {number}: expected 'word count', got "
                         f"{line.strip()!r}.")
      words.append(parts[0])
      if len(words) >= vocab_size:
        break
  if not words:
    raise ValueError(f"{path} holds no words.")
  return tuple(words)


def load_stackoverflow(cache_dir: str, vocab_size: int = SYNTHETIC_VOCAB_SIZE,
                       vocab_path: Optional[str] = None) -> FederatedData:
  """TFF's federated StackOverflow from `cache_dir`, with its word vocabulary.

  Reads `<cache_dir>/stackoverflow.sqlite` through
  `tff.simulation.datasets.stackoverflow.load_data` (train and test splits) and
  the vocabulary from `vocab_path` or `<cache_dir>/stackoverflow.word_count`.
  """
  return _load_stackoverflow(
      cache_dir, validation.as_int(vocab_size, "vocab_size", minimum=1),
      vocab_path)


def _load_stackoverflow(cache_dir, vocab_size, vocab_path):
  cache_dir = os.path.abspath(os.path.expanduser(os.fspath(cache_dir)))
  database = os.path.join(cache_dir, STACKOVERFLOW_FILE)
  vocab_path = vocab_path or os.path.join(cache_dir, STACKOVERFLOW_VOCAB_FILE)
  _require_file(
      database, "The StackOverflow database",
      f"copy {STACKOVERFLOW_FILE} (decompressed from https://storage."
      f"googleapis.com/tff-datasets-public/{STACKOVERFLOW_FILE}.lzma) into "
      f"{cache_dir}, or use --data=synthetic.")
  _require_file(
      vocab_path, "The StackOverflow vocabulary",
      f"copy {STACKOVERFLOW_VOCAB_FILE} (extracted from https://storage."
      "googleapis.com/tff-datasets-public/stackoverflow.word_count.tar.bz2) "
      f"to {vocab_path}, or pass --vocab_path.")
  vocab = _read_vocab(vocab_path, vocab_size)
  try:
    train, _, test = tff.simulation.datasets.stackoverflow.load_data(
        cache_dir=cache_dir)
  except Exception as e:
    raise ValueError(f"{database} is not a TFF StackOverflow database: "
                     f"{e}") from None
  return FederatedData(train=train, test=test, source="tff", vocab=vocab)


def load(settings) -> FederatedData:
  """A run's data, of its `run_settings.DataSettings` (checked with the
  config they were made of): the functions above with their defaults."""
  if settings.source == "tff":
    if settings.task == "emnist":
      return load_emnist(settings.cache_dir)
    return _load_stackoverflow(settings.cache_dir, SYNTHETIC_VOCAB_SIZE,
                               settings.vocab_path)
  if settings.task == "emnist":
    return _emnist_data(
        synthetic.emnist_graph(settings.seed, settings.examples_per_client,
                               synthetic.HandwritingModel()),
        settings.num_clients, EMNIST_TEST_CLIENTS)
  return _stackoverflow_data(
      synthetic.stackoverflow_graph(
          settings.seed, settings.examples_per_client, SENTENCE_LENGTH,
          SYNTHETIC_VOCAB_SIZE, synthetic.SentenceModel()),
      synthetic_vocab(SYNTHETIC_VOCAB_SIZE), settings.num_clients,
      STACKOVERFLOW_TEST_CLIENTS)
