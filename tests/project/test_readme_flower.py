"""README.md's Flower block runs as written (sizes shrunk), in the Flower
environment: an in-process Grid (tests/flower_grid.py) stands for the one
a ServerApp is given, and the headline it prints carries the audit, the
noise self-test and Flower's accountant's line."""

import os
import re

import numpy as np
import pytest
from flwr.app import Array, ArrayRecord

import flower_grid
import repo_paths
from tff_canary.harness.recording import run_dir

README = os.path.join(str(repo_paths.REPO), "README.md")


# Each test in a ServerApp process's identity, NumPy's global RNG put back
# after (tests/conftest.py).
pytestmark = pytest.mark.usefixtures("flower_server_process")


def test_readme_flower_block_runs(tmp_path, monkeypatch, capsys):
  with open(README, encoding="utf-8") as f:
    blocks = [b for b in re.findall(r"```python\n(.*?)```", f.read(), re.S)
            if "flwr" in b]
  assert len(blocks) == 1
  code = blocks[0]
  # The README's sizes, shrunk for a test: 3 rounds, 6 + 6 canaries, 4
  # clients of a 210-parameter model.
  for old, new in [("num_rounds = 100", "num_rounds = 3"),
                   ("num_inserted=500, num_held_out=500",
                    "num_inserted=6, num_held_out=6"),
                   ("num_sampled_clients=50", "num_sampled_clients=4"),
                   ("FedAvg()", "FedAvg(fraction_evaluate=0.0, "
                                "min_available_nodes=4, min_train_nodes=4)")]:
    assert old in code, old
    code = code.replace(old, new)
  namespace = dict(
      grid=flower_grid.LocalGrid(4, flower_grid.noisy_trainer(0.1)),
      initial_arrays=ArrayRecord({"kernel": Array(np.zeros((20, 10),
                                                           np.float32)),
                                  "bias": Array(np.zeros(10, np.float32))}))
  monkeypatch.chdir(tmp_path)
  np.random.seed(0)  # Flower's noise: its global RNG
  exec(compile(code, "README.md", "exec"), namespace)  # pylint: disable=exec-used
  printed = capsys.readouterr().out
  assert "analytical ε (one participation)" in printed and "audit" in printed
  assert "noise self-test: passed" in printed
  # Fixed-size runs this small give the audit one bound: said in the
  # singular (the report's words were "1 bounds").
  assert re.search(r"\(1 bound, 95% together\)", printed), printed
  rd = run_dir.RunDir(tmp_path / "runs" / "flower")
  table = rd.load_table()
  assert len(table) == 12 and table.dim == 210 and table.orthogonal
  assert len(rd.load_ledger()) == 3 and rd.exists(run_dir.REPORT_JSON)
