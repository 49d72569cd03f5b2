"""The report's line on Flower's accountant (harness/reporting/flower_notes.py).

Hand-built flower_accountant.json records (as `flower_claim.
accountant_record` writes them; its own tests, in the Flower environment,
check their numbers): the line, and the refusal of a damaged file. NumPy
only: it runs in both environments.
"""

from __future__ import annotations

import json

import pytest

from tff_canary.harness.recording import run_dir as run_dir_lib
from tff_canary.harness.reporting import flower_notes


def record(**kwargs):
  base = dict(applies=True, reasons=[], notes=[], epsilon=7.25, delta=1e-5,
              accounting_method="rdp", num_releases=6, privacy_spent=None,
              epsilon_all_rounds=6.8, epsilon_nominal=6.8)
  return {**base, **kwargs}


def test_where_it_applies_the_line_gives_both_figures():
  line = flower_notes.line(record())
  assert line.startswith("Flower's accountant: ε = 7.25 (rdp, 6 releases), "
                         "an upper bound")
  assert line.endswith("the exact analytical ε of a client in every round "
                       "is 6.8")


def test_where_it_does_not_the_line_says_why_and_what_was_given():
  line = flower_notes.line(record(
      applies=False, epsilon=None, epsilon_nominal=5.1,
      reasons=["adaptive clipping: no accountant", "weighted aggregation"],
      notes=["sampling: neither figure amplifies"]))
  assert line == (
      "Flower's accountant does not apply: adaptive clipping: no "
      "accountant; weighted aggregation; the exact analytical ε of a client "
      "in every round is 6.8, of the noise each round really had (5.1 for "
      "the noise multiplier as given); sampling: neither figure amplifies")
  # The nominal figure is left out where it is the real one.
  assert "as given" not in flower_notes.line(record(applies=False,
                                                    reasons=["x"]))


def test_a_run_without_the_file_has_none_and_a_damaged_one_is_refused(
    tmp_path):
  rd = run_dir_lib.RunDir(tmp_path)
  assert flower_notes.load(rd) is None
  (tmp_path / flower_notes.FLOWER_ACCOUNTANT).write_text(json.dumps([1]))
  with pytest.raises(run_dir_lib.RunDirError,
                     match=r"is not a Flower accountant record"):
    flower_notes.load(rd)
  (tmp_path / flower_notes.FLOWER_ACCOUNTANT).write_text("{")
  with pytest.raises(run_dir_lib.RunDirError, match=r"cannot be read"):
    flower_notes.load(rd)
  (tmp_path / flower_notes.FLOWER_ACCOUNTANT).write_text(
      json.dumps(record()))
  assert flower_notes.load(rd) == record()
