"""experiments/flower_app: the Flower app's data, model and whole run.

The app's ServerApp and ClientApp run in-process on tests/flower_grid.py's
Grid (no Ray), at the small model size; one run goes through
`flwr.simulation.run_simulation` on Ray (slow). Each checks the headline
printed and that `python -m tff_canary report DIR` reads the directory.
"""

from __future__ import annotations

import os
import subprocess
import sys

import numpy as np
import pytest
from flwr.app import Context, RecordDict

import flower_grid
import repo_paths

APP = repo_paths.REPO / "experiments" / "flower_app"
sys.path.insert(0, str(APP))

from tff_canary_emnist import client_app  # noqa: E402  pylint: disable=g-import-not-at-top,wrong-import-position
from tff_canary_emnist import emnist_files  # noqa: E402  pylint: disable=g-import-not-at-top,wrong-import-position
from tff_canary_emnist import server_app  # noqa: E402  pylint: disable=g-import-not-at-top,wrong-import-position
from tff_canary_emnist import synthetic  # noqa: E402  pylint: disable=g-import-not-at-top,wrong-import-position
from tff_canary_emnist import task  # noqa: E402  pylint: disable=g-import-not-at-top,wrong-import-position

SMALL = {"num-server-rounds": 3, "clients-per-round": 5, "model-size": "small",
         "num-inserted": 6, "num-held-out": 6, "num-test-clients": 4,
         "plots": False}
HEADLINE_START = ("analytical ε", "ε-final", "ε-all", "lower bound", "audit:",
                  "noise self-test:")


def test_the_full_model_is_the_tff_experiments_cnn():
  # tasks.emnist_cnn: 1,206,590 parameters (Keras's count, its docstring).
  params = task.initial_params(0, "full")
  assert sum(v.size for v in params.values()) == 1_206_590
  assert [k for k, _ in task.shapes("full")] == list(params)
  limit = np.sqrt(6.0 / (9216 + 128))  # glorot-uniform of dense1
  assert np.abs(params["dense1/kernel"]).max() <= limit
  # A uniform on [-l, l] has max |x| near l over 1.2M draws (1 - 1e-6 l).
  assert np.abs(params["dense1/kernel"]).max() > 0.999 * limit


def test_training_lowers_the_loss_and_keeps_the_key_order():
  data = synthetic.client(0, 1, 64)
  params = task.initial_params(1, "small")
  trained = params
  for step in range(20):
    trained = task.train(trained, data, learning_rate=0.5, batch_size=16,
                         epochs=1, key_seed=(0, step))
  assert list(trained) == list(params)  # Flower's clipping pairs by position
  before, after = task.evaluate(params, data), task.evaluate(trained, data)
  # 20 epochs on 64 examples: the training loss must fall well below
  # log(62) = 4.13 of the untrained net (it memorizes).
  assert after["loss"] < before["loss"] - 0.5


def test_synthetic_writers_are_seeded_and_differ():
  a, b = synthetic.client(3, 7, 16), synthetic.client(3, 7, 16)
  other = synthetic.client(3, 8, 16)
  np.testing.assert_array_equal(a["pixels"], b["pixels"])
  assert not np.array_equal(a["pixels"], other["pixels"])
  assert a["pixels"].shape == (16, 28, 28) and a["pixels"].dtype == np.float32
  assert 0.0 <= a["pixels"].min() and a["pixels"].max() <= 1.0
  assert a["label"].min() >= 0 and a["label"].max() < 62


def test_label_noise_replaces_about_a_tenth_of_the_labels():
  clients = [synthetic.client(0, i, 200) for i in range(20)]
  wrong = np.mean(np.concatenate([c["label"] != c["clean_label"]
                                  for c in clients]))
  # label_noise 0.1 x 61/62 of 4000 labels: binomial SE 0.0047; 4 SE.
  assert abs(wrong - 0.1 * 61 / 62) < 0.019


def test_the_emnist_file_loader_reads_a_file_the_test_writes(tmp_path):
  rng = np.random.default_rng(0)
  clients = {f"f{i:04d}_00": dict(pixels=rng.uniform(size=(i + 2, 28, 28)),
                                  label=rng.integers(0, 62, i + 2))
             for i in range(3)}
  emnist_files.write(tmp_path / emnist_files.TRAIN_FILE, clients)
  data = emnist_files.EmnistFile(tmp_path / emnist_files.TRAIN_FILE)
  assert data.client_ids == tuple(sorted(clients)) and len(data) == 3
  got = data.client(1)
  np.testing.assert_array_equal(got["label"], clients["f0001_00"]["label"])
  np.testing.assert_allclose(got["pixels"], clients["f0001_00"]["pixels"],
                             rtol=1e-7)  # float32 of float64
  with pytest.raises(ValueError, match="index must be in"):
    data.client(3)
  with pytest.raises(FileNotFoundError, match="no such file"):
    emnist_files.EmnistFile(tmp_path / "missing.h5")


def test_settings_fill_the_defaults_and_refuse_unknown_keys():
  s = server_app.settings({"num-server-rounds": 2})
  assert s["num-server-rounds"] == 2
  assert s["clients-per-round"] == server_app.defaults()["clients-per-round"]
  with pytest.raises(ValueError, match="unknown keys"):
    server_app.settings({"rounds": 2})
  with pytest.raises(ValueError, match="clipping"):
    server_app.settings({"clipping": "none"})


def _local_train(message):
  node = message.metadata.dst_node_id
  context = Context(run_id=1, node_id=node,
                    node_config={"partition-id": node - 1},
                    state=RecordDict(), run_config={})
  return client_app.train(message, context).content


def _report(run_dir):
  return subprocess.run([sys.executable, "-m", "tff_canary", "report",
                         str(run_dir)], capture_output=True, text=True,
                        check=True, timeout=120).stdout


@pytest.mark.parametrize("clipping", ["fixed", "adaptive"])
def test_the_app_trains_writes_and_prints_the_headline(tmp_path, capsys,
                                                       clipping):
  grid = flower_grid.LocalGrid(12, _local_train)
  with flower_grid.server_identity():
    out = server_app.run(grid, server_app.settings(
        {**SMALL, "clipping": clipping, "output-dir": str(tmp_path / "run")}))
  printed = capsys.readouterr().out
  for start in HEADLINE_START:
    assert any(line.startswith(start) for line in printed.splitlines()), start
  assert f"report: {tmp_path / 'run' / 'report.md'}" in printed
  strategy = out["strategy"]
  assert strategy.dim == 19_838 and len(strategy.rounds) == 3
  assert all(len(grid.replies[r]) == 5 for r in (1, 2, 3))
  assert out["result"].arrays is not None
  report = _report(tmp_path / "run")
  assert report.startswith("analytical ε")


@pytest.mark.slow
def test_run_simulation_on_ray_prints_the_headline(tmp_path, capfd):
  from flwr.simulation import run_simulation  # pylint: disable=g-import-not-at-top
  run_simulation(
      server_app=server_app.make_app({**SMALL, "num-server-rounds": 1,
                                      "clients-per-round": 3,
                                      "output-dir": str(tmp_path / "run")}),
      client_app=client_app.app, num_supernodes=4,
      backend_config={"client_resources": {"num_cpus": 1}})
  printed = capfd.readouterr().out
  assert "ε-final" in printed and "report: " in printed
  assert os.path.isfile(tmp_path / "run" / "report.json")
  assert _report(tmp_path / "run").startswith("analytical ε")
