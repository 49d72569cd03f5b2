"""The notebooks run top to bottom (small settings, fresh kernel) on every
kind of run directory, notebooks/refresh.py executes them in place, and the
committed ones are executed."""

import importlib.util
import os
import re
import shutil
import subprocess
import sys

import nbformat
import numpy as np
import pytest
from nbclient import NotebookClient

import repo_paths
import fake_runs
from tff_canary.harness.recording import run_dir
from tff_canary.harness.reporting import report as report_lib
from tff_canary.mechanisms.cosine import report as cosine_report

REPO = str(repo_paths.REPO)
NOTEBOOKS = os.path.join(REPO, "notebooks")
NAMES = ("analyze_run.ipynb", "gaussian_mechanism.ipynb")
# The Gaussian-mechanism study small: 2 targets of 4 runs, d = 20,000.
SMALL = dict(NB_DIM="20000", NB_NUM_CANARIES="100", NB_TRIALS="4",
             NB_TARGETS="1,10")
# An absolute path of a machine, in an output (a refreshed notebook should
# not depend on where it ran).
MACHINE_PATH = re.compile(r"(?<![\w.])/(home|tmp|work|root|Users|private|var)/")

_spec = importlib.util.spec_from_file_location(
    "notebooks_refresh", os.path.join(NOTEBOOKS, "refresh.py"))
refresh = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(refresh)


def _execute(name, monkeypatch, **env):
  for key, value in env.items():
    monkeypatch.setenv(key, str(value))
  notebook = nbformat.read(os.path.join(NOTEBOOKS, name), as_version=4)
  NotebookClient(notebook, timeout=600, kernel_name="python3",
                 resources={"metadata": {"path": NOTEBOOKS}}).execute()
  return notebook


def _outputs(notebook):
  return [out for cell in notebook.cells if cell.cell_type == "code"
          for out in cell.get("outputs", [])]


def _text(notebook):
  return "\n".join(out.get("text", "") for out in _outputs(notebook))


def _images(notebook):
  return sum("image/png" in out.get("data", {}) for out in _outputs(notebook))


def _check_executed(notebook):
  """Every code cell ran, in order, with an output and no error."""
  cells = [cell for cell in notebook.cells if cell.cell_type == "code"]
  assert [cell.execution_count for cell in cells] == list(
      range(1, len(cells) + 1))
  assert all(cell.outputs for cell in cells)
  assert not [out for out in _outputs(notebook)
              if out.output_type == "error"]
  shown = "\n".join(str(out) for out in _outputs(notebook))
  assert not MACHINE_PATH.search(shown), MACHINE_PATH.search(shown)
  # The outputs are those of these code cells (refresh.py's hash).
  assert notebook.metadata[refresh.METADATA_KEY][refresh.SOURCES_KEY] == (
      refresh.code_hash(notebook))
  stamp = [p for p in notebook.cells[0].source.split("\n\n")
           if p.startswith(refresh.STAMP)]
  assert len(stamp) == 1 and "notebooks/refresh.py" in stamp[0]
  return stamp[0]


def test_analyze_run_notebook(monkeypatch, tmp_path):
  path = fake_runs.make_run(tmp_path / "run", shift=3.0)
  before = sorted(os.listdir(path))
  notebook = _execute("analyze_run.ipynb", monkeypatch, NB_RUN_DIR=path,
                      NB_DELTA=1e-6)
  text = _text(notebook)
  assert "epsilon_final (mean-only)" in text and "x analytical" in text
  assert "final cosines in null standard deviations" in text
  assert _images(notebook) == len(cosine_report.PLOT_FILES)
  # Its report (at the notebook's delta) goes beside the run's, not over it.
  assert sorted(os.listdir(path)) == sorted(before + ["notebook_report"])
  assert (tmp_path / "run" / "notebook_report" / "report.md").exists()


def _line(text, name, width):
  """The estimates cell's line of row `name`, padded to `width` (the
  terminal table's lines have no ratio)."""
  start = f"{name:{width}s} "
  lines = [line for line in text.splitlines()
           if line.startswith(start) and " x analytical" in line]
  assert len(lines) == 1, (start, lines)
  return lines[0]


