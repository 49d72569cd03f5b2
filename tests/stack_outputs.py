"""A fixed set of seeded outputs of the statistics layer, as JSON.

    python tests/stack_outputs.py OUT.json

computes, from fixed seeds, what the statistics layer and the report
command give: simulated canary cosines (summaries of them), the empirical
epsilons, the lower bounds, an audit's verdict, the analytical epsilons of
the Gaussian mechanism (exact GDP and dp-accounting's PLD and RDP), of a
tree, a banded and a BLT matrix mechanism, and a synthetic run's whole
report.json. tests/project/test_stack_agreement.py runs it on the TFF stack (NumPy
1.25, dp-accounting 0.4.3) and on the newest one (NumPy 2, dp-accounting
0.6) and compares the two files. Needs only the package's core install
(no TensorFlow, no matplotlib).
"""

import json
import os
import sys
import tempfile

import dp_accounting
import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import fake_runs  # pylint: disable=g-import-not-at-top,wrong-import-position
import tff_canary
from tff_canary.harness.reporting import report as report_lib
from tff_canary.stats import atomic_files
from tff_canary.stats.accounting import ddp_accounting
from tff_canary.stats.accounting import ledger as ledger_lib
from tff_canary.stats.audit import audit
from tff_canary.stats.bounds import fdp_one_run
from tff_canary.stats.bounds import tight_one_run
from tff_canary.stats.canaries.cosine_table import CosineTable
from tff_canary.stats.correlated import tree_accounting
from tff_canary.stats.matrix import analytical
from tff_canary.stats.matrix import blt
from tff_canary.stats.matrix import sensitivity
from tff_canary.stats.simulation import gaussian_mechanism

DELTA = 1e-5
DIM = 10_000


def _summary(x) -> dict:
  """A sample by its first values and moments (the whole array would make
  the file large; any change in a draw moves these)."""
  x = np.asarray(x, dtype=np.float64)
  return dict(size=int(x.size), first=[float(v) for v in x[:3]],
              mean=float(x.mean()), std=float(x.std()), max=float(x.max()))


def outputs(workdir: str) -> dict:
  run = gaussian_mechanism.simulate(dim=DIM, num_inserted=300,
                                    num_held_out=300, noise_std=0.7, seed=3)
  coin = gaussian_mechanism.simulate_coin(dim=DIM, num_candidates=600,
                                          noise_std=0.7, seed=4)
  estimates = dict(
      final=tff_canary.epsilon_final(run.inserted, dim=DIM, delta=DELTA),
      final_fitted=tff_canary.epsilon_final(
          run.inserted, dim=DIM, delta=DELTA, method="fitted_variance"),
      all=tff_canary.epsilon_all(run.inserted, run.held_out, delta=DELTA))
  bounds = dict(
      epsilon_lo=tff_canary.epsilon_lo(run.inserted, dim=DIM, delta=DELTA),
      epsilon_lo_held_out=tff_canary.epsilon_lo(
          run.inserted, held_out=run.held_out, delta=DELTA),
      one_run=tff_canary.one_run_bound(coin.statistics, coin.inserted_mask,
                                       delta=DELTA),
      fdp_one_run=fdp_one_run.fdp_one_run_bound(
          coin.statistics, coin.inserted_mask, delta=DELTA),
      tight_one_run=tight_one_run.tight_one_run_bound(
          coin.statistics, coin.inserted_mask, delta=DELTA,
          strategy="bonferroni"))
  mask = coin.inserted_mask
  table = CosineTable(
      id=np.arange(mask.size), group=np.where(mask, "inserted", "held_out"),
      participation=mask.astype(int), final_cosine=coin.statistics,
      max_cosine=np.full(mask.size, np.nan), max_round=np.full(mask.size, -1),
      seed=4, dim=DIM, num_rounds=1, rounds_recorded=0, assignment="coin")
  verdicts = {
      str(claim): audit.audit_table(table, claimed_epsilon=claim,
                                    delta=DELTA).as_dict()
      for claim in (0.5, 3.0)}

  band = sensitivity.toeplitz_sensitivity([1.0, 0.6, 0.3], rounds=24,
                                          participations=3, separation=8)
  blt_coefficients = blt.blt([0.3, 0.1], [0.9, 0.5]).coefficients(24)
  blt_sensitivity = sensitivity.toeplitz_sensitivity(
      blt_coefficients, rounds=24, participations=3, separation=8)
  ledger = ledger_lib.Ledger.from_json(
      ledger_lib.Ledger([dp_accounting.GaussianDpEvent(0.9)] * 20
                        ).to_json())
  tree = tree_accounting.tree_epsilons(2.0, [16, 16], delta=DELTA)
  orders = np.arange(2, 65)
  analytical_epsilons = dict(
      gaussian=tff_canary.gaussian_epsilon(1.0, DELTA),
      gaussian_noise_multiplier=tff_canary.gaussian_noise_multiplier(
          2.0, DELTA),
      repeated=tff_canary.repeated_epsilon(4.0, 10, DELTA),
      poisson=tff_canary.poisson_epsilon(1.1, 0.01, 1000, DELTA),
      poisson_rdp=tff_canary.poisson_epsilon(1.1, 0.01, 1000, DELTA,
                                             accountant="rdp"),
      ledger_one_participation=ledger.epsilon_one_participation(DELTA),
      ledger_poisson=ledger.epsilon_poisson(0.05, DELTA),
      tree=tree.epsilon, tree_rdp=tree.rdp_epsilon,
      banded=analytical.matrix_epsilon(band, noise_multiplier=2.0,
                                       delta=DELTA).epsilon,
      banded_sensitivity=band.value,
      blt=analytical.matrix_epsilon(blt_sensitivity, noise_multiplier=2.0,
                                    delta=DELTA).epsilon,
      blt_coefficients=[float(c) for c in blt_coefficients[:4]],
      ddp_rdp=ddp_accounting.rdp_epsilon(
          orders, ddp_accounting.gaussian_rdp(orders, 1.0) * 50, DELTA))

  run_path = os.path.join(workdir, "run")
  fake_runs.make_run(run_path)
  report = report_lib.build_report(run_path).as_dict()
  del report["run_dir"]  # a temporary directory's name
  with open(os.path.join(run_path, "cosines.csv"), encoding="utf-8") as f:
    csv_head = f.read().splitlines()[:14]
  loaded = CosineTable.load(os.path.join(run_path, "cosines.csv"))

  return dict(
      cosines=dict(inserted=_summary(run.inserted),
                   held_out=_summary(run.held_out),
                   coin=_summary(coin.statistics),
                   coin_inserted=int(mask.sum())),
      estimates={k: v.as_dict() for k, v in estimates.items()},
      bounds={k: v.as_dict() for k, v in bounds.items()},
      audit=verdicts, analytical=analytical_epsilons,
      report=report, csv_head=csv_head,
      csv_loads_back=bool(loaded == CosineTable.load(
          os.path.join(run_path, "cosines.npz"))))


def main(argv):
  if len(argv) != 2:
    sys.exit("usage: python tests/stack_outputs.py OUT.json")
  with tempfile.TemporaryDirectory() as workdir:
    got = outputs(workdir)
  with open(argv[1], "w", encoding="utf-8") as f:
    f.write(atomic_files.dumps_json(got))


if __name__ == "__main__":
  main(sys.argv)
