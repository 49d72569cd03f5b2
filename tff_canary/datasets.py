"""Federated datasets for the experiments: built-in synthetic data and TFF's own.

Two sources, with the element formats of TFF's datasets so the same
preprocessing and models apply to both:

  * synthetic (the default; no download): `synthetic_emnist` and
    `synthetic_stackoverflow` build `tff.simulation.datasets.ClientData` with any
    number of clients, each generated on demand in TensorFlow from
    (seed, client index) with stateless random ops, so a population of 10^6
    clients costs nothing until a client is used and the same seed gives the
    same data everywhere. EMNIST-like clients hold 28x28 images of 62 classes
    (class templates plus a client "handwriting" offset plus pixel noise, so a
    CNN can learn them); StackOverflow-like clients hold sentences over a
    10,000-word vocabulary from a sparse Markov chain (so next-word prediction
    can be learned).
  * TFF (`--data=tff`): `load_emnist` and `load_stackoverflow` read TFF's cached
    SQLite files through TFF's own loaders
    (`tff.simulation.datasets.emnist.load_data`, `stackoverflow.load_data`).
    Offline, a missing file is an error that names the file and where to put
    it, raised before TFF is called, so nothing is downloaded or half-written.
    StackOverflow's vocabulary comes from TFF's word-count file, which TFF only
    fetches through a hash-checked download; offline it is read from
    `<cache_dir>/stackoverflow.word_count` (or `vocab_path`), one
    "word count" per line, most frequent first.

Client ids are "0", "1", ..., as strings (TFF's convention).
"""

from __future__ import annotations

import collections
import dataclasses
import os
from typing import Optional

import numpy as np
import tensorflow as tf
import tensorflow_federated as tff

from tff_canary import validation
from tff_canary import worker_guard

worker_guard.install()

EMNIST_CLASSES = 62
EMNIST_FILE = "emnist_all.sqlite"
STACKOVERFLOW_FILE = "stackoverflow.sqlite"
STACKOVERFLOW_VOCAB_FILE = "stackoverflow.word_count"
SYNTHETIC_VOCAB_SIZE = 10_000

# Tags of the stateless seeds, so that different parts never share a stream.
_TAG_TEMPLATES, _TAG_CLIENT, _TAG_CHAIN = 101, 102, 103


@dataclasses.dataclass(frozen=True)
class FederatedData:
  """Train and test client data of one task, and where they came from."""

  train: tff.simulation.datasets.ClientData
  test: tff.simulation.datasets.ClientData
  source: str  # "synthetic" or "tff"
  vocab: Optional[tuple[str, ...]] = None  # StackOverflow only


def _client_index(client_id: tf.Tensor) -> tf.Tensor:
  return tf.strings.to_number(client_id, out_type=tf.int64)


def _seed(seed: int, tag: int, index) -> tf.Tensor:
  """A stateless seed [seed, tag * 2^32 + index] as int64[2]."""
  return tf.stack([tf.constant(seed, tf.int64),
                   tf.constant(tag, tf.int64) * (2 ** 32)
                   + tf.cast(index, tf.int64)])


def _check_counts(num_clients, examples, name):
  num_clients = validation.as_int(num_clients, "num_clients", minimum=1)
  examples = validation.as_int(examples, name, minimum=1)
  return num_clients, examples


def synthetic_emnist(num_clients: int = 100_000,
                     examples_per_client: int = 50, seed: int = 0,
                     num_test_clients: int = 50) -> FederatedData:
  """EMNIST-shaped synthetic federated data (pixels [28, 28] float32, label int32).

  Each class c has a fixed template image T_c (smooth random strokes); client
  i has a "handwriting" offset H_i; an example of class c at client i is
  clip(0.6 T_c + 0.25 H_i + 0.15 noise, 0, 1), with labels drawn uniformly.
  Deterministic from `seed`.

  Args:
    num_clients: training clients (ids "0" .. str(num_clients - 1)).
    examples_per_client: examples per client.
    seed: data seed (independent of the canary seed).
    num_test_clients: test clients (ids continue after the training ones).
  """
  num_clients, examples = _check_counts(num_clients, examples_per_client,
                                        "examples_per_client")
  num_test_clients = validation.as_int(num_test_clients, "num_test_clients",
                                       minimum=1)
  seed = validation.as_int(seed, "seed", minimum=0)

  def templates():
    coarse = tf.random.stateless_uniform(
        [EMNIST_CLASSES, 7, 7, 1], seed=_seed(seed, _TAG_TEMPLATES, 0))
    return tf.image.resize(coarse, [28, 28])[..., 0]  # smooth strokes

  def dataset_fn(client_id):
    index = _client_index(client_id)
    t = templates()
    h = tf.image.resize(tf.random.stateless_uniform(
        [1, 14, 14, 1], seed=_seed(seed, _TAG_CLIENT, 2 * index)),
                        [28, 28])[0, ..., 0]
    labels = tf.random.stateless_uniform(
        [examples], seed=_seed(seed, _TAG_CLIENT, 2 * index + 1),
        maxval=EMNIST_CLASSES, dtype=tf.int32)
    noise = tf.random.stateless_uniform(
        [examples, 28, 28], seed=_seed(seed, _TAG_CHAIN, index))
    pixels = tf.clip_by_value(
        0.6 * tf.gather(t, labels) + 0.25 * h + 0.15 * noise, 0.0, 1.0)
    return tf.data.Dataset.from_tensor_slices(collections.OrderedDict(
        label=labels, pixels=pixels))

  train_ids = [str(i) for i in range(num_clients)]
  test_ids = [str(num_clients + i) for i in range(num_test_clients)]
  make = tff.simulation.datasets.ClientData.from_clients_and_tf_fn
  return FederatedData(train=make(train_ids, dataset_fn),
                       test=make(test_ids, dataset_fn), source="synthetic")


