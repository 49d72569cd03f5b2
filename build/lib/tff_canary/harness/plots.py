"""The report's figures, as PNG (matplotlib, Agg backend; no TensorFlow).

  * cosines.png: the final-model cosines of inserted and held-out canaries
    (histograms and kernel density estimates) against the exact null law of
    METHOD §5, in units of the null's standard deviation (the paper's Figure 1
    view);
  * max_cosine_by_round.png: each canary's max cosine over rounds against the
    round where it peaks (all-iterates statistic);
  * epsilons.png: every epsilon of the report (estimates with their intervals,
    bounds) against the analytical epsilons.
"""

from __future__ import annotations

import os
from typing import Any

import matplotlib

matplotlib.use("Agg")
from matplotlib import pyplot as plt  # pylint: disable=g-import-not-at-top
import numpy as np
from scipy import stats

from tff_canary.stats import atomic_files
from tff_canary.stats.cosine_table import CosineTable
from tff_canary.stats.null_law import CosineNull

_COLORS = {"inserted": "C3", "held_out": "C0"}


def _save(fig, path: str) -> str:
  with atomic_files.replacing(path, suffix=".png") as temp:
    fig.savefig(temp, dpi=110, format="png")
  plt.close(fig)
  return path


def cosine_histograms(table: CosineTable, path: str) -> str:
  """Final cosines of both groups and the exact null density (Figure 1 view)."""
  scale = np.sqrt(table.dim)
  fig, ax = plt.subplots(figsize=(6.4, 3.8))
  values = {g: table.final_cosines(g) * scale for g in ("inserted", "held_out")}
  low = min(v.min() for v in values.values()) - 1
  high = max(v.max() for v in values.values()) + 1
  grid = np.linspace(low, high, 400)
  for group, v in values.items():
    ax.hist(v, bins=40, density=True, alpha=0.3, color=_COLORS[group])
    if v.size > 1 and np.ptp(v) > 0:
      ax.plot(grid, stats.gaussian_kde(v)(grid), color=_COLORS[group],
              label=f"{group} ({v.size}; mean {v.mean():.2f})")
  null = CosineNull(table.dim)
  ax.plot(grid, null.pdf(grid / scale) / scale, "k--", lw=1,
          label="null law (exact)")
  ax.set_xlabel("cos(c, θ₀ − θ_T) × √d")
  ax.set_ylabel("density")
  ax.set_title(f"Final-model canary cosines (d = {table.dim:,})", fontsize=10)
  ax.legend(fontsize=8)
  fig.tight_layout()
  return _save(fig, path)


def max_cosine_by_round(table: CosineTable, path: str) -> str:
  """Max cosine over rounds against the round of the max, per group."""
  fig, ax = plt.subplots(figsize=(6.4, 3.8))
  if table.has_max_cosines:
    scale = np.sqrt(table.dim)
    for group in ("held_out", "inserted"):
      mask = table.mask(group)
      ax.scatter(table.max_round[mask], table.max_cosine[mask] * scale, s=6,
                 alpha=0.5, color=_COLORS[group], label=group)
    ax.set_xlabel("round of the max")
    ax.set_ylabel("max cosine × √d")
    ax.legend(fontsize=8)
  else:
    ax.text(0.5, 0.5, "no noised aggregates were recorded", ha="center",
            transform=ax.transAxes)
  ax.set_title("All-iterates statistic: max over rounds", fontsize=10)
  fig.tight_layout()
  return _save(fig, path)


def epsilons(report: Any, path: str) -> str:
  """Every epsilon of a `report.RunReport` against the analytical ones."""
  rows = [(name, kind, result) for name, kind, result in
          report.estimates.rows()]
  fig, ax = plt.subplots(figsize=(7.0, 0.45 * len(rows) + 1.6))
  finite = []
  for y, (name, kind, result) in enumerate(rows):
    eps = result.epsilon
    if kind == "estimate":
      lo, hi = result.interval
      ax.errorbar([eps], [y], xerr=[[eps - lo], [max(hi - eps, 0)]], fmt="o",
                  color="C1", capsize=3)
      finite += [v for v in (lo, hi) if np.isfinite(v)]
    else:
      ax.plot([eps], [y], ">" if kind == "bound" else "4", color="C2", ms=8)
    if np.isfinite(eps):
      finite.append(eps)
  for i, (name, value) in enumerate(report.analytical.items()):
    ax.axvline(value, color="k", ls=("--", ":", "-.")[i % 3], lw=1,
               label=f"analytical, {name}: {value:.3g}")
    finite.append(value)
  ax.set_yticks(range(len(rows)), [name for name, _, _ in rows], fontsize=8)
  ax.invert_yaxis()  # first row on top
  positive = [v for v in finite if v > 0]
  if positive and max(positive) / max(min(positive), 1e-3) > 50:
    ax.set_xscale("symlog", linthresh=0.1)
  ax.set_xlabel("epsilon (● estimate with interval, ▶ bound)")
  ax.legend(fontsize=7, loc="lower right")
  ax.set_title(f"Every epsilon at δ = {report.delta:g}", fontsize=10)
  fig.tight_layout()
  return _save(fig, path)


def write_report_plots(report: Any, table: CosineTable,
                       directory: str) -> list[str]:
  os.makedirs(directory, exist_ok=True)
  return [cosine_histograms(table, os.path.join(directory, "cosines.png")),
          max_cosine_by_round(table, os.path.join(directory,
                                                  "max_cosine_by_round.png")),
          epsilons(report, os.path.join(directory, "epsilons.png"))]