@pytest.mark.parametrize("aggregator", ["ddp", "tree", "blt"])
def test_analyze_run_notebook_on_every_mechanism(monkeypatch, tmp_path,
                                                 aggregator):
  path = str(tmp_path / "run")
  if aggregator == "ddp":
    fake_runs.make_ddp_run(path, shift=3.0)
  else:
    fake_runs.make_scored_run(path, aggregator)
  notebook = _execute("analyze_run.ipynb", monkeypatch, NB_RUN_DIR=path,
                      NB_DELTA=1e-6, NB_OUT_DIR=tmp_path / "out")
  text = _text(notebook)
  # Every row of the report's table with its value and ratio to the
  # headline's analytical epsilon; the headline's estimates also against
  # their targets (DP-FTRL).
  report = report_lib.build_report(path, delta=1e-6)
  headline = report.headline()
  analytical = headline.analytical_epsilon
  assert (f"analytical ε: {headline.analytical_name} = {analytical:.4g}"
          in text)
  rows = report.rows()
  assert len(rows) > 3
  width = max(len(name) for name, _, _, _ in rows)
  for name, _, value, _ in rows:
    line = _line(text, name, width)
    assert f" {value:.4g} " in line and (
        f" {value / analytical:.3f} x analytical" in line), line
  estimates = [e for e in (headline.epsilon_final, headline.epsilon_all)
               if e is not None and e.target is not None]
  assert len(estimates) == (0 if aggregator == "ddp" else 2)
  for estimate in estimates:
    assert (f", {estimate.value / estimate.target.value:.3f} x its target "
            f"({estimate.target.name})") in _line(text, estimate.name, width)
  assert f"audit: {headline.audit_text}" in text
  # The figures the report draws, whatever they are (DP-FTRL's: none yet).
  drawn = [p for p in report_lib.write_report(
      report, output_dir=tmp_path / "again") if p.endswith(".png")]
  assert _images(notebook) == len(drawn)
  assert (len(drawn) == 0) == ("draws no plots" in text)
  assert (tmp_path / "out" / run_dir.REPORT_JSON).exists()
  rd = run_dir.RunDir(path)
  if aggregator == "ddp":
    assert "final cosines in null standard deviations" in text
    return
  # The scores' statistics, computed here from the run's files: the mean
  # score of a canary in its rounds (1 / z under the claim) and the final
  # model's inserted mean in held-out standard deviations.
  scores = np.load(rd.file(run_dir.TREE_SCORES))
  events = rd.load_participation()
  took_part = np.zeros(scores.shape, dtype=bool)
  took_part[events[:, 0], events[:, 1]] = True
  assert (f"score in a round the canary took part in: mean "
          f"{scores[took_part].mean():.4f} (n={took_part.sum()}; the claim: "
          "1 / z = 1.0000)") in text
  final, inserted = scores.sum(axis=0), took_part.any(axis=0)
  scale = final[~inserted].std(ddof=1)
  assert (f"inserted mean {final[inserted].mean() / scale:.3f}, held-out "
          f"mean {final[~inserted].mean() / scale:.3f} (the claim's mean for "
          f"the inserted, report.json's final_mu: "
          f"{report.targets.final_mu:.3f})") in text
  assert f"{inserted.sum()} took part (the report's inserted: " \
      f"{report.num_inserted})" in text


def _listing(path):
  return sorted((name, os.stat(os.path.join(path, name)).st_mtime_ns)
                for name in os.listdir(path))


def test_refresh_executes_the_notebooks_in_place(tmp_path):
  copy = tmp_path / "notebooks"
  copy.mkdir()
  for name in NAMES:
    shutil.copy(os.path.join(NOTEBOOKS, name), copy / name)
  run = fake_runs.make_run(tmp_path / "run", shift=3.0)
  before, repo_before = sorted(os.listdir(run)), _listing(NOTEBOOKS)
  env = dict(os.environ, NB_DELTA="1e-6", **SMALL)
  proc = subprocess.run(
      [sys.executable, os.path.join(NOTEBOOKS, "refresh.py"),
       "--notebook_dir", str(copy), "--run_dir", str(run),
       "--run_source", "tests/fake_runs.py"],
      env=env, capture_output=True, text=True, timeout=600)
  assert proc.returncode == 0, proc.stderr
  # Nothing written but the notebooks: not in the run directory, not in the
  # repository's notebooks/ (the kernels' working directory).
  assert sorted(os.listdir(run)) == before
  assert _listing(NOTEBOOKS) == repo_before
  assert sorted(os.listdir(copy)) == sorted(NAMES)
  analyze = nbformat.read(copy / "analyze_run.ipynb", as_version=4)
  stamp = _check_executed(analyze)
  assert f"--run_dir {run}" in stamp and "trained by tests/fake_runs.py" in (
      stamp) and "`NB_DELTA=1e-6`" in stamp
  assert "x analytical" in _text(analyze)
  assert _images(analyze) == len(cosine_report.PLOT_FILES)
  gaussian = nbformat.read(copy / "gaussian_mechanism.ipynb", as_version=4)
  stamp = _check_executed(gaussian)
  assert all(f"`{key}={value}`" in stamp for key, value in SMALL.items())
  text = _text(gaussian)
  assert "d = 20000, 100 canaries, 4 runs per target epsilon [1.0, 10.0]" in (
      text)
  assert "relative error of the mean-only estimate" in text
  assert _images(gaussian) == 1
  # No timings recorded: a refresh changes only what the notebook computes.
  assert not any("execution" in cell.metadata for cell in analyze.cells)


def test_refresh_refuses_a_missing_run_directory(tmp_path):
  shutil.copy(os.path.join(NOTEBOOKS, "analyze_run.ipynb"), tmp_path)
  proc = subprocess.run(
      [sys.executable, os.path.join(NOTEBOOKS, "refresh.py"), "--run_dir",
       str(tmp_path / "none"), "--notebook_dir", str(tmp_path)],
      capture_output=True, text=True, timeout=120)
  assert proc.returncode == 2
  assert f"--run_dir must be a finished run directory (with config.json), " \
      f"got '{tmp_path / 'none'}'" in proc.stderr


@pytest.mark.parametrize("name", NAMES)
def test_the_committed_notebooks_are_executed(name):
  notebook = nbformat.read(os.path.join(NOTEBOOKS, name), as_version=4)
  stamp = _check_executed(notebook)
  assert _images(notebook) >= 1
  if name == "analyze_run.ipynb":  # from a real run, not a fake one
    assert "experiments/emnist.py" in stamp