def synthetic_vocab(size: int = SYNTHETIC_VOCAB_SIZE) -> tuple[str, ...]:
  """The synthetic StackOverflow vocabulary: "w0", "w1", ... (most frequent first)."""
  return tuple(f"w{i}" for i in range(size))


def synthetic_stackoverflow(num_clients: int = 100_000,
                            sentences_per_client: int = 20,
                            sentence_length: int = 12, seed: int = 0,
                            num_test_clients: int = 20,
                            vocab_size: int = SYNTHETIC_VOCAB_SIZE
                            ) -> FederatedData:
  """StackOverflow-shaped synthetic federated data over a `vocab_size` vocabulary.

  Elements have TFF's StackOverflow keys (creation_date, score, tags, title,
  tokens, type); `tokens` is a sentence of `sentence_length` space-separated
  words. Words follow a sparse Markov chain: after word w comes one of 4
  successors (w * 7 + k * 13 + 1) mod V_c, k = 0..3, mostly within the
  V_c = 2000 most frequent words, so a language model can learn it; 10% of
  words are replaced by a uniform draw from the whole vocabulary.
  """
  num_clients, sentences = _check_counts(num_clients, sentences_per_client,
                                         "sentences_per_client")
  length = validation.as_int(sentence_length, "sentence_length", minimum=2)
  num_test_clients = validation.as_int(num_test_clients, "num_test_clients",
                                       minimum=1)
  vocab_size = validation.as_int(vocab_size, "vocab_size", minimum=10)
  seed = validation.as_int(seed, "seed", minimum=0)
  vocab = synthetic_vocab(vocab_size)
  core = min(2000, vocab_size)

  def dataset_fn(client_id):
    index = _client_index(client_id)
    table = tf.constant(vocab)
    first = tf.random.stateless_uniform(
        [sentences], seed=_seed(seed, _TAG_CLIENT, 2 * index), maxval=core,
        dtype=tf.int64)
    choices = tf.random.stateless_uniform(
        [length - 1, sentences], seed=_seed(seed, _TAG_CHAIN, 2 * index),
        maxval=4, dtype=tf.int64)
    uniform = tf.random.stateless_uniform(
        [length - 1, sentences], seed=_seed(seed, _TAG_CHAIN, 2 * index + 1),
        maxval=vocab_size, dtype=tf.int64)
    replace = tf.random.stateless_uniform(
        [length - 1, sentences], seed=_seed(seed, _TAG_CLIENT, 2 * index + 1)
    ) < 0.1

    def step(word, inputs):
      choice, other, swap = inputs
      nxt = tf.math.floormod(word * 7 + choice * 13 + 1, core)
      return tf.where(swap, other, nxt)

    rest = tf.scan(step, (choices, uniform, replace), initializer=first)
    words = tf.transpose(tf.concat([first[None], rest], axis=0))
    tokens = tf.strings.reduce_join(tf.gather(table, words), axis=1,
                                    separator=" ")
    n = tf.shape(tokens)[0]
    return tf.data.Dataset.from_tensor_slices(collections.OrderedDict(
        creation_date=tf.fill([n], "2010-01-01 00:00:00.000000 UTC"),
        score=tf.zeros([n], tf.int64),
        tags=tf.fill([n], "synthetic"),
        title=tf.fill([n], ""),
        tokens=tokens,
        type=tf.fill([n], "question")))

  train_ids = [str(i) for i in range(num_clients)]
  test_ids = [str(num_clients + i) for i in range(num_test_clients)]
  make = tff.simulation.datasets.ClientData.from_clients_and_tf_fn
  return FederatedData(train=make(train_ids, dataset_fn),
                       test=make(test_ids, dataset_fn), source="synthetic",
                       vocab=vocab)


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
  vocab_size = validation.as_int(vocab_size, "vocab_size", minimum=1)
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
  vocab = read_vocab(vocab_path, vocab_size)
  try:
    train, _, test = tff.simulation.datasets.stackoverflow.load_data(
        cache_dir=cache_dir)
  except Exception as e:
    raise ValueError(f"{database} is not a TFF StackOverflow database: "
                     f"{e}") from None
  return FederatedData(train=train, test=test, source="tff", vocab=vocab)


def num_examples(data: tff.simulation.datasets.ClientData,
                 client_id: str) -> int:
  """Number of examples of one client (iterates its dataset)."""
  return int(data.create_tf_dataset_for_client(client_id).reduce(
      np.int64(0), lambda n, _: n + 1))
