"""What canaries cost a BLT DP-FTRL round, and its memory.

bench/round_overhead.py's benchmark (the EMNIST character CNN on synthetic
clients, rounds in rotating triples, paired ratios, peak RSS of each
learning process alone) with BLT DP-FTRL as the mechanism:

  plain:  TFF's own DifferentiallyPrivateFactory over the BLT query
          (`matrix_aggregation.MatrixAggregation.tff_factory`)
  2000, 20000: CanaryDPFactory(MatrixAggregation) with that many orthogonal
          canaries, half inserted

The BLT is the one `--aggregator=blt` runs: `blt_buffers` (3) buffers fitted
to one participation per epoch of `--rounds_per_epoch` rounds, restarted
every epoch; unseeded fresh noise, as in TFF. Its buffers are `buffers`
vectors of the model's size in the aggregator's state, so beside the plain
BLT process the peak RSS of plain DP-FedAvg's (TFF's `gaussian_fixed`) is
measured, the reference of the memory target: the canary BLT process within
(buffers + 1) d 4 bytes + 0.5 GiB of it.

Last line: `BLT: orthogonal canaries, per-round ratio: A at 2000, B at 20000`.

Usage: .venv/bin/python bench/matrix_overhead.py [--rounds 40] [--warmup 2]
       [--rss_rounds 4] [--smoke]   (the flags of round_overhead.py)
"""

from __future__ import annotations

import os
import sys

from tff_canary.federated.runtime import quiet_start

quiet_start.quiet_tensorflow()  # before TensorFlow loads (and its subprocess)

import round_overhead  # pylint: disable=g-import-not-at-top
from tff_canary.federated.insertion import factory  # pylint: disable=g-import-not-at-top
from tff_canary.mechanisms.blt import spec as blt_mechanism  # pylint: disable=g-import-not-at-top
from tff_canary.mechanisms.matrix import aggregation as matrix_aggregation  # pylint: disable=g-import-not-at-top

ROUNDS_PER_EPOCH = 500  # round_overhead's canary schedule: ShuffledEpochs(500, 500)
BUFFERS = 3


def _aggregation(args):
  return matrix_aggregation.MatrixAggregation.blt(
      args.noise_multiplier, args.clip,
      blt_mechanism.fitted(ROUNDS_PER_EPOCH, BUFFERS),
      restart_every=ROUNDS_PER_EPOCH)


BLT = round_overhead.Aggregators(
    name="BLT: ",
    plain=lambda args, specs: _aggregation(args).tff_factory(
        specs, args.clients_per_round),
    canaries=lambda args, specs, total, seed: factory.CanaryDPFactory(
        _aggregation(args), round_overhead.canary_config_of(total, seed),
        clients_per_round=args.clients_per_round),
    script=os.path.abspath(__file__))


if __name__ == "__main__":
  sys.exit(round_overhead.main(kit=BLT))
