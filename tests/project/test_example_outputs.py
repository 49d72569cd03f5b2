"""The Gaussian mechanism study writes under runs/ (git-ignored) by default.

Its example command used to write gm.json and gm.png into the working
directory, i.e. into a clone's top level, where git showed them as new
files.
"""

import json
import os
import subprocess
import sys
import repo_paths

REPO = str(repo_paths.REPO)
SCRIPT = os.path.join(REPO, "experiments", "gaussian_mechanism.py")


def test_the_study_writes_under_runs_by_default(tmp_path):
  proc = subprocess.run(
      [sys.executable, SCRIPT, "--dim=4000", "--num_canaries=40",
       "--target_epsilons=3", "--delta=1e-5", "--trials=2"],
      cwd=tmp_path, capture_output=True, text=True, timeout=300)
  assert proc.returncode == 0, proc.stderr[-3000:]
  assert os.listdir(tmp_path) == ["runs"]
  out = tmp_path / "runs"
  assert sorted(os.listdir(out)) == ["gm.json", "gm.png"]
  assert json.loads((out / "gm.json").read_text())["config"]["dim"] == 4000
  assert (out / "gm.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_runs_is_ignored_by_git():
  # Run from the repository, the defaults land in its git-ignored runs/.
  proc = subprocess.run(
      ["git", "check-ignore", "--no-index", "runs/gm.json",
       "runs/gm.png"], cwd=REPO, capture_output=True,
      text=True, timeout=60)
  assert proc.returncode == 0, proc.stderr
  assert proc.stdout.split() == ["runs/gm.json",
                                 "runs/gm.png"]


def test_an_empty_path_writes_nothing(tmp_path):
  proc = subprocess.run(
      [sys.executable, SCRIPT, "--dim=4000", "--num_canaries=40",
       "--target_epsilons=3", "--delta=1e-5", "--trials=2", "--output_json=",
       "--plot="], cwd=tmp_path, capture_output=True, text=True, timeout=300)
  assert proc.returncode == 0, proc.stderr[-3000:]
  assert os.listdir(tmp_path) == [] and "wrote" not in proc.stdout
