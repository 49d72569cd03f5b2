"""The sweep script, end to end on tiny settings (2 runs)."""

import csv
import math
import os
import subprocess
import sys

import pytest
import repo_paths

pytestmark = [pytest.mark.tff, pytest.mark.slow]

REPO = str(repo_paths.REPO)


def test_sweep_writes_one_csv_and_one_figure(tmp_path):
  # The script's --smoke (noise 0 and 0.1, 2 presentations, 2 rounds of 4
  # clients): tests/project/test_smoke.py counts on this test to run it.
  out = tmp_path / "sweep"
  args = [sys.executable, os.path.join(REPO, "experiments", "sweep.py"),
          "--smoke", f"--output_dir={out}"]
  proc = subprocess.run(args, capture_output=True, text=True, timeout=900)
  assert proc.returncode == 0, proc.stderr[-3000:]
  assert proc.stdout.splitlines()[-1] == (f"wrote {out / 'sweep.csv'} and "
                                          f"{out / 'sweep.png'}")
  rows = list(csv.DictReader(open(out / "sweep.csv")))
  assert [(float(r["noise_multiplier"]), int(r["presentations"]))
          for r in rows] == [(0.0, 2), (0.1, 2)]
  assert open(out / "sweep.png", "rb").read(8) == b"\x89PNG\r\n\x1a\n"
  by = {(float(r["noise_multiplier"]), int(r["presentations"])): r for r in rows}
  # Noise 0 has no privacy; with noise, two presentations compose two
  # Gaussians, so their analytical epsilon is larger than one's (each row
  # has both columns).
  assert math.isinf(float(by[(0.0, 2)]["analytical_epsilon"]))
  assert math.isinf(float(by[(0.0, 2)]["analytical_epsilon_presentations"]))
  assert (float(by[(0.1, 2)]["analytical_epsilon_presentations"])
          > float(by[(0.1, 2)]["analytical_epsilon"]) > 0)
  for r in rows:
    assert float(r["epsilon_final"]) >= 0 and r["epsilon_all"] != ""
  # Quiet like the other experiment scripts: no absl/TensorFlow INFO lines
  # (each checkpoint save used to print three) between the sweep's own lines.
  info = [line for line in proc.stderr.splitlines()
          if line.startswith(("I1", "I0", "INFO:"))]
  assert not info, info[:3]
  # Re-running reads the finished runs back instead of training again.
  again = subprocess.run(args, capture_output=True, text=True, timeout=300)
  assert again.returncode == 0 and "training" not in again.stdout
  assert list(csv.DictReader(open(out / "sweep.csv"))) == rows


def test_the_left_panel_compares_like_with_like(monkeypatch):
  # With 2 presentations as the fewest, the analytical bar is the epsilon of
  # 2 presentations (the estimates' own), not of one; an infinite epsilon
  # (noise 0) is a mark, not a missing bar; 0 is drawn at the 1e-3 floor.
  monkeypatch.syspath_prepend(os.path.join(REPO, "experiments"))
  import sweep  # pylint: disable=g-import-not-at-top
  from matplotlib import pyplot as plt  # pylint: disable=g-import-not-at-top

  def row(noise, one, many):
    return dict(noise_multiplier=noise, presentations=2,
                analytical_epsilon=one, analytical_epsilon_presentations=many,
                epsilon_all=5.0, epsilon_lo_all=0.0, epsilon_final=3.0,
                epsilon_lo_final=1.0)
  fig = sweep.figure([row(0.0, math.inf, math.inf), row(0.1, 60.0, 117.0)])
  left = fig.axes[0]
  heights = sorted(round(p.get_height(), 6) for p in left.patches)
  assert heights == [1e-3, 1e-3, 1.0, 1.0, 3.0, 3.0, 5.0, 5.0, 117.0], heights
  assert [t.get_text() for t in left.texts] == ["∞"]
  assert left.get_title() == "Table 3's view (2 presentations)"
  plt.close(fig)
