"""Atomic writes: the file appears whole or not at all, with a plain file's
mode (tff_canary/stats/atomic_files.py)."""

import os
import stat

import numpy as np
import pytest

from tff_canary.stats import atomic_files


@pytest.fixture
def umask():
  """Sets a umask for the test and restores the process's."""
  old = os.umask(0o022)
  yield lambda mask: os.umask(mask)
  os.umask(old)


@pytest.mark.parametrize("mask", [0o022, 0o002, 0o077])
def test_files_get_the_mode_a_plain_open_gives(tmp_path, umask, mask):
  # A run's files used to be 0o600 (mkstemp's mode): a teammate in the same
  # group could not read a shared run directory.
  umask(mask)
  with open(tmp_path / "plain.txt", "w") as f:
    f.write("x")
  atomic_files.write_text(tmp_path / "a.txt", "x")
  atomic_files.write_json(tmp_path / "a.json", {"x": 1})
  atomic_files.save_npz(tmp_path / "a.npz", x=np.zeros(2))
  expected = stat.S_IMODE(os.stat(tmp_path / "plain.txt").st_mode)
  assert expected == 0o666 & ~mask
  for name in ("a.txt", "a.json", "a.npz"):
    assert stat.S_IMODE(os.stat(tmp_path / name).st_mode) == expected, name


def test_a_failed_write_leaves_nothing(tmp_path):
  with pytest.raises(RuntimeError):
    with atomic_files.replacing(tmp_path / "out.bin") as temp:
      with open(temp, "wb") as f:
        f.write(b"half")
      raise RuntimeError("killed mid-write")
  assert os.listdir(tmp_path) == []
