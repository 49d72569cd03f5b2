"""Synthetic federated data and TFF's real loaders on tiny files in TFF's format."""

import sqlite3

import numpy as np
import pytest
import tensorflow as tf

from tff_canary import datasets

pytestmark = pytest.mark.tff


def _labels(data, client_id):
  return [int(x["label"]) for x in data.create_tf_dataset_for_client(client_id)]


def test_synthetic_emnist_shapes_and_determinism():
  data = datasets.synthetic_emnist(num_clients=1_000_000, examples_per_client=7,
                                   seed=3)
  assert len(data.train.client_ids) == 1_000_000 and data.source == "synthetic"
  element = next(iter(data.train.create_tf_dataset_for_client("999999")))
  assert element["pixels"].shape == (28, 28) and element["pixels"].dtype == tf.float32
  assert element["label"].dtype == tf.int32
  pixels = np.stack([x["pixels"].numpy() for x in
                     data.train.create_tf_dataset_for_client("12")])
  assert pixels.shape == (7, 28, 28) and pixels.min() >= 0 and pixels.max() <= 1
  again = datasets.synthetic_emnist(num_clients=20, examples_per_client=7, seed=3)
  assert _labels(data.train, "12") == _labels(again.train, "12")
  other = datasets.synthetic_emnist(num_clients=20, examples_per_client=7, seed=4)
  assert _labels(data.train, "12") != _labels(other.train, "12")
  assert set(data.test.client_ids).isdisjoint(data.train.client_ids[:100])


def test_synthetic_emnist_classes_are_learnable_templates():
  # Same class at two clients: closer than two classes at one client.
  data = datasets.synthetic_emnist(num_clients=50, examples_per_client=200, seed=0)

  def by_label(cid):
    out = {}
    for x in data.train.create_tf_dataset_for_client(cid):
      out.setdefault(int(x["label"]), []).append(x["pixels"].numpy())
    return {k: np.mean(v, axis=0) for k, v in out.items()}

  a, b = by_label("1"), by_label("2")
  common = sorted(set(a) & set(b))[:2]
  same = np.linalg.norm((a[common[0]] - a[common[0]].mean())
                        - (b[common[0]] - b[common[0]].mean()))
  diff = np.linalg.norm(a[common[0]] - a[common[1]])
  assert same < diff


def test_synthetic_stackoverflow_format():
  data = datasets.synthetic_stackoverflow(num_clients=30, sentences_per_client=4,
                                          sentence_length=9, seed=1)
  assert list(data.train.element_type_structure) == [
      "creation_date", "score", "tags", "title", "tokens", "type"]
  sentences = [x["tokens"].numpy().decode() for x in
               data.train.create_tf_dataset_for_client("7")]
  assert len(sentences) == 4 and all(len(s.split()) == 9 for s in sentences)
  vocab = set(data.vocab)
  assert len(vocab) == datasets.SYNTHETIC_VOCAB_SIZE
  assert all(w in vocab for s in sentences for w in s.split())


def _write_emnist_sqlite(path, clients):
  connection = sqlite3.connect(path)
  connection.execute("CREATE TABLE examples (split_name TEXT, client_id TEXT, "
                     "serialized_example_proto BLOB)")
  connection.execute("CREATE TABLE client_metadata (client_id TEXT, "
                     "split_name TEXT, num_examples INTEGER)")
  rng = np.random.default_rng(0)
  for split in ("all_train", "all_test"):
    for client, count in clients.items():
      for _ in range(count):
        example = tf.train.Example(features=tf.train.Features(feature={
            "pixels": tf.train.Feature(float_list=tf.train.FloatList(
                value=rng.random(784).astype(np.float32))),
            "label": tf.train.Feature(int64_list=tf.train.Int64List(
                value=[int(rng.integers(62))])),
        }))
        connection.execute("INSERT INTO examples VALUES (?, ?, ?)",
                           (split, client, example.SerializeToString()))
      connection.execute("INSERT INTO client_metadata VALUES (?, ?, ?)",
                         (client, split, count))
  connection.commit()
  connection.close()


