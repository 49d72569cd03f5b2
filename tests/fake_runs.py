"""A synthetic finished run directory, for tests that need one without TFF."""

import os

import dp_accounting
import numpy as np

from tff_canary.harness.recording import run_dir
from tff_canary.mechanisms import registry
from tff_canary.stats import atomic_files
from tff_canary.stats.accounting.ledger import Ledger
from tff_canary.stats.canaries import canary_config
from tff_canary.stats.canaries import schedules
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


def make_ddp_run(path, **kwargs):
  """`make_run`'s run as TFF's distributed DP writes it: no ledger, the
  chain's settings in config.json, canary clients of norm 10 clipped at 1
  (canary_outcomes.json)."""
  rd = run_dir.RunDir(make_run(path, **kwargs))
  os.remove(rd.file(run_dir.LEDGER))
  atomic_files.write_json(rd.file(run_dir.CONFIG), dict(
      rd.load_config(), insertion="clients", canary_norm=10.0, clip=1.0,
      aggregator="ddp", ddp_mechanism="distributed_skellam", ddp_bits=16,
      ddp_beta=0.0, ddp_rotation="dft"))
  outcomes = [dict(round_num=int(r), canary_id=int(j), norm=10.0, stages=[],
                   zeroed=False, clipped=False, dp_clip=1.0, dp_clipped=True)
              for r, j in rd.load_participation()]
  atomic_files.write_json(rd.file(run_dir.CANARY_OUTCOMES),
                          dict(canary_norm=10.0, outcomes=outcomes))
  return path


# A DP-FTRL mechanism's own settings in config.json (its defaults but 3 bands).
SCORED_SETTINGS = dict(tree={}, banded=dict(bands=3), blt=dict(
    blt_buffers=3, blt_output_scale=None, blt_buf_decay=None))


def make_scored_run(path, aggregator="tree", *, z=1.0, seed=0):
  """A finished DP-FTRL run directory of `aggregator` (tree, banded, blt)
  whose scores are drawn here: u_j ~ N(a_j / z, K), a_j canary j's
  schedule if inserted, K the covariance of the mechanism's claimed rounds
  (`Mechanism.round_noise`, restarted every epoch); 4 epochs of 8 rounds,
  400 candidates (tests/mechanisms/tree/test_end_to_end.py draws K independently)."""
  config = dict(task="emnist", data="synthetic", seed=seed, canary_seed=7,
                dim=10_000, noise_multiplier=z, clip=0.1, clients_per_round=4,
                num_rounds=32, num_inserted=200, num_held_out=200,
                sampling="shuffle", num_clients=32, delta=1e-5,
                presentations=4, assignment="coin", directions="orthogonal",
                aggregator=aggregator, **SCORED_SETTINGS[aggregator])
  canaries = canary_config.CanaryConfig(
      seed=7, num_inserted=200, num_held_out=200,
      schedule=schedules.ShuffledEpochs(32, 8, partial_last_epoch=True),
      assignment="coin", directions="orthogonal")
  a = canaries.schedule_matrix() & canaries.inserted[:, None]
  k = registry.of_config(config).round_noise(config, 32, 8).covariance
  rng = np.random.default_rng(seed)
  u = a / z + rng.standard_normal((400, 32)) @ np.linalg.cholesky(k).T
  return save_scored_run(path, config, canaries, u)
