"""Tests of tff_canary.stats.canaries.cosine_table (NumPy only; no TensorFlow imported)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest

from tff_canary.stats.canaries import cosine_table
from tff_canary.stats.canaries.cosine_table import COLUMNS, CosineTable


def _table(**overrides):
  rng = np.random.default_rng(0)
  m = 7
  kwargs = dict(
      id=np.arange(m),
      group=np.array(["inserted"] * 4 + ["held_out"] * 3),
      participation=np.array([1, 2, 1, 3, 0, 0, 0]),
      final_cosine=rng.uniform(-0.1, 0.3, m),
      max_cosine=rng.uniform(0.0, 0.5, m),
      max_round=rng.integers(0, 10, m),
      seed=12345678901,
      dim=1000,
      num_rounds=10,
      rounds_recorded=10,
      assignment="fixed",
      schedule="FixedPresentations(num_rounds=10, presentations=2)",
      generator="gen-v1",
  )
  kwargs.update(overrides)
  return CosineTable(**kwargs)


def test_module_imports_no_tensorflow():
  code = ("import sys; import tff_canary.stats.canaries.cosine_table; "
          "assert 'tensorflow' not in sys.modules, 'TF imported'")
  subprocess.run([sys.executable, "-c", code], check=True)


@pytest.mark.parametrize("suffix", [".csv", ".npz"])
def test_round_trip_is_exact(tmp_path, suffix):
  table = _table()
  path = tmp_path / f"t{suffix}"
  table.save(path)
  loaded = CosineTable.load(path)
  assert loaded == table
  for name in cosine_table.COLUMNS:
    np.testing.assert_array_equal(getattr(loaded, name), getattr(table, name))
  assert loaded.final_cosine.dtype == np.float64
  assert loaded.metadata == table.metadata
  assert CosineTable.load(path, dim=1000) == table


def test_csv_cells_are_plain_numbers(tmp_path):
  # Under NumPy 2 repr(np.float64(x)) is "np.float64(x)"; the file holds
  # Python's repr of the float, as under NumPy 1, and NaN as "nan".
  table = _table(max_cosine=np.array([np.nan] * 7), max_round=np.full(7, -1))
  path = tmp_path / "t.csv"
  table.save(path)
  rows = [line.split(",") for line in path.read_text().splitlines()
          if not line.startswith("#")][1:]
  assert [r[3] for r in rows] == [repr(float(x)) for x in table.final_cosine]
  assert {r[4] for r in rows} == {"nan"}
  assert "np." not in path.read_text()


def test_a_csv_saved_with_numpy2_scalar_reprs_loads(tmp_path):
  # What save_csv wrote under NumPy 2 before it wrote repr(float(x)): such a
  # saved run loads, to the same float64 values bitwise.
  table = _table()
  path = tmp_path / "t.csv"
  table.save(path)
  lines = path.read_text().splitlines()
  header = lines.index(",".join(COLUMNS))
  for i in range(header + 1, len(lines)):
    cells = lines[i].split(",")
    for column in ("final_cosine", "max_cosine", "scheduled_sum"):
      j = COLUMNS.index(column)
      cells[j] = f"np.float64({cells[j]})"
    lines[i] = ",".join(cells)
  path.write_text("\n".join(lines) + "\n")
  assert "np.float64(" in path.read_text()
  assert CosineTable.load(path) == table
  lines[header + 1] = lines[header + 1].replace("np.float64(", "np.float32(")
  path.write_text("\n".join(lines) + "\n")
  with pytest.raises(ValueError, match="bad value"):
    CosineTable.load(path)


@pytest.mark.parametrize("suffix", [".csv", ".npz"])
def test_round_trip_without_all_iterates(tmp_path, suffix):
  table = _table(max_cosine=np.full(7, np.nan), max_round=np.full(7, -1),
                 rounds_recorded=0)
  path = tmp_path / f"t{suffix}"
  table.save(path)
  loaded = CosineTable.load(path)
  assert loaded == table
  with pytest.raises(ValueError, match="no all-iterates"):
    loaded.max_cosines("inserted")


def test_accessors():
  table = _table()
  np.testing.assert_array_equal(table.final_cosines("inserted"),
                                table.final_cosine[:4])
  np.testing.assert_array_equal(table.max_cosines("held_out"),
                                table.max_cosine[4:])
  np.testing.assert_array_equal(table.ids("held_out"), [4, 5, 6])
  np.testing.assert_array_equal(table.participations("inserted"), [1, 2, 1, 3])
  assert len(table) == 7
  with pytest.raises(ValueError, match="group"):
    table.final_cosines("in")
  assert "4 inserted, 3 held out" in repr(table)


def test_table_is_frozen():
  table = _table()
  with pytest.raises(ValueError):
    table.final_cosine[0] = 0.5
  with pytest.raises(Exception):
    table.seed = 3


@pytest.mark.parametrize("overrides, match", [
    (dict(group=np.array(["inserted"] * 4 + ["other"] * 3)), "group"),
    (dict(id=np.array([0, 1, 2, 3, 4, 5, 5])), "distinct"),
    (dict(participation=np.array([1, 2, 1, 3, 0, 1, 0])), "held-out"),
    (dict(final_cosine=np.r_[np.zeros(6), 1.5]), "final_cosine"),
    (dict(final_cosine=np.r_[np.zeros(6), np.nan]), "final_cosine"),
    (dict(max_cosine=np.r_[np.zeros(6), np.nan]), "disagree"),
    (dict(max_round=np.r_[np.zeros(6, int), -4]), "disagree|max_round"),
    (dict(final_cosine=np.zeros(6)), "rows"),
    (dict(dim=1), "dim"),
    (dict(seed=-1), "seed"),
    (dict(rounds_recorded=0), "rounds_recorded"),
])
def test_invalid_tables(overrides, match):
  with pytest.raises(ValueError, match=match):
    _table(**overrides)


def test_invalid_types():
  with pytest.raises(TypeError, match="id"):
    _table(id=np.arange(7) + 0.5)
  with pytest.raises(TypeError, match="assignment"):
    _table(assignment=3)


def test_load_mismatched_dim(tmp_path):
  path = tmp_path / "t.npz"
  _table().save(path)
  with pytest.raises(ValueError, match="dim = 1000, not dim = 999"):
    CosineTable.load(path, dim=999)


def _cut_last_columns(path, count):
  lines = path.read_text().splitlines()
  header_at = next(i for i, l in enumerate(lines) if not l.startswith("#"))
  cut = [",".join(l.split(",")[:-count]) if i >= header_at else l
         for i, l in enumerate(lines)]
  path.write_text("\n".join(cut) + "\n")


def test_load_missing_column_csv(tmp_path):
  path = tmp_path / "t.csv"
  _table().save(path)
  _cut_last_columns(path, 4)  # max_round .. scheduled_rounds
  with pytest.raises(ValueError, match=r"missing columns \['max_round'\]"):
    CosineTable.load(path)


@pytest.mark.parametrize("suffix", [".csv", ".npz"])
def test_a_table_saved_before_the_unrecorded_column_loads(tmp_path, suffix):
  # Files written before the column existed lack it; they load with zeros
  # (every participation assumed recorded, as those runs recorded all rounds).
  table = _table()
  path = tmp_path / f"t{suffix}"
  if suffix == ".csv":
    table.save(path)
    _cut_last_columns(path, 3)
  else:
    np.savez(path, metadata=np.array(json.dumps(table.metadata)),
             **{c: getattr(table, c) for c in COLUMNS[:6]})
  loaded = CosineTable.load(path)
  assert loaded == table and not loaded.unrecorded.any()
  assert not loaded.has_scheduled_sums


@pytest.mark.parametrize("removed", cosine_table.KNOWN_CANARIES_REMOVED)
def test_tables_record_which_statistics_had_the_canaries_removed(tmp_path,
                                                                 removed):
  # "all_iterates" is what older versions' pass wrote for gaussian canaries;
  # their tables still load and say so.
  table = _table(known_canaries_removed=removed)
  for suffix in ("csv", "npz"):
    path = tmp_path / f"t.{suffix}"
    table.save(path)
    loaded = CosineTable.load(path)
    assert loaded.known_canaries_removed == removed and loaded == table
  # A table from before the field loads as "none".
  text = (tmp_path / "t.csv").read_text()
  line = f'# known_canaries_removed: "{removed}"\n'
  assert line in text
  (tmp_path / "old.csv").write_text(text.replace(line, ""))
  assert CosineTable.load(
      tmp_path / "old.csv").known_canaries_removed == "none"


@pytest.mark.parametrize("suffix", [".csv", ".npz"])
def test_scheduled_sums_round_trip(tmp_path, suffix):
  # The schedule-aware columns survive saving bitwise, and T_j scales each
  # sum by sqrt(dim / P_j).
  base = _table()
  n = len(base)
  sums = np.random.default_rng(3).normal(size=n) / 30.0
  rounds = np.arange(n) % 3 + 1
  table = CosineTable(**{c: getattr(base, c) for c in COLUMNS[:7]},
                      **base.metadata | {"scheduled_sum": sums,
                                         "scheduled_rounds": rounds})
  path = tmp_path / f"t{suffix}"
  table.save(path)
  loaded = CosineTable.load(path)
  assert loaded == table and loaded.has_scheduled_sums
  mask = loaded.mask("held_out")
  np.testing.assert_array_equal(
      loaded.scheduled_statistics("held_out"),
      np.sqrt(base.dim / rounds[mask]) * sums[mask])
  with pytest.raises(ValueError, match="no schedule-aware sums"):
    base.scheduled_statistics("inserted")


def test_load_missing_column_npz(tmp_path):
  path = tmp_path / "t.npz"
  table = _table()
  np.savez(path, metadata=np.array('{"seed": 1, "dim": 1000, "num_rounds": '
                                   '10, "rounds_recorded": 10}'),
           id=table.id, group=table.group)
  with pytest.raises(ValueError, match="missing columns"):
    CosineTable.load(path)


def test_load_missing_metadata(tmp_path):
  path = tmp_path / "t.csv"
  _table().save(path)
  text = "\n".join(l for l in path.read_text().splitlines()
                   if not l.startswith("# dim"))
  path.write_text(text)
  with pytest.raises(ValueError, match=r"missing metadata \['dim'\]"):
    CosineTable.load(path)


def test_load_corrupt_files(tmp_path):
  npz = tmp_path / "t.npz"
  _table().save(npz)
  data = npz.read_bytes()
  npz.write_bytes(data[: len(data) // 2])
  with pytest.raises(ValueError, match="not a valid cosine table"):
    CosineTable.load(npz)
  garbage = tmp_path / "g.csv"
  garbage.write_bytes(b"\xff\xfe\x00garbage")
  with pytest.raises(ValueError, match="not a valid cosine table"):
    CosineTable.load(garbage)
  csv = tmp_path / "t.csv"
  _table().save(csv)
  csv.write_text(csv.read_text().replace("inserted,1,", "inserted,one,", 1))
  with pytest.raises(ValueError, match="not a valid cosine table"):
    CosineTable.load(csv)
  with pytest.raises(FileNotFoundError):
    CosineTable.load(tmp_path / "none.csv")


def test_save_bad_extension(tmp_path):
  with pytest.raises(ValueError, match=".csv or .npz"):
    _table().save(tmp_path / "t.txt")


def test_write_is_atomic(tmp_path, monkeypatch):
  """A failed save leaves the old file intact and no temporary file behind."""
  path = tmp_path / "t.npz"
  old = _table()
  old.save(path)
  before = path.read_bytes()

  def fail(*args):
    raise OSError("disk full")

  monkeypatch.setattr(os, "replace", fail)
  with pytest.raises(OSError, match="disk full"):
    _table(seed=1).save(path)
  assert path.read_bytes() == before
  assert sorted(os.listdir(tmp_path)) == ["t.npz"]


def test_unrecorded_participation_refuses_the_all_iterates_statistics():
  # Canary 3 took part in 3 rounds, one of them not recorded: its max cosine
  # misses that round, so it would look held out. The table must refuse
  # (before the column existed, max_cosines returned the values silently).
  table = _table(unrecorded=np.array([0, 0, 0, 1, 0, 0, 0]))
  assert not table.has_max_cosines
  assert "canary id 3" in table.all_iterates_refusal
  for group in ("inserted", "held_out"):
    with pytest.raises(ValueError, match=r"1 participations of 1 inserted "
                       r"canaries .*not recorded.*epsilon_all"):
      table.max_cosines(group)
  complete = _table()
  assert complete.has_max_cosines and complete.all_iterates_refusal is None
  np.testing.assert_array_equal(complete.max_cosines("held_out"),
                                complete.max_cosine[4:])


@pytest.mark.parametrize("suffix", [".csv", ".npz"])
def test_unrecorded_round_trip(tmp_path, suffix):
  table = _table(unrecorded=np.array([1, 0, 0, 2, 0, 0, 0]))
  path = tmp_path / f"t{suffix}"
  table.save(path)
  loaded = CosineTable.load(path)
  assert loaded == table
  np.testing.assert_array_equal(loaded.unrecorded, [1, 0, 0, 2, 0, 0, 0])


@pytest.mark.parametrize("unrecorded, match", [
    ([2, 0, 0, 0, 0, 0, 0], r"canary id 0 has unrecorded 2 and participation 1"),
    ([0, 0, 0, 0, 1, 0, 0], r"canary id 4 has unrecorded 1 and participation 0"),
    ([-1, 0, 0, 0, 0, 0, 0], r"\[0, participation\]"),
])
def test_invalid_unrecorded(unrecorded, match):
  with pytest.raises(ValueError, match=match):
    _table(unrecorded=np.array(unrecorded))
