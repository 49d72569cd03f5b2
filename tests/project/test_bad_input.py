"""Bad input across the public API, the factory and the CLIs (issue 5).

Every case must raise TypeError/ValueError (or, for files, an error naming the
file) whose message names the argument and shows the value, never a deep
NumPy/SciPy/TensorFlow traceback, and no case may leave a partial file.
"""

import json
import os
import re
import subprocess
import sys

import numpy as np
import pytest

import repo_paths
import tff_canary
from tff_canary.stats.audit import audit
from tff_canary.stats.simulation import gaussian_mechanism
from tff_canary.stats.accounting import ledger
from tff_canary.harness.recording import run_dir
from tff_canary.stats.canaries.cosine_table import CosineTable
from tff_canary.stats.audit.table_estimates import estimate_table

from fake_runs import make_run

pytestmark = pytest.mark.tff

REPO = str(repo_paths.REPO)
GOOD = np.array([0.001, 0.002, 0.0015, 0.0005])


def _table(group=("inserted", "inserted", "held_out", "held_out")):
  n = len(group)
  return CosineTable(id=np.arange(n), group=np.array(group),
                     participation=np.array([g == "inserted" for g in group], int),
                     final_cosine=np.linspace(-0.01, 0.01, n),
                     max_cosine=np.full(n, np.nan), max_round=np.full(n, -1),
                     seed=0, dim=1000, num_rounds=2, rounds_recorded=0)


API_CASES = [
    # (callable, error, pattern the message must contain)
    (lambda: tff_canary.epsilon_final(np.zeros((2, 3)), dim=10**6, delta=1e-6),
     ValueError, r"inserted must be 1-D, got shape \(2, 3\)"),
    (lambda: tff_canary.epsilon_final([0.1, np.nan], dim=10**6, delta=1e-6),
     ValueError, r"inserted\[1\] = nan"),
    (lambda: tff_canary.epsilon_final([0.1, np.inf], dim=10**6, delta=1e-6),
     ValueError, r"inserted\[1\] = inf"),
    (lambda: tff_canary.epsilon_final([0.1, 1.2], dim=10**6, delta=1e-6),
     ValueError, r"inserted\[1\] = 1.2"),
    (lambda: tff_canary.epsilon_final(GOOD, dim=10**6, delta=0.0),
     ValueError, "delta must be strictly between 0 and 1, got 0.0"),
    (lambda: tff_canary.epsilon_final(GOOD, dim=10**6, delta=1e-6,
                                      confidence=1.5),
     ValueError, "confidence must be strictly between 0 and 1, got 1.5"),
    (lambda: tff_canary.epsilon_final(GOOD, dim=1, delta=1e-6),
     ValueError, "dim must be at least 2, got 1"),
    (lambda: tff_canary.epsilon_final(GOOD, dim="1000000", delta=1e-6),
     TypeError, "dim must be an integer, got '1000000'"),
    (lambda: tff_canary.epsilon_final([0.2], dim=10**6, delta=1e-6),
     ValueError, "inserted needs at least 2 values, got 1"),
    (lambda: tff_canary.epsilon_final([0.2, 0.2], dim=10**6, delta=1e-6),
     ValueError, "inserted has zero variance"),
    (lambda: tff_canary.epsilon_final(GOOD, dim=10**6, delta=1e-6, method="x"),
     ValueError, "method must be one of"),
    (lambda: tff_canary.epsilon_all(GOOD, [], delta=1e-6),
     ValueError, "held_out needs at least 2 values, got 0"),
    (lambda: tff_canary.epsilon_lo(GOOD, dim=100, held_out=GOOD, delta=1e-6),
     ValueError, "give exactly one of dim"),
    (lambda: tff_canary.one_run_bound(GOOD, [1, 0, 1, 0], delta=1e-6),
     TypeError, "inserted_mask must be a bool array, got dtype int64"),
    (lambda: tff_canary.one_run_bound(GOOD, np.array([1, 0, 1, 0], bool),
                                      delta=1e-6, k_plus=4, k_minus=4),
     ValueError, "k_plus=4, k_minus=4"),
    (lambda: tff_canary.CosineNull(0), ValueError, "dim must be at least 2, got 0"),
    (lambda: tff_canary.epsilon_for_delta(1e-6, 0.0, -1.0, 1.0, 1.0),
     ValueError, "sigma0 must be positive, got -1.0"),
    (lambda: tff_canary.gaussian_epsilon(-1.0, 1e-6),
     ValueError, "noise_multiplier must be nonnegative, got -1.0"),
    (lambda: tff_canary.gaussian_epsilon(1.0, 2.0), ValueError,
     "delta must be strictly between 0 and 1, got 2.0"),
    (lambda: ledger.Ledger.from_json("not json"), ValueError,
     "text is not valid JSON"),
    (lambda: estimate_table({"final_cosine": GOOD}, delta=1e-6),
     TypeError, "table must be a CosineTable, got dict"),
    (lambda: audit.audit_table(_table(), claimed_epsilon=-1.0, delta=1e-6),
     ValueError, "claimed_epsilon must be >= 0, got -1.0"),
    (lambda: _table(group=("inserted", "maybe", "held_out", "held_out")),
     ValueError, "row 1 has 'maybe'"),
    (lambda: gaussian_mechanism.simulate(dim=1.5, num_inserted=2, num_held_out=2,
                                         noise_std=1.0, seed=0),
     TypeError, "dim must be an integer, got 1.5"),
    (lambda: gaussian_mechanism.simulate(dim=1000, num_inserted=2,
                                         num_held_out=2, noise_std=-1.0, seed=0),
     ValueError, "noise_std must be nonnegative, got -1.0"),
]


@pytest.mark.parametrize("call, error, pattern", API_CASES)
def test_public_api(call, error, pattern):
  with pytest.raises(error, match=pattern):
    call()


