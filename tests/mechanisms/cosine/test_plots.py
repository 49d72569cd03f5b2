"""The report's figures: what can be checked without eyes (TF-free).

Before: epsilons.png used a symlog axis (negative decades, zeros at 0), drew
intervals to inf off the axes, kept its legend inside the data area (over a
marker) and explained only the analytical lines; cosines.png used 40 bins per
group whatever the number of canaries.
"""

import dataclasses
import math

from matplotlib import colors
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.collections import LineCollection
import numpy as np
import pytest

from tff_canary.harness.reporting import report as report_lib
from tff_canary.mechanisms import epsilon_plot
from tff_canary.mechanisms.cosine import plots
from tff_canary.stats import results

from fake_runs import make_run


def _with_infinities(report):
  """`report` with an interval reaching inf, an infinite estimate, a bound far
  below the scale's range and an infinite analytical epsilon."""
  e = report.estimates
  inf = math.inf
  estimates = dataclasses.replace(
      e, final_fitted=dataclasses.replace(
          e.final_fitted, interval=results.ConfidenceInterval(0.3, inf)),
      all_iterates=dataclasses.replace(
          e.all_iterates, epsilon=inf,
          interval=results.ConfidenceInterval(20.0, inf)),
      lo_final=dataclasses.replace(e.lo_final, epsilon=3e-9))
  claim = dataclasses.replace(report.analytical_claim, epsilons={
      **report.analytical, "2 participations": inf})
  return dataclasses.replace(report, section=dataclasses.replace(
      report.section, estimates=estimates, analytical_claim=claim))


@pytest.fixture(scope="module")
def reports(tmp_path_factory):
  root = tmp_path_factory.mktemp("runs")
  build = lambda name, **kw: report_lib.build_report(make_run(root / name,
                                                              **kw))
  zero = build("zero", shift=0.0, rng_seed=3)
  # The fixture must hold what the tests are named for.
  assert zero.estimates.lo_final.epsilon == 0
  assert zero.estimates.final_mean_only.interval.low == 0
  flagged = build("flagged", shift=4.0)
  assert flagged.above_analytical_bound()
  return dict(zero=zero, flagged=flagged,
              infinities=_with_infinities(build("weak", shift=0.5, n=80)))


def _drawn(report):
  fig = epsilon_plot.figure(report)
  FigureCanvasAgg(fig).draw()
  return fig, fig.axes[0]


def _marker_lines(ax):
  return [line for line in ax.lines if line.get_marker() not in (None, "None",
                                                                 "", " ")]


@pytest.mark.parametrize("case", ["zero", "flagged", "infinities"])
def test_epsilon_axis_is_positive_log_and_holds_every_point(reports, case):
  _, ax = _drawn(reports[case])
  low, high = ax.get_xlim()
  assert ax.get_xscale() == "log" and 0 < low < high
  xs = [x for line in _marker_lines(ax) for x in line.get_xdata()]
  xs += [x for c in ax.collections if isinstance(c, LineCollection)
         for segment in c.get_segments() for x in segment[:, 0]]
  xs += [text.xy[0] for text in ax.texts]
  xs += [line.get_xdata()[0] for line in ax.lines if line not in
         _marker_lines(ax)]  # the analytical lines
  assert xs and all(low < x < high for x in xs), (low, high, xs)
  ylow, yhigh = sorted(ax.get_ylim())
  assert all(ylow < y < yhigh for line in _marker_lines(ax)
             for y in line.get_ydata())
  # The x tick labels are all on the axis, none negative.
  assert not any(t.get_text().startswith(("-", "−"))
                 for t in ax.get_xticklabels())


def test_zeros_and_infinities_are_labelled_at_the_edges(reports):
  _, ax = _drawn(reports["infinities"])
  low, high = ax.get_xlim()
  rows = reports["infinities"].estimates.rows()
  labels = {(text.get_text(), text.xy[1]): text.xy[0] for text in ax.texts}
  names = [name for name, _, _ in rows]
  lo_row = names.index("final model: epsilon_lo (exact null)")
  all_row = names.index("all iterates: epsilon_all")
  left = labels[("3e-09", lo_row)]
  right = labels[("∞", all_row)]
  # Edge slots: beyond every on-scale value, inside the limits.
  on_scale = [r.epsilon for _, _, r in rows if 1e-6 < r.epsilon < math.inf]
  assert low < left < min(on_scale) and max(on_scale) < right < high
  ticks = dict(zip([t.get_text() for t in ax.get_xticklabels()],
                   ax.get_xticks()))
  assert ticks["∞"] == pytest.approx(right)
  assert ticks[next(t for t in ticks if t.startswith("<"))] == pytest.approx(
      left)
  _, ax = _drawn(reports["zero"])
  zeros = [y for y, (_, _, r) in enumerate(reports["zero"].estimates.rows())
           if r.epsilon == 0]
  assert zeros and {y for (text, y) in ((t.get_text(), t.xy[1])
                                        for t in ax.texts)
                    if text == "0"} == set(zeros)
  assert "0" in [t.get_text() for t in ax.get_xticklabels()]


