"""A synthetic finished run directory, for tests that need one without TFF."""

import os

import dp_accounting
import numpy as np

from tff_canary.stats import atomic_files
from tff_canary.harness.recording import run_dir
from tff_canary.stats.accounting.ledger import Ledger
from tff_canary.stats.canaries.cosine_table import CosineTable

DIM = 100_000
ROUNDS = 40


def make_run(path, *, shift=2.5, noise_multiplier=0.8, seed=5, n=600,
             sampling="shuffle", assignment="coin", rng_seed=0,
             num_clients=1000, schedule=""):
  """A run directory with statistics like a Gaussian mechanism's: each
  inserted canary takes part once (`schedule`: the canaries' schedule's repr
  recorded in the table, "" for none)."""
  rng = np.random.default_rng(rng_seed)
  os.makedirs(path, exist_ok=True)
  mask = rng.random(n) < 0.5 if assignment == "coin" else np.arange(n) < n // 2
  table = CosineTable(
      id=np.arange(n), group=np.where(mask, "inserted", "held_out"),
      participation=mask.astype(int),
      final_cosine=(np.where(mask, shift, 0) + rng.standard_normal(n)) / np.sqrt(DIM),
      max_cosine=(3 + np.where(mask, shift, 0) + 0.4 * rng.standard_normal(n))
      / np.sqrt(DIM),
      max_round=rng.integers(0, ROUNDS, n), seed=seed, dim=DIM,
      num_rounds=ROUNDS, rounds_recorded=ROUNDS, assignment=assignment,
      schedule=schedule)
  table.save_npz(os.path.join(path, run_dir.COSINES_NPZ))
  table.save_csv(os.path.join(path, run_dir.COSINES_CSV))
  ledger = Ledger([dp_accounting.GaussianDpEvent(noise_multiplier)] * ROUNDS)
  atomic_files.write_text(os.path.join(path, run_dir.LEDGER), ledger.to_json())
  events = np.stack([rng.integers(0, ROUNDS, mask.sum()), np.flatnonzero(mask)], 1)
  atomic_files.save_npz(os.path.join(path, run_dir.PARTICIPATION), events=events)
  atomic_files.write_json(os.path.join(path, run_dir.CONFIG), dict(
      task="emnist", data="synthetic", seed=0, canary_seed=seed, dim=DIM,
      noise_multiplier=noise_multiplier, clients_per_round=20,
      num_rounds=ROUNDS, num_inserted=n // 2, num_held_out=n // 2,
      sampling=sampling, num_clients=num_clients, delta=1e-5))
  with open(os.path.join(path, run_dir.METRICS), "w") as f:
    f.write("round,loss,eval_loss,eval_accuracy\n0,2.0,,\n39,1.0,1.1,0.61\n")
  return path




def save_scored_run(path, config, canaries, scores):
  """A finished DP-FTRL-style run directory at `path` (new): config.json,
  the inserted canaries' participation and the [candidates, rounds] canary
  `scores` as tree_scores.npy (one row per round)."""
  rd = run_dir.RunDir(path)
  os.makedirs(rd.path)
  rd.save_config(config)
  atomic_files.save_npz(rd.file(run_dir.PARTICIPATION),
                        events=canaries.participation.events)
  rd.save_tree_scores(list(np.asarray(scores).T))
  return rd
