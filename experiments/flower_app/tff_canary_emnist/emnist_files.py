"""TFF's federated EMNIST files, read with h5py (the real data's loader).

TFF's federated EMNIST as HDF5 (`fed_emnist_train.h5`, `fed_emnist_test.h5`
of TFF's `fed_emnist.tar.bz2`, also what LEAF-derived loaders read): one
group per writer under `examples/`, each holding `pixels` float32
[n, 28, 28] and `label` int [n]. No download here (the machine reaches no
data host): put the files in a folder and give it as the run config's
`data-dir` (README.md). The TFF experiments read the same data from TFF
0.87's `emnist_all.sqlite` (`tff_canary.harness.data.datasets.load_emnist`).
"""

from __future__ import annotations

import os

import h5py
import numpy as np

TRAIN_FILE = "fed_emnist_train.h5"
TEST_FILE = "fed_emnist_test.h5"


class EmnistFile:
  """One TFF EMNIST HDF5 file: its writers, in sorted order, and theirs."""

  def __init__(self, path: str | os.PathLike):
    self.path = os.path.abspath(os.fspath(path))
    if not os.path.isfile(self.path):
      raise FileNotFoundError(
          f"path {self.path!r}: no such file (TFF's federated EMNIST as "
          f"HDF5, {TRAIN_FILE} / {TEST_FILE}).")
    with h5py.File(self.path, "r") as f:
      if "examples" not in f:
        raise ValueError(f"path {self.path!r} has no 'examples' group: not a "
                         "TFF federated EMNIST file.")
      self.client_ids = tuple(sorted(f["examples"].keys()))
    if not self.client_ids:
      raise ValueError(f"path {self.path!r} has no writers.")

  def __len__(self) -> int:
    return len(self.client_ids)

  def client(self, index: int) -> dict:
    """Writer number `index` (of `client_ids`): pixels float32 [n, 28, 28],
    label int32 [n]."""
    if not 0 <= int(index) < len(self.client_ids):
      raise ValueError(f"index must be in [0, {len(self.client_ids)}), got "
                       f"{index!r}.")
    with h5py.File(self.path, "r") as f:
      group = f["examples"][self.client_ids[int(index)]]
      pixels = np.asarray(group["pixels"], np.float32)
      label = np.asarray(group["label"]).astype(np.int32).reshape(-1)
    if pixels.shape[1:] != (28, 28) or pixels.shape[0] != label.shape[0]:
      raise ValueError(f"writer {self.client_ids[int(index)]!r} of "
                       f"{self.path!r}: pixels {pixels.shape}, label "
                       f"{label.shape}; expected [n, 28, 28] and [n].")
    return dict(pixels=pixels, label=label)


def write(path: str | os.PathLike, clients: dict[str, dict]) -> None:
  """Writes `clients` (writer id -> pixels, label) in the same layout (for
  tests, and to export other data for the app)."""
  with h5py.File(os.fspath(path), "w") as f:
    examples = f.create_group("examples")
    for client_id, data in clients.items():
      group = examples.create_group(client_id)
      group.create_dataset("pixels", data=np.asarray(data["pixels"],
                                                     np.float32))
      group.create_dataset("label", data=np.asarray(data["label"], np.int32))


__all__ = ["EmnistFile", "TEST_FILE", "TRAIN_FILE", "write"]
