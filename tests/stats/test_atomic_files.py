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


def _replacing(path):
  # A writer that opens the temporary path itself (matplotlib's savefig).
  with atomic_files.replacing(path, suffix=".png") as temp:
    with open(temp, "wb") as f:
      f.write(b"png")


WRITERS = {
    "write_text": lambda p: atomic_files.write_text(p, "text"),
    "write_json": lambda p: atomic_files.write_json(p, {"a": 1}),
    "save_npy": lambda p: atomic_files.save_npy(p, np.zeros(3)),
    "save_npz": lambda p: atomic_files.save_npz(p, a=np.zeros(3)),
    "replacing": _replacing,
}


@pytest.mark.parametrize("writer", sorted(WRITERS))
@pytest.mark.parametrize("mask", [0o027, 0o077])
def test_every_writer_gets_the_plain_mode(tmp_path, umask, writer, mask):
  umask(mask)
  with open(tmp_path / "plain", "w") as f:
    f.write("x")
  WRITERS[writer](tmp_path / "atomic")
  assert (stat.S_IMODE(os.stat(tmp_path / "atomic").st_mode)
          == stat.S_IMODE(os.stat(tmp_path / "plain").st_mode)
          == 0o666 & ~mask)
  assert sorted(os.listdir(tmp_path)) == ["atomic", "plain"]  # no temp left


@pytest.mark.parametrize("writer", sorted(WRITERS))
def test_a_replaced_file_keeps_its_mode(tmp_path, umask, writer):
  # As a plain open() of an existing file does (read-only ones too: the
  # rename needs the directory's permission only).
  umask(0o022)
  for mode in (0o640, 0o600, 0o444):
    path = tmp_path / f"file{mode:o}"
    path.write_text("old")
    os.chmod(path, mode)
    WRITERS[writer](path)
    assert stat.S_IMODE(os.stat(path).st_mode) == mode
    assert path.read_bytes() != b"old"


def test_the_umask_is_never_changed(tmp_path, umask, monkeypatch):
  # Reading the umask means setting it, for every thread of the process
  # (TensorFlow's and TFF's write files too): the writes never do.
  umask(0o027)
  monkeypatch.setattr(os, "umask", lambda mask: pytest.fail("os.umask"))
  atomic_files.write_text(tmp_path / "a.txt", "x")
  assert stat.S_IMODE(os.stat(tmp_path / "a.txt").st_mode) == 0o640