def test_emnist_loads_a_tiny_file_through_tffs_loader(tmp_path):
  _write_emnist_sqlite(tmp_path / datasets.EMNIST_FILE, {"f0001_45": 3, "f0002_12": 5})
  data = datasets.load_emnist(str(tmp_path))
  assert data.source == "tff"
  assert sorted(data.train.client_ids) == ["f0001_45", "f0002_12"]
  elements = list(data.train.create_tf_dataset_for_client("f0002_12"))
  assert len(elements) == 5 and elements[0]["pixels"].shape == (28, 28)
  assert elements[0]["label"].dtype == tf.int32


def test_emnist_missing_file_names_it_and_leaves_nothing(tmp_path):
  cache = tmp_path / "cache"
  with pytest.raises(FileNotFoundError) as info:
    datasets.load_emnist(str(cache))
  assert str(cache / datasets.EMNIST_FILE) in str(info.value)
  assert "--data=synthetic" in str(info.value)
  assert not cache.exists()  # nothing created, nothing half-written


def test_emnist_corrupt_file_is_a_clear_error(tmp_path):
  (tmp_path / datasets.EMNIST_FILE).write_bytes(b"not a database at all" * 10)
  with pytest.raises(ValueError, match="not a TFF EMNIST database"):
    datasets.load_emnist(str(tmp_path))


def _write_stackoverflow_sqlite(path):
  connection = sqlite3.connect(path)
  connection.execute("CREATE TABLE examples (split_name TEXT, client_id TEXT, "
                     "serialized_example_proto BLOB)")
  connection.execute("CREATE TABLE client_metadata (client_id TEXT, "
                     "split_name TEXT, num_examples INTEGER)")
  for split in ("train", "heldout", "test"):
    for client in ("00001", "00002"):
      feature = {name: tf.train.Feature(bytes_list=tf.train.BytesList(value=[value]))
                 for name, value in [("creation_date", b"2012-03-04"),
                                     ("tags", b"python|numpy"), ("title", b"t"),
                                     ("tokens", b"how do i sort a list"),
                                     ("type", b"question")]}
      feature["score"] = tf.train.Feature(int64_list=tf.train.Int64List(value=[3]))
      example = tf.train.Example(features=tf.train.Features(feature=feature))
      connection.execute("INSERT INTO examples VALUES (?, ?, ?)",
                         (split, client, example.SerializeToString()))
      connection.execute("INSERT INTO client_metadata VALUES (?, ?, ?)",
                         (client, split, 1))
  connection.commit()
  connection.close()


def test_stackoverflow_loads_a_tiny_file_with_its_vocabulary(tmp_path):
  _write_stackoverflow_sqlite(tmp_path / datasets.STACKOVERFLOW_FILE)
  (tmp_path / datasets.STACKOVERFLOW_VOCAB_FILE).write_text(
      "the 900\na 800\nhow 700\nsort 10\n")
  data = datasets.load_stackoverflow(str(tmp_path), vocab_size=3)
  assert data.vocab == ("the", "a", "how")
  element = next(iter(data.train.create_tf_dataset_for_client("00002")))
  assert element["tokens"].numpy() == b"how do i sort a list"


def test_stackoverflow_missing_vocabulary_is_named(tmp_path):
  _write_stackoverflow_sqlite(tmp_path / datasets.STACKOVERFLOW_FILE)
  with pytest.raises(FileNotFoundError, match="stackoverflow.word_count"):
    datasets.load_stackoverflow(str(tmp_path))
  bad = tmp_path / "vocab.txt"
  bad.write_text("just-a-word\n")
  with pytest.raises(ValueError, match="line 1"):
    datasets.load_stackoverflow(str(tmp_path), vocab_path=str(bad))


@pytest.mark.parametrize("kwargs, error, match", [
    (dict(num_clients=0), ValueError, "num_clients"),
    (dict(examples_per_client=2.5), TypeError, "examples_per_client"),
    (dict(seed=-1), ValueError, "seed"),
])
def test_synthetic_bad_arguments(kwargs, error, match):
  with pytest.raises(error, match=match):
    datasets.synthetic_emnist(**kwargs)