def test_cut_intervals_end_in_an_arrow_inside_the_axes(reports):
  fig, ax = _drawn(reports["infinities"])
  low, high = ax.get_xlim()
  arrows = [line for line in _marker_lines(ax)
            if line.get_marker() in ("<", ">")
            and colors.same_color(line.get_color(), "C1")]
  # The fitted-variance interval (0.3, inf) and epsilon_all's (20, inf) are
  # cut at the right; the zero run's intervals reaching 0 at the left.
  rows = [name for name, _, _ in reports["infinities"].estimates.rows()]
  right_cut = {rows.index("final model: epsilon_final (fitted variance)"),
               rows.index("all iterates: epsilon_all")}
  assert {line.get_ydata()[0] for line in arrows
          if line.get_marker() == ">"} == right_cut
  assert all(low < line.get_xdata()[0] < high for line in arrows)
  _, ax = _drawn(reports["zero"])
  left = [line for line in _marker_lines(ax) if line.get_marker() == "<"]
  cut = {y for y, (_, kind, r) in enumerate(reports["zero"].estimates.rows())
         if kind == "estimate" and r.interval.low == 0}
  assert cut and {line.get_ydata()[0] for line in left} == cut


@pytest.mark.parametrize("case", ["zero", "flagged", "infinities"])
def test_epsilon_legend_is_outside_and_explains_every_marker(reports, case):
  fig, ax = _drawn(reports[case])
  legends = fig.legends + [ax.get_legend()] * (ax.get_legend() is not None)
  assert len(legends) == 1
  legend = legends[0]
  renderer = fig.canvas.get_renderer()
  assert not legend.get_window_extent(renderer).overlaps(
      ax.get_window_extent(renderer))
  handles = [h for h in legend.legend_handles if hasattr(h, "get_marker")]

  def same(a, b):
    return (a.get_marker() == b.get_marker() and
            colors.same_color(a.get_markerfacecolor(), b.get_markerfacecolor())
            and colors.same_color(a.get_markeredgecolor(),
                                  b.get_markeredgecolor()))

  unexplained = [(line.get_marker(), line.get_markerfacecolor())
                 for line in _marker_lines(ax)
                 if not any(same(line, h) for h in handles)]
  assert not unexplained
  texts = [t.get_text() for t in legend.get_texts()]
  for name, value in reports[case].analytical.items():
    assert any(name in t for t in texts), (name, texts)
  if ax.texts:  # values written at the edges: the band is explained
    assert any("off the log scale" in t for t in texts)


def test_flagged_epsilons_are_ringed_and_named_in_red(reports):
  r = reports["flagged"]
  _, ax = _drawn(r)
  flagged = {item["name"] for item in r.above_analytical_bound()}
  rows = [name for name, _, _ in r.estimates.rows()]
  rings = {line.get_ydata()[0] for line in _marker_lines(ax)
           if line.get_marker() == "o"
           and line.get_markerfacecolor() == "none"}
  assert rings == {rows.index(name) for name in flagged}
  red = {t.get_text() for t in ax.get_yticklabels()
         if colors.same_color(t.get_color(), "red")}
  assert red == flagged


@pytest.mark.parametrize("seed", range(5))
def test_bin_count_grows_with_the_number_of_canaries(seed):
  rng = np.random.default_rng(seed)
  counts = {n: plots.bin_count(rng.standard_normal(n))
            for n in (10, 40, 200, 2000, 100_000)}
  # Freedman–Diaconis for normal data: about range / (2.7 n^(-1/3)) bins
  # (range ~ 2 sqrt(2 ln n)), capped by the sqrt rule and MAX_BINS. The
  # ranges allow for the spread of five seeds. Old code: 40 for every n.
  assert counts[10] == plots.MIN_BINS
  assert plots.MIN_BINS <= counts[40] <= 7  # sqrt rule: ceil(sqrt(40)) = 7
  assert counts[40] < counts[200] < counts[2000]
  assert 25 <= counts[2000] <= 45
  assert counts[100_000] == plots.MAX_BINS


def test_bin_count_edge_cases():
  assert plots.bin_count([3.0, 3.0, 3.0]) == 1
  assert plots.bin_count([0.0, 1.0]) == 2  # never more bins than values
  # IQR 0 but a spread: the sqrt rule.
  assert plots.bin_count([0.0] * 30 + [1.0, 2.0]) == 6
  assert plots.bin_count([0.0, np.nan, 1.0, np.inf]) == 2  # finite ones only


@pytest.mark.parametrize("n", [20, 80, 4000])
def test_cosine_histograms_use_the_bin_count(tmp_path, n):
  table = report_lib.build_report(make_run(tmp_path / "run", n=n)).table
  fig = plots.cosines_figure(table)
  ax = fig.axes[0]
  bars = {group: container for group, container in
          zip(("inserted", "held_out"), ax.containers)}
  widths = set()
  for group, container in bars.items():
    values = table.final_cosines(group)
    filled = [p for p in container.patches if p.get_height() > 0]
    # Shared bins at least ptp / bin_count wide, not aligned with this
    # group's minimum: its values straddle at most bin_count + 1 of them (the
    # old 40 bins per group filled ~15 of them with 10 values).
    assert len(filled) <= plots.bin_count(values) + 1
    assert len(filled) >= min(3, values.size)
    widths |= {round(p.get_width(), 9) for p in container.patches}
  assert len(widths) == 1
  FigureCanvasAgg(fig).draw()
  renderer = fig.canvas.get_renderer()
  assert not fig.legends[0].get_window_extent(renderer).overlaps(
      ax.get_window_extent(renderer))


def test_write_report_plots_writes_pngs(reports, tmp_path):
  paths = plots.write_report_plots(reports["infinities"], tmp_path)
  assert [p.rsplit("/", 1)[1] for p in paths] == [
      "cosines.png", "max_cosine_by_round.png", "epsilons.png"]
  for path in paths:
    with open(path, "rb") as f:
      assert f.read(8) == b"\x89PNG\r\n\x1a\n"
