"""The report's figures, as PNG (matplotlib; no TensorFlow, no pyplot).

  * cosines.png: the final-model cosines of inserted and held-out canaries
    (histograms and kernel density estimates) against the exact null law of
    docs/method/null-law.md, in units of the null's standard deviation (the
    paper's Figure 1 view), in bins shared by both groups (`bin_count`);
  * max_cosine_by_round.png: each canary's max cosine over rounds against the
    round where it peaks (all-iterates statistic);
  * epsilons.png: every epsilon of the report (estimates with their intervals,
    bounds) against the analytical epsilons (`epsilon_plot`).

Each figure has its legend outside the axes (constrained layout). The
`*_figure` functions return the matplotlib `Figure` (for tests and notebooks);
`write_report_plots` writes the PNGs.
"""

from __future__ import annotations

import math
import os
from typing import Any

from matplotlib.figure import Figure
import numpy as np
from scipy import stats

from tff_canary.mechanisms import epsilon_plot
from tff_canary.stats import atomic_files
from tff_canary.stats.canaries.cosine_table import CosineTable
from tff_canary.stats.estimators.null_law import CosineNull

_COLORS = {"inserted": "C3", "held_out": "C0"}
# Group names in words, for legends.
_WORDS = {"inserted": "inserted", "held_out": "held out"}
MIN_BINS, MAX_BINS = 5, 50
# Bins over the two groups' pooled range at most (groups far apart).
_MAX_EDGES = 1000
_LEGEND = dict(loc="outside right upper", fontsize=7)


def save(fig, path: str) -> str:
  """Writes `fig` to `path` as PNG, atomically."""
  with atomic_files.replacing(path, suffix=".png") as temp:
    fig.savefig(temp, dpi=110, format="png", bbox_inches="tight")
  return path


def bin_count(values) -> int:
  """Histogram bins for one group's values: Freedman–Diaconis, clipped.

  ceil(range / (2 IQR n^(-1/3))) bins (the sqrt rule's ceil(sqrt(n)) when
  the IQR is 0), at least MIN_BINS and at most the sqrt rule's count or
  MAX_BINS, never more than n; 1 for fewer than 2 distinct values. For normal
  values: 5 bins for 10 of them, 5-7 for 40, about 33 for 2000.
  """
  v = np.asarray(values, float)
  v = v[np.isfinite(v)]
  if v.size < 2 or np.ptp(v) == 0:
    return 1
  sqrt_rule = math.ceil(math.sqrt(v.size))
  q75, q25 = np.percentile(v, [75, 25])
  if q75 > q25:
    count = math.ceil(np.ptp(v) / (2 * (q75 - q25) * v.size ** (-1 / 3)))
  else:
    count = sqrt_rule
  upper = min(MAX_BINS, max(MIN_BINS, sqrt_rule))
  return int(min(max(count, MIN_BINS), upper, v.size))


def shared_bin_edges(groups) -> np.ndarray:
  """Bin edges over all groups, as wide as the coarsest group's bins."""
  groups = [np.asarray(g, float)[np.isfinite(g)] for g in groups]
  pooled = np.concatenate(groups)
  low, high = pooled.min(), pooled.max()
  widths = [np.ptp(g) / bin_count(g) for g in groups if g.size]
  width = max(max(widths), (high - low) / _MAX_EDGES)
  if width == 0:
    return np.array([low - 0.5, high + 0.5])
  return low + width * np.arange(math.ceil((high - low) / width) + 1)


def cosines_figure(table: CosineTable):
  """Final cosines of both groups and the exact null density (Figure 1 view)."""
  scale = np.sqrt(table.dim)
  fig = Figure(figsize=(8.0, 3.8), layout="constrained")
  ax = fig.add_subplot()
  values = {g: table.final_cosines(g) * scale for g in ("inserted", "held_out")}
  edges = shared_bin_edges(list(values.values()))
  grid = np.linspace(edges[0] - 1, edges[-1] + 1, 400)
  for group, v in values.items():
    ax.hist(v, bins=edges, density=True, alpha=0.3, color=_COLORS[group],
            label=f"{_WORDS[group]} ({v.size}; mean {v.mean():.2f})")
    if v.size > 1 and np.ptp(v) > 0:
      ax.plot(grid, stats.gaussian_kde(v)(grid), color=_COLORS[group],
              label=f"{_WORDS[group]}: kernel density")
  null = CosineNull(table.dim)
  ax.plot(grid, null.pdf(grid / scale) / scale, "k--", lw=1,
          label="null law (exact)")
  ax.set_xlabel("cos(c, θ₀ − θ_T) × √d")
  ax.set_ylabel("density")
  ax.set_title(f"Final-model canary cosines (d = {table.dim:,})", fontsize=10)
  fig.legend(**_LEGEND)
  return fig


def max_cosine_figure(table: CosineTable):
  """Max cosine over rounds against the round of the max, per group."""
  fig = Figure(figsize=(7.2, 3.8), layout="constrained")
  ax = fig.add_subplot()
  if table.has_max_cosines:
    scale = np.sqrt(table.dim)
    for group in ("held_out", "inserted"):
      mask = table.mask(group)
      ax.scatter(table.max_round[mask], table.max_cosine[mask] * scale, s=6,
                 alpha=0.5, color=_COLORS[group], label=_WORDS[group])
    # The null's reference: where the max of R null cosines (× √d, in the
    # null's Gaussian limit N(0, 1)) lies with 95% probability.
    rounds = max(1, int(table.rounds_recorded))
    ax.axhline(stats.norm.ppf(0.95 ** (1.0 / rounds)), color="k", ls="--",
               lw=1, label=f"null: 95% of the max of {rounds} null cosines "
               "lies below")
    ax.set_xlabel("round of the max")
    ax.set_ylabel("max cosine × √d")
    fig.legend(**_LEGEND)
  else:
    ax.text(0.5, 0.5, "no noised aggregates were recorded", ha="center",
            transform=ax.transAxes)
  ax.set_title("All-iterates statistic: max over rounds", fontsize=10)
  return fig


def write_report_plots(report: Any, directory: str) -> list[str]:
  """Writes the figures of `report` (its `table`) into `directory`."""
  os.makedirs(directory, exist_ok=True)
  figures = {"cosines.png": cosines_figure(report.table),
             "max_cosine_by_round.png": max_cosine_figure(report.table),
             "epsilons.png": epsilon_plot.figure(report)}
  return [save(fig, os.path.join(directory, name))
          for name, fig in figures.items()]
