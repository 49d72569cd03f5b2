"""The report's epsilons.png: every epsilon against the analytical ones.

One row per estimate or bound of the report (its table's order), on a
positive log axis (`LogScale`). Values the log axis cannot show sit in grey
bands at its edges, drawn with their own marker and their value written
beside it: 0 (and anything below 1e-6 of the largest value) at the left, inf
at the right. An interval that reaches 0 or inf is cut at its band with an
arrow. The legend, outside the axes, explains every marker drawn: estimate
with its interval, valid and nominal bound, each kind of cut, the bands, the
flag ring of an epsilon above the analytical bound, each analytical line.

The figure is built with matplotlib's object API (no pyplot state).
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, Iterable, Optional

from matplotlib import ticker
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.patches import Patch

from tff_canary.stats import results

# Smallest value kept on the scale, relative to the largest.
_DYNAMIC_RANGE = 1e-6
# Log-axis geometry (factors): a data point at `low` and an edge slot at
# low / _SLOT, inside a band from low / _PAD to low / _BAND (mirrored at the
# right edge).
_BAND, _SLOT, _PAD = 1.6, 2.5, 4.0
_BAND_COLOR = "0.9"
_ANALYTICAL_STYLES = ("--", ":", "-.")
_FLAG_COLOR = "red"
_INTERVAL_COLOR = "C1"
_STYLES = {
    "estimate": dict(marker="o", color="C1", markerfacecolor="C1",
                     markeredgecolor="C1", markersize=6),
    "bound": dict(marker=">", color="C2", markerfacecolor="C2",
                  markeredgecolor="C2", markersize=8),
    "nominal bound": dict(marker=">", color="C2", markerfacecolor="white",
                          markeredgecolor="C2", markersize=8),
}
_FLAG = dict(marker="o", markerfacecolor="none", markeredgecolor=_FLAG_COLOR,
             markersize=14, markeredgewidth=1.2)
_CUT = {"low": dict(marker="<", color=_INTERVAL_COLOR, markersize=6),
        "high": dict(marker=">", color=_INTERVAL_COLOR, markersize=6)}


@dataclasses.dataclass(frozen=True)
class LogScale:
  """x positions on a positive log axis, with slots for 0 and inf.

  `low` and `high` are the smallest and largest values shown on the scale;
  anything at or below 0, or below `low`, goes to the left slot, inf to the
  right one. `limits` leave room for a slot only on a side that is used.
  """

  low: float
  high: float
  left_used: bool = False
  right_used: bool = False
  left_label: str = "0"  # "< low" when a positive value is below `low`

  @classmethod
  def fit(cls, values: Iterable[float]) -> "LogScale":
    values = [float(v) for v in values if not math.isnan(v)]
    shown = [v for v in values if 0 < v < math.inf]
    if shown:
      high = max(shown)
      low = max(min(shown), high * _DYNAMIC_RANGE)
    else:
      low, high = 0.1, 10.0
    below = [v for v in values if v < low]
    return cls(low, high, left_used=bool(below),
               right_used=any(v == math.inf for v in values),
               left_label=("0" if all(v <= 0 for v in below) else
                           f"< {_tick_label(low)}"))

  @property
  def left_slot(self) -> float:
    return self.low / _SLOT

  @property
  def right_slot(self) -> float:
    return self.high * _SLOT

  @property
  def limits(self) -> tuple[float, float]:
    return (self.low / (_PAD if self.left_used else _BAND),
            self.high * (_PAD if self.right_used else _BAND))

  def place(self, value: float) -> tuple[float, str]:
    """(x, label): label is "" on the scale, else the value ("0", "∞")."""
    if self.low <= value <= self.high:
      return value, ""
    x = self.left_slot if value < self.low else self.right_slot
    return x, _number(value)

  def ticks(self) -> tuple[list[float], list[str]]:
    """Tick positions and labels: the scale's round numbers, `left_label`
    at the left slot and "∞" at the right one when used (none in a band)."""
    low, high = self.low / _BAND, self.high * _BAND
    ticks = []
    for subs in ((1.0,), (1.0, 2.0, 5.0), (1.0, 1.5, 2.0, 3.0, 5.0, 7.0)):
      locator = ticker.LogLocator(subs=subs, numticks=9)
      ticks = [t for t in locator.tick_values(low, high)
               if low <= t <= high]
      if len(ticks) >= 3:
        break
    labels = [_tick_label(t) for t in ticks]
    if self.left_used:
      ticks, labels = [self.left_slot] + ticks, [self.left_label] + labels
    if self.right_used:
      ticks, labels = ticks + [self.right_slot], labels + ["∞"]
    return ticks, labels

  def draw_axis(self, ax) -> None:
    """Log x axis with `limits`, `ticks` and grey bands for the slots."""
    ax.set_xscale("log")
    ax.set_xlim(*self.limits)
    ticks, labels = self.ticks()
    ax.xaxis.set_major_locator(ticker.FixedLocator(ticks))
    ax.xaxis.set_major_formatter(ticker.FixedFormatter(labels))
    ax.xaxis.set_minor_locator(ticker.NullLocator())
    left, right = self.limits
    if self.left_used:
      ax.axvspan(left, self.low / _BAND, color=_BAND_COLOR, zorder=0, lw=0)
    if self.right_used:
      ax.axvspan(self.high * _BAND, right, color=_BAND_COLOR, zorder=0, lw=0)


def _tick_label(value: float) -> str:
  """0.01, 0.5, 10, 5000, 1e5, 2e-4: plain between 1e-3 and 1e4."""
  exponent = math.floor(math.log10(value) + 1e-9)
  mantissa = float(f"{value / 10.0 ** exponent:.3g}")
  if mantissa >= 10:
    mantissa, exponent = mantissa / 10, exponent + 1
  if -3 <= exponent < 4:
    text = f"{mantissa * 10.0 ** exponent:.{max(0, 2 - exponent)}f}"
    return text.rstrip("0").rstrip(".") if "." in text else text
  return f"{mantissa:g}e{exponent}"


def _number(value: float) -> str:
  return "∞" if value == math.inf else results.format_number(value)


def _values(rows, lines: dict[str, float]) -> list[float]:
  out = list(lines.values())
  for _, kind, result in rows:
    out.append(result.epsilon)
    if kind == "estimate":
      out += list(result.interval)
  return out


def _interval(ax, scale: LogScale, y: float, interval) -> set[str]:
  """Draws one interval; returns the ends cut at the edges ("low"/"high")."""
  low, high = interval
  ends = {"low": (low, low >= scale.low, scale.left_slot),
          "high": (high, high <= scale.high, scale.right_slot)}
  xs, cut = {}, set()
  for end, (value, shown, slot) in ends.items():
    xs[end] = value if shown else slot
    if shown:
      ax.vlines(value, y - 0.15, y + 0.15, color=_INTERVAL_COLOR, lw=1.3)
    else:
      ax.plot([slot], [y], ls="none", **_CUT[end])
      cut.add(end)
  ax.hlines(y, xs["low"], xs["high"], color=_INTERVAL_COLOR, lw=1.3)
  return cut


def _legend_handles(confidence: float, bound_confidence: float,
                    kinds: set[str], cut: set[str], off_scale: bool,
                    flagged: bool, scale: LogScale) -> list[Any]:
  level = results.format_confidence(confidence)
  labels = {
      "estimate": f"point estimate with its {level} CI (not a bound)",
      "bound": ("lower bound, holds with "
                f"{results.format_confidence(bound_confidence)} confidence"),
      "nominal bound": f"paper's lower bound ({level} nominal only)",
  }
  handles = [Line2D([], [], ls="-" if kind == "estimate" else "none",
                    label=labels[kind], **_STYLES[kind])
             for kind in _STYLES if kind in kinds]
  handles += [Line2D([], [], ls="-", label=f"interval reaches {at} (cut)",
                     **_CUT[end])
              for end, at in (("low", "0"), ("high", "∞")) if end in cut]
  if off_scale:
    sides = [side for side, used in ((f"{scale.left_label} at the left",
                                      scale.left_used),
                                     ("∞ at the right", scale.right_used))
             if used]
    handles.append(Patch(color=_BAND_COLOR, label=(
        f"off the log scale: {' and '.join(sides)} (value by the marker)")))
  if flagged:
    handles.append(Line2D([], [], ls="none", label="above the analytical "
                          "bound (flagged)", **_FLAG))
  return handles


def figure(report: Any) -> Figure:
  """The epsilons figure of a cosine table's `report.RunReport` (module
  docstring): its `estimates`, `analytical`, `confidence`, `delta_line()`
  and `above_analytical_bound()`."""
  return draw(report.estimates.rows(),
              {f"analytical ε, {name}": value
               for name, value in report.analytical.items()},
              confidence=report.confidence,
              title=f"Every epsilon at {report.delta_line()}",
              flagged={item["name"]
                       for item in report.above_analytical_bound()})


def draw(rows: list[tuple[str, str, Any]], lines: dict[str, float], *,
         confidence: float, title: str, flagged: Iterable[str] = (),
         bound_confidence: Optional[float] = None) -> Figure:
  """The epsilons figure (module docstring) of `rows`, (name, kind,
  result) with kind "estimate", "bound" or "nominal bound" and the
  result's `epsilon` (an estimate's `interval` too), against the vertical
  `lines` (legend label -> epsilon: the analytical epsilons), at
  `confidence` (the bounds' own, `bound_confidence`, when it differs: an
  audit's Bonferroni share); the names in `flagged` are ringed as above
  the analytical bound."""
  flagged = set(flagged)
  scale = LogScale.fit(_values(rows, lines))
  fig = Figure(figsize=(8.0, 0.4 * len(rows) + 3.0), layout="constrained")
  ax = fig.add_subplot()
  scale.draw_axis(ax)
  cut, kinds, off_scale = set(), set(), False
  for y, (name, kind, result) in enumerate(rows):
    kinds.add(kind)
    if kind == "estimate":
      cut |= _interval(ax, scale, y, result.interval)
    x, label = scale.place(result.epsilon)
    ax.plot([x], [y], ls="none", zorder=3, **_STYLES[kind])
    if label:
      off_scale = True
      ax.annotate(label, (x, y), xytext=(0, 11), textcoords="offset points",
                  ha="center", va="bottom", fontsize=7)
    if name in flagged:
      ax.plot([x], [y], ls="none", zorder=4, **_FLAG)
  for i, (name, value) in enumerate(lines.items()):
    x, label = scale.place(value)
    off_scale |= bool(label)
    ax.axvline(x, color="k", lw=1, ls=_ANALYTICAL_STYLES[i % 3],
               label=f"{name}: {_number(value)}")
  ax.set_yticks(range(len(rows)), [name for name, _, _ in rows], fontsize=8)
  for tick, (name, _, _) in zip(ax.get_yticklabels(), rows):
    if name in flagged:
      tick.set_color(_FLAG_COLOR)
  ax.set_ylim(len(rows) - 0.4, -0.8)  # first row on top, room for labels
  handles = _legend_handles(
      confidence, confidence if bound_confidence is None else
      bound_confidence, kinds, cut, off_scale, bool(flagged), scale)
  fig.legend(handles=handles + ax.get_legend_handles_labels()[0],
             loc="outside lower center", ncols=2, fontsize=7)
  ax.set_xlabel("epsilon (log scale)")
  ax.set_title(title, fontsize=9)
  return fig

