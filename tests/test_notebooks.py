"""The notebooks run top to bottom (small settings, fresh kernel)."""

import os

import nbformat
from nbclient import NotebookClient

from fake_runs import make_run

NOTEBOOKS = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(
    __file__))), "notebooks")


def _execute(name, monkeypatch, **env):
  for key, value in env.items():
    monkeypatch.setenv(key, str(value))
  notebook = nbformat.read(os.path.join(NOTEBOOKS, name), as_version=4)
  NotebookClient(notebook, timeout=600, kernel_name="python3",
                 resources={"metadata": {"path": NOTEBOOKS}}).execute()
  return "\n".join(out.get("text", "") for cell in notebook.cells
                   if cell.cell_type == "code" for out in cell.get("outputs", []))


def test_gaussian_mechanism_notebook(monkeypatch, tmp_path):
  text = _execute("gaussian_mechanism.ipynb", monkeypatch, NB_DIM=20000,
                  NB_NUM_CANARIES=100, NB_TRIALS=4, NB_TARGETS="1,10",
                  NB_OUTPUT_DIR=tmp_path)
  assert "relative error of the mean-only estimate" in text
  assert (tmp_path / "gaussian_mechanism.png").exists()


def test_analyze_run_notebook(monkeypatch, tmp_path):
  path = make_run(tmp_path / "run", shift=3.0)
  before = sorted(os.listdir(path))
  text = _execute("analyze_run.ipynb", monkeypatch, NB_RUN_DIR=path,
                  NB_DELTA=1e-6)
  assert "epsilon_final (mean-only)" in text and "x analytical" in text
  # Its report (at the notebook's delta) goes beside the run's, not over it.
  assert sorted(os.listdir(path)) == sorted(before + ["notebook_report"])
  assert (tmp_path / "run" / "notebook_report" / "report.md").exists()
