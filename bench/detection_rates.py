"""How often a bench's planted bug was caught: the rate over seeded trials,
its binomial standard error and one-sided 95% Clopper-Pearson limits
(pipeline_audit.py's and flower_audit.py's columns)."""

from __future__ import annotations

import math

import numpy as np
from scipy import stats


def rate(hits) -> tuple[float, float]:
  """(the fraction of true `hits`, its binomial standard error)."""
  p = float(np.mean(hits))
  return p, math.sqrt(p * (1 - p) / len(hits))


def limits(hits) -> tuple[float, float]:
  """One-sided 95% Clopper-Pearson lower and upper limits on the rate."""
  k, n = int(np.sum(hits)), len(hits)
  lo = 0.0 if k == 0 else float(stats.beta.ppf(0.05, k, n - k + 1))
  hi = 1.0 if k == n else float(stats.beta.ppf(0.95, k + 1, n - k))
  return lo, hi
