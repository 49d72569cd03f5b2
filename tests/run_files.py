"""Reading a finished run directory's files for bitwise comparisons in tests."""

import csv
import os


def metrics_without_timing(out):
  """metrics.csv rows as text, without `seconds` (wall time: the only column
  two runs of the same command may differ in)."""
  with open(os.path.join(out, "metrics.csv")) as f:
    rows = list(csv.DictReader(f))
  for row in rows:
    del row["seconds"]
  return rows