def _factory_cases():
  from tff_canary.federated.scores import aggregate_recorder  # pylint: disable=g-import-not-at-top
  from tff_canary.federated.insertion import factory
  from tff_canary.stats.canaries import canary_config
  from tff_canary.stats.canaries import schedules
  schedule = schedules.FixedPresentations(num_rounds=5, presentations=1)
  config = canary_config.CanaryConfig(seed=0, num_inserted=2, num_held_out=2,
                                      schedule=schedule)
  return [
      (lambda: canary_config.CanaryConfig(seed=0, num_inserted=-1,
                                          num_held_out=2, schedule=schedule),
       ValueError, "num_inserted must be at least 0, got -1"),
      (lambda: canary_config.CanaryConfig(seed=1.5, num_inserted=2,
                                          num_held_out=2, schedule=schedule),
       TypeError, "seed"),
      (lambda: canary_config.CanaryConfig(seed=0, num_inserted=2,
                                          num_held_out=2, schedule=None),
       TypeError, "schedule must be a tff_canary.stats.canaries.schedules.Schedule"),
      (lambda: factory.CanaryDPFactory.gaussian_fixed(-0.1, 4, 1.0,
                                                      canaries=config),
       ValueError, "noise_multiplier must be nonnegative, got -0.1"),
      (lambda: factory.CanaryDPFactory.gaussian_fixed(0.1, 4, 0.0,
                                                      canaries=config),
       ValueError, "clip must be positive, got 0.0"),
      (lambda: factory.CanaryDPFactory.gaussian_fixed(0.1, 4, float("nan"),
                                                      canaries=config),
       ValueError, "clip must be finite, got nan"),
      (lambda: factory.CanaryDPFactory.gaussian_adaptive(
          0.1, 4, target_unclipped_quantile=2.0, canaries=config),
       ValueError, "target_unclipped_quantile must be in \\[0, 1\\], got 2.0"),
      (lambda: factory.CanaryDPFactory.gaussian_fixed(0.1, 4, 1.0,
                                                      canaries=config,
                                                      noise_seed=-3),
       ValueError, "noise_seed must be at least 0, got -3"),
      (lambda: schedules.ShuffledEpochs(num_rounds=5, rounds_per_epoch=6),
       ValueError, "rounds_per_epoch"),
      (lambda: schedules.FixedPresentations(num_rounds=5, presentations=6),
       ValueError, "presentations"),
      (lambda: schedules.PerRoundSampling(num_rounds=5, probability=1.5),
       ValueError, "probability"),
      (lambda: aggregate_recorder.AggregateRecorder("/tmp/unused.npy", dim=0,
                                                    num_rounds=2),
       ValueError, "dim must be at least 2, got 0"),
  ]


def test_factory_and_schedules():
  cases = _factory_cases()
  assert len(cases) >= 12
  for call, error, pattern in cases:
    with pytest.raises(error, match=pattern):
      call()
  assert not os.path.exists("/tmp/unused.npy")


def _report_cli(path, *args):
  return subprocess.run([sys.executable, "-m", "tff_canary", "report",
                         str(path), *args], capture_output=True, text=True,
                        timeout=120)


@pytest.mark.parametrize("setup, args, pattern", [
    (None, (), "does not exist"),
    (lambda p: open(os.path.join(p, run_dir.COSINES_NPZ), "wb").write(b"\0" * 64),
     (), "cosines.npz is not a valid cosine table"),
    (lambda p: _edit_config(p, dim=999), (),
     "dim=100000 but .*config.json says dim=999"),
    (lambda p: _edit_config(p, canary_seed=77), (),
     "seed=5 but .*config.json says canary_seed=77"),
    (lambda p: None, ("--delta", "2"), "delta must be strictly between 0 and 1, got 2.0"),
    (lambda p: None, ("--confidence", "-1"), "confidence"),
    (lambda p: None, ("--claimed_epsilon", "-2"), "claimed_epsilon"),
])
def test_report_cli(tmp_path, setup, args, pattern):
  path = tmp_path / "run"
  if setup is not None:
    make_run(path)
    setup(str(path))
  proc = _report_cli(path, *args)
  assert proc.returncode == 2
  assert "Traceback" not in proc.stderr
  assert re.search(pattern, proc.stderr), proc.stderr
  if path.exists():
    assert not (path / run_dir.REPORT_JSON).exists()
    assert not [n for n in os.listdir(path) if n.startswith(".tmp")]


def _edit_config(path, **changes):
  config_path = os.path.join(path, run_dir.CONFIG)
  config = json.load(open(config_path))
  config.update(changes)
  json.dump(config, open(config_path, "w"))


@pytest.mark.parametrize("script, flags, pattern", [
    ("emnist.py", ["--noise_multiplier=-1"],
     "noise_multiplier must be nonnegative, got -1.0"),
    ("gaussian_mechanism.py", ["--delta=0", "--trials=2", "--dim=2000",
                               "--num_canaries=10"],
     "delta must be strictly between 0 and 1, got 0.0"),
    ("sweep.py", ["--noise_multipliers=abc"], "must be numbers"),
])
def test_experiment_clis(tmp_path, script, flags, pattern):
  out = tmp_path / "out"
  proc = subprocess.run(
      [sys.executable, os.path.join(REPO, "experiments", script),
       *flags] + ([f"--output_dir={out}"] if script != "gaussian_mechanism.py"
                  else [f"--output_json={out}.json"]),
      capture_output=True, text=True, timeout=300)
  assert proc.returncode != 0
  assert pattern in proc.stderr, proc.stderr[-2000:]
  assert "Traceback" not in proc.stderr
  assert not out.exists() and not os.path.exists(f"{out}.json")
