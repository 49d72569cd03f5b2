"""Reading a finished run directory's files for comparisons in tests."""

import csv
import os

import numpy as np


def metrics_without_timing(out):
  """metrics.csv rows as text, without `seconds` (wall time: the only column
  two runs of the same command may differ in)."""
  with open(os.path.join(out, "metrics.csv")) as f:
    rows = list(csv.DictReader(f))
  for row in rows:
    del row["seconds"]
  return rows


def lone_canary_floor(rd):
  """Per inserted canary of the run directory `rd` (in id order), the max
  over its rounds of 1 / sqrt(k), k the canaries of the round: at noise 0 a
  round's aggregate is its k canaries at equal norms (nearly orthogonal to
  each other) plus the clients' small updates, so an inserted canary's
  cosine with it is just below 1 / sqrt(k) (gaussian canaries: the other
  canaries are not removed, the paper's statistics)."""
  events = rd.load_participation()
  per_round = np.bincount(events[:, 0])
  floor = np.zeros(events[:, 1].max() + 1)
  np.maximum.at(floor, events[:, 1], 1 / np.sqrt(per_round[events[:, 0]]))
  return floor[np.unique(events[:, 1])]
