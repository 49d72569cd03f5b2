"""Planted Flower DP bugs: caught in one run, how often? (issue 36, item 4)

  .nox/flower/bin/python bench/flower_audit.py [--trials 60]
      [--workers 1] [--smoke]

Flower's environment (requirements/lock-flower.txt, flwr 1.42; `nox
--install-only -s flower` makes it). Each cell runs `--trials` seeded runs of
one strategy as a user would: Flower's DP strategy (or a planted bug of
`tff_canary.mechanisms.gaussian.flower_planted_bugs`) wrapped in
`ServerSideCanaries` (server-side clipping) or `CanaryClients` (client-side,
the canary clients through the ClientApp and its mods), `start` on an
in-process Grid (below: each node answers with its ClientApp's reply, no
Ray, no SuperLink), `flower_run.write_run` (which runs the noise
self-test) into a temporary run directory, and the report's headline. A
run counts as caught ("tool") when the audit refuted the claim (95%) or
the noise self-test failed; the columns give the audit and the self-test
alone too. Bugs: n2 (noise z C / n^2), seed (np.random reseeded before each
round's noise), count (adaptive clipping's count without its noise),
nomod (client-side clipping, the ClientApp without fixedclipping_mod);
"correct" cells are Flower's own strategies (server fixed, server
adaptive, client fixed with canary clients), whose "tool" rate is the
false alarm.

Sizes: 50 nodes all sampled (n = 50), 10 rounds, d = 2,000 (one float32
array), 200 coin-flipped candidate canaries (ShuffledEpochs, 5 rounds an
epoch: each inserted canary in 2 rounds), z = 1, C = 1, delta = 1e-5; the
clients' updates 0.01 N(0, I). 60 trials resolve the targets: all 60
caught gives a one-sided 95% Clopper-Pearson lower limit of
0.05^(1/60) = 95.1% on the rate; none of 60 correct runs flagged, an upper
limit of 4.9% on the false alarm ("lo" / "hi" columns).

The last line: `Flower audit: worst detection D, worst false alarm F`, D the
lowest "tool" rate over the bugs, F the highest over the correct cells.
Measured (commit 3bbaa0b, `--trials 60 --workers 2`, nice'd, 621 s on the
shared 2-core machine; docs/benchmarks.md, "Flower"): every bug caught in
60/60 runs (n2 and nomod by the audit, n2, seed and count by the
self-test), no correct run flagged in 60 of each:
`Flower audit: worst detection 1.000, worst false alarm 0.000`.
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import multiprocessing
import os
import tempfile
import time

import numpy as np
from flwr.app import Array, ArrayRecord, Context, Message, MetricRecord
from flwr.app import RecordDict
from flwr.clientapp import ClientApp
from flwr.clientapp.mod import fixedclipping_mod
from flwr.serverapp import Grid
from flwr.serverapp.strategy import DifferentialPrivacyClientSideFixedClipping
from flwr.serverapp.strategy import DifferentialPrivacyServerSideAdaptiveClipping
from flwr.serverapp.strategy import DifferentialPrivacyServerSideFixedClipping
from flwr.serverapp.strategy import FedAvg
from flwr.supercore.task_identity import TaskIdentity

import detection_rates
import smoke_mode
from tff_canary.harness.writing import flower_run
from tff_canary.mechanisms.gaussian import flower
from tff_canary.mechanisms.gaussian import flower_clients
from tff_canary.mechanisms.gaussian import flower_planted_bugs as planted
from tff_canary.stats.canaries import canary_config
from tff_canary.stats.canaries import schedules

CLIP, DELTA, UPDATE_SCALE = 1.0, 1e-5, 0.01
# Adaptive clipping's count noise sigma_b: Flower's default n / 20 at
# n = 50, given so that the smoke's n = 10 keeps it (Flower refuses
# 2 sigma_b <= z: Andrew et al. 2021, arXiv 1905.03871, Thm 1's split).
COUNT_STDDEV = 2.5

# cell -> (DP strategy class, server- or client-side, the ClientApp's mod
# present, a planted bug)
CELLS = {
    "correct server fixed": (DifferentialPrivacyServerSideFixedClipping,
                             "server", True, False),
    "correct server adaptive": (DifferentialPrivacyServerSideAdaptiveClipping,
                                "server", True, False),
    "correct client fixed": (DifferentialPrivacyClientSideFixedClipping,
                             "client", True, False),
    "n2": (planted.NoiseOverNSquared, "server", True, True),
    "seed": (planted.SeedEveryRound, "server", True, True),
    "count": (planted.CountWithoutNoise, "server", True, True),
    "nomod": (DifferentialPrivacyClientSideFixedClipping, "client", False,
              True),
}


@contextlib.contextmanager
def server_identity():
  """A ServerApp process's `TaskIdentity`, which FedAvg's configure_train
  reads: Flower's runtime sets it (flwr/superlink/runtime/run_serverapp.py;
  run_simulation a dummy one); set here as there, put back after."""
  names = ("_task_id", "_run_id", "_node_id")
  before = {name: TaskIdentity.__dict__[name] for name in names}
  TaskIdentity.task_id, TaskIdentity.run_id, TaskIdentity.node_id = 1, 1, 0
  try:
    yield
  finally:
    for name, value in before.items():
      setattr(TaskIdentity, name, value)


class AppGrid(Grid):
  """An in-process Grid of `num_nodes` nodes, each answering with
  `app(message, context)` (Flower's call of a ClientApp, its mods
  included), replies in node order (FedAvg sums them in the same order in
  every run). Node k's `node_config` has `partition-id` k - 1, as Flower's
  simulation numbers its nodes (experiments/flower_app's ClientApp reads
  it)."""

  def __init__(self, num_nodes: int, app: ClientApp):
    self._nodes, self._app, self._run = list(range(1, num_nodes + 1)), app, None

  def set_run(self, run) -> None:
    self._run = run

  @property
  def run(self):
    return self._run

  def create_message(self, *args, **kwargs):
    raise NotImplementedError("FedAvg builds its own Messages.")

  def get_node_ids(self):
    return list(self._nodes)

  def push_messages(self, messages):
    raise NotImplementedError("send_and_receive answers in-process.")

  def pull_messages(self, message_ids):
    raise NotImplementedError("send_and_receive answers in-process.")

  def send_and_receive(self, messages, *, timeout=None):
    del timeout  # unused: nothing waits
    replies = []
    for m in sorted(messages, key=lambda m: m.metadata.dst_node_id):
      context = Context(run_id=1, node_id=m.metadata.dst_node_id,
                        node_config={"partition-id":
                                     m.metadata.dst_node_id - 1},
                        state=RecordDict(), run_config={})
      reply = self._app(m, context)
      replies.append(Message(reply.error if reply.has_error()
                             else reply.content, reply_to=m))
    return replies


def train(message: Message, context: Context) -> Message:
  """A user's train function: the model received plus 0.01 N(0, I), drawn
  from (node, round) (its own Generator, not np.random: Flower's noise)."""
  del context  # unused
  record = message.content["arrays"]
  rng = np.random.default_rng([message.metadata.dst_node_id,
                               int(message.content["config"]["server-round"])])
  arrays = {k: Array(a + UPDATE_SCALE * rng.normal(size=a.shape).astype(
      a.dtype)) for k, a in zip(record.keys(), record.to_numpy_ndarrays())}
  return Message(RecordDict({"arrays": ArrayRecord(arrays),
                             "metrics": MetricRecord({"num-examples": 1})}),
                 reply_to=message)


def client_app(side: str, mod: bool) -> ClientApp:
  """The user's ClientApp: server-side clipping needs no mod; client-side
  needs fixedclipping_mod (without it: the planted `nomod` bug)."""
  if side == "client" and not mod:
    return planted.client_app_without_clipping_mod(train)
  app = ClientApp(mods=[fixedclipping_mod] if side == "client" else [])
  app.train()(flower_clients.canary_train()(train) if side == "client"
              else train)
  return app


def strategy(cls, nodes: int, z: float):
  inner = FedAvg(fraction_evaluate=0.0, min_train_nodes=nodes,
                 min_available_nodes=nodes)
  if issubclass(cls, DifferentialPrivacyServerSideAdaptiveClipping):
    return cls(inner, z, nodes, initial_clipping_norm=CLIP,
               clipped_count_stddev=COUNT_STDDEV)
  return cls(inner, z, CLIP, nodes)


def one_run(task):
  """(tool, audit refuted, self-test failed, strongest bound, claim) of one
  seeded run of `cell` (module docstring)."""
  logging.getLogger("flwr").setLevel(logging.ERROR)  # lines per round
  cell, seed, sizes = task
  cls, side, mod, _ = CELLS[cell]
  rounds = sizes["rounds"]
  config = canary_config.CanaryConfig(
      seed=seed, num_inserted=sizes["candidates"] // 2,
      num_held_out=sizes["candidates"] // 2,
      schedule=schedules.ShuffledEpochs(num_rounds=rounds,
                                        rounds_per_epoch=rounds // 2))
  dp = strategy(cls, sizes["nodes"], sizes["z"])
  wrapper = (flower.ServerSideCanaries(dp, config) if side == "server"
             else flower_clients.CanaryClients(dp, config))
  initial = ArrayRecord({"w": Array(np.zeros(sizes["dim"], np.float32))})
  with server_identity(), tempfile.TemporaryDirectory() as tmp:
    np.random.seed(seed)  # Flower's noise: NumPy's global RNG
    result = wrapper.start(AppGrid(sizes["nodes"], client_app(side, mod)),
                           initial, num_rounds=rounds)
    report = flower_run.write_run(os.path.join(tmp, "run"), wrapper, initial,
                                  result.arrays, delta=DELTA, plots=False)
    headline = report.headline()
  refuted = headline.audit_verdict == "refuted"
  failed = headline.noise_check_verdict == "failed"
  return (refuted or failed, refuted, failed, headline.strongest_bound,
          headline.analytical_epsilon)


def _pct(rate):
  return f"{rate[0]:6.1%} ±{rate[1]:4.1%}"


HEADER = (f"{'cell':24} {'claim ε':>7}  {'tool':>13} {'lo':>6} {'hi':>6} "
          f"{'audit':>13} {'self-test':>13}  {'bound':>6}  {'s/run':>5}")


def table(trials, seed, pool, sizes):
  rows = []
  for cell in CELLS:
    start = time.time()
    out = np.array(pool.map(one_run, [(cell, seed + i, sizes)
                                      for i in range(trials)]), dtype=float)
    tool = out[:, 0].astype(bool)
    row = dict(cell=cell, bug=CELLS[cell][3], tool=detection_rates.rate(tool),
               limits=detection_rates.limits(tool), audit=detection_rates.rate(out[:, 1]),
               selftest=detection_rates.rate(out[:, 2]), bound=float(np.median(out[:, 3])),
               claim=out[0, 4], seconds=(time.time() - start) / trials)
    rows.append(row)
    print(f"{cell:24} {row['claim']:7.3f}  {_pct(row['tool'])} "
          f"{row['limits'][0]:6.1%} {row['limits'][1]:6.1%} "
          f"{_pct(row['audit'])} {_pct(row['selftest'])}  "
          f"{row['bound']:6.2f}  {row['seconds']:5.2f}", flush=True)
  return rows


DEFAULT_SIZES = dict(nodes=50, rounds=10, dim=2000, candidates=200, z=1.0)
# --smoke: one run per cell on a small federation.
SMOKE_SIZES = dict(nodes=10, rounds=4, dim=200, candidates=20, z=1.0)


def main(argv=None):
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument("--trials", type=int, default=60)
  parser.add_argument("--workers", type=int, default=1)
  parser.add_argument("--seed", type=int, default=0)
  args = smoke_mode.parse_args(
      parser, argv, dict(trials=1),
      f"one trial per cell on a small federation ({SMOKE_SIZES})")
  sizes = SMOKE_SIZES if args.smoke else DEFAULT_SIZES
  start = time.time()
  print(f"sizes {sizes}; bound = median strongest bound; ε at δ = {DELTA}")
  print(HEADER)
  with multiprocessing.Pool(args.workers) as pool:
    rows = table(args.trials, args.seed, pool, sizes)
  worst_d = min(r["tool"][0] for r in rows if r["bug"])
  worst_f = max(r["tool"][0] for r in rows if not r["bug"])
  print(f"\n{args.trials} trials per cell; {time.time() - start:.0f} s")
  print(f"Flower audit: worst detection {worst_d:.3f}, worst false alarm "
        f"{worst_f:.3f}")


if __name__ == "__main__":
  main()
