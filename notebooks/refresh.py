"""Executes the notebooks in place, keeping their outputs and plots.

    .venv/bin/python notebooks/refresh.py [--run_dir runs/emnist]
        [--run_source TEXT] [--notebook_dir DIR] [NOTEBOOK ...]

Each notebook (default: every .ipynb of `--notebook_dir`, by default this
folder) runs top to bottom in a fresh kernel (nbclient) with this folder as
its working directory, and is rewritten only if every cell ran. Cell timings
are not recorded, and the first markdown cell's "**Outputs shown**"
paragraph is rewritten to say what the outputs come from: the run directory
(`--run_dir`, default the README's main job `runs/emnist`, and
`--run_source`, how it was trained) for analyze_run.ipynb, the settings for
gaussian_mechanism.ipynb, and the commit of this checkout. The settings are
the notebooks' own environment variables (NB_DIM, NB_NUM_CANARIES,
NB_TRIALS, NB_TARGETS; NB_DELTA), taken from this command's environment.

Nothing is written but the notebooks: the notebooks' report and figure go
to a temporary directory (NB_OUT_DIR, NB_OUTPUT_DIR), removed afterwards,
and the kernel writes no bytecode. The notebook's metadata records a hash
of its code cells (`SOURCES_KEY`), so tests/project/test_notebooks.py can tell
whether the committed outputs are those of the committed code.
"""

import argparse
import hashlib
import os
import subprocess
import sys
import tempfile

import nbformat
from nbclient import NotebookClient
from nbclient.exceptions import CellExecutionError

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
DEFAULT_RUN_DIR = os.path.join("runs", "emnist")  # the README's main job
MAIN_JOB = ".venv/bin/python experiments/emnist.py --output_dir runs/emnist"
ANALYZE = "analyze_run.ipynb"
STAMP = "**Outputs shown**"
# Each notebook's settings this command passes on from its environment (and
# names in the stamp).
SETTINGS = {ANALYZE: ("NB_DELTA",),
            "gaussian_mechanism.ipynb": ("NB_DIM", "NB_NUM_CANARIES",
                                         "NB_TRIALS", "NB_TARGETS")}
METADATA_KEY = "tff_canary"
SOURCES_KEY = "code_sha256"  # of the code cells the outputs came from
TIMEOUT = 1800  # seconds per cell


def code_hash(notebook) -> str:
  """sha256 of the notebook's code cells, in order."""
  digest = hashlib.sha256()
  for cell in notebook.cells:
    if cell.cell_type == "code":
      digest.update(cell.source.encode("utf-8") + b"\0")
  return digest.hexdigest()


def _commit() -> str:
  """This checkout's commit, and whether code outside notebooks/ differs."""
  def git(*args):
    return subprocess.run(["git", "-C", REPO, *args], capture_output=True,
                          text=True, check=True).stdout.strip()
  try:
    head = git("rev-parse", "--short", "HEAD")
    dirty = git("status", "--porcelain", "--untracked-files=no", "--", ".",
                ":(exclude)notebooks")
  except (OSError, subprocess.CalledProcessError):
    return "an unknown commit (not a git checkout)"
  return f"commit {head}" + (" with uncommitted changes" if dirty else "")


def _shown(run_dir: str) -> str:
  """How a path is shown in a stamp: relative to the repository if inside
  it (no machine paths), else as given."""
  path = os.path.abspath(run_dir)
  if os.path.commonpath([path, REPO]) == REPO:
    return os.path.relpath(path, REPO)
  return run_dir


def stamp(name: str, run_dir: str, run_source: str | None) -> str:
  """The first markdown cell's paragraph on what the outputs come from."""
  settings = [f"`{key}={os.environ[key]}`" for key in SETTINGS.get(name, ())
              if key in os.environ]
  command = "`.venv/bin/python notebooks/refresh.py"
  where = ""
  if name == ANALYZE:
    command += f" --run_dir {_shown(run_dir)}"
    source = run_source or (
        f"`{MAIN_JOB}` (the README's main job)"
        if os.path.abspath(run_dir) == os.path.join(REPO, DEFAULT_RUN_DIR)
        else "a command not stated (--run_source)")
    where = f" on the run directory `{_shown(run_dir)}`, trained by {source},"
  return (f"{STAMP}: executed by {command}` at {_commit()}{where} with "
          + (", ".join(settings) if settings else "the notebook's default "
             "settings") + ".")


def _restamp(notebook, text: str) -> None:
  """Replaces (or adds) the stamp paragraph of the first markdown cell."""
  cell = next((c for c in notebook.cells if c.cell_type == "markdown"), None)
  if cell is None:
    raise ValueError("the notebook has no markdown cell for its stamp.")
  paragraphs = [p for p in cell.source.split("\n\n")
                if not p.startswith(STAMP)]
  cell.source = "\n\n".join(paragraphs + [text])


def refresh(path: str, run_dir: str, run_source: str | None) -> None:
  """Executes notebook `path` and rewrites it (module docstring)."""
  notebook = nbformat.read(path, as_version=4)
  name = os.path.basename(path)
  with tempfile.TemporaryDirectory(prefix="nb_refresh_") as scratch:
    os.environ.update(
        NB_RUN_DIR=os.path.abspath(run_dir),
        NB_OUT_DIR=os.path.join(scratch, "report"),
        NB_OUTPUT_DIR=os.path.join(scratch, "outputs"),
        PYTHONDONTWRITEBYTECODE="1")
    client = NotebookClient(notebook, timeout=TIMEOUT, kernel_name="python3",
                            record_timing=False,
                            resources={"metadata": {"path": HERE}})
    client.execute()
  _restamp(notebook, stamp(name, run_dir, run_source))
  notebook.metadata[METADATA_KEY] = {SOURCES_KEY: code_hash(notebook)}
  temporary = path + ".refresh"
  nbformat.write(notebook, temporary)
  os.replace(temporary, path)


def main(argv=None) -> int:
  parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
  parser.add_argument("notebooks", nargs="*", metavar="NOTEBOOK",
                      help="notebook file names in --notebook_dir (default: "
                      "all)")
  parser.add_argument("--run_dir", default=os.path.join(REPO, DEFAULT_RUN_DIR),
                      help="the run directory analyze_run.ipynb reads "
                      "(default: runs/emnist, the README's main job)")
  parser.add_argument("--run_source", default=None,
                      help="how the run was trained (command and commit), "
                      "for the stamp of analyze_run.ipynb")
  parser.add_argument("--notebook_dir", default=HERE,
                      help="the folder whose notebooks are executed and "
                      "rewritten (default: this one)")
  args = parser.parse_args(argv)
  names = args.notebooks or sorted(
      n for n in os.listdir(args.notebook_dir) if n.endswith(".ipynb"))
  for name in names:
    if not os.path.isfile(os.path.join(args.notebook_dir, name)):
      parser.error(f"NOTEBOOK must be a notebook of --notebook_dir="
                   f"{args.notebook_dir!r}, got {name!r}.")
  if ANALYZE in names and not os.path.isfile(
      os.path.join(args.run_dir, "config.json")):
    parser.error(f"--run_dir must be a finished run directory (with "
                 f"config.json), got {args.run_dir!r}; the README's main job "
                 f"writes one: {MAIN_JOB}")
  for name in names:
    print(f"executing {name} ...", flush=True)
    try:
      refresh(os.path.join(args.notebook_dir, name), args.run_dir,
              args.run_source)
    except CellExecutionError as error:
      print(f"error: {name} failed and was left unchanged:\n{error}",
            file=sys.stderr)
      return 1
  return 0


if __name__ == "__main__":
  sys.exit(main())
