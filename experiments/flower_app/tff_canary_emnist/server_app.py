"""The ServerApp: Flower's DP-FedAvg with tff-canary's canaries, then the headline.

The main job of experiments/emnist.py on Flower: the EMNIST CNN (task.py)
on the synthetic EMNIST (synthetic.py) or TFF's EMNIST files, trained with
`DifferentialPrivacyServerSideFixedClipping(FedAvg(...))` (or, with
`clipping = "adaptive"`, `...ServerSideAdaptiveClipping`) wrapped in
`tff_canary.mechanisms.gaussian.flower.ServerSideCanaries`; after the run
`flower_run.write_run` writes the run directory (`python -m tff_canary
report DIR` reads it) and the headline is printed as the TFF scripts print
it (experiments/experiment_cli.py: `RunReport.terminal_text()`, then the
report's path).

Settings: the run config (`[tool.flwr.app.config]` of pyproject.toml,
`flwr run . --run-config "key=value ..."`); `settings` fills what a run
config lacks from pyproject.toml's defaults (`flwr.simulation.
run_simulation` passes none). The population is the federation's nodes
(`options.num-supernodes`), delta = population^-1.1 as in the TFF runs.

Flower draws its DP noise from NumPy's global RNG; by default the app does
not seed it (seeding it makes the noise known to anyone who knows the seed,
issue 36), so two runs differ in their noise. `noise-seed = s` (s >= 0,
for simulations only: it gives no DP against anyone who knows s) calls
`np.random.seed(s)` before the first round and puts NumPy's global state
back after the run, and the report's noise self-test says the run was
seeded (`flower_noise_check.seeded_note`). With it, and every node sampled
each round (`clients-per-round` = the federation's nodes: FedAvg samples
with Python's `random` over node IDs that Flower draws afresh per run), a
simulation's report is the same on any number of Ray workers: a writer's
update depends only on (seed, round, partition-id) (client_app.py), and
the replies are aggregated in writer order (`InWriterOrder`), not in the
order the workers return them (float sums depend on the order).
"""

from __future__ import annotations

import dataclasses
import os
import pathlib
import time
import tomllib

import numpy as np

from flwr.app import ArrayRecord, ConfigRecord, Context, MetricRecord
from flwr.serverapp import Grid, ServerApp
from flwr.serverapp.strategy import DifferentialPrivacyServerSideAdaptiveClipping
from flwr.serverapp.strategy import DifferentialPrivacyServerSideFixedClipping
from flwr.serverapp.strategy import FedAvg

from tff_canary.harness.recording import run_dir
from tff_canary.harness.writing import flower_run
from tff_canary.mechanisms.gaussian import flower
from tff_canary.mechanisms.gaussian import flower_noise_check
from tff_canary.stats import validation
from tff_canary.stats.canaries import canary_config
from tff_canary.stats.canaries import schedules

from tff_canary_emnist import client_app
from tff_canary_emnist import emnist_files
from tff_canary_emnist import synthetic
from tff_canary_emnist import task

PYPROJECT = pathlib.Path(__file__).resolve().parent.parent / "pyproject.toml"
CLIPPINGS = ("fixed", "adaptive")
DATA = ("synthetic", "tff")
# What the ClientApps are told each round (the rest is the server's).
CLIENT_KEYS = ("data", "data-dir", "seed", "examples-per-client",
               "batch-size", "client-epochs", "client-learning-rate")


def defaults() -> dict:
  """pyproject.toml's `[tool.flwr.app.config]`."""
  with open(PYPROJECT, "rb") as f:
    return dict(tomllib.load(f)["tool"]["flwr"]["app"]["config"])


def settings(run_config) -> dict:
  """The run's settings: the run config over pyproject.toml's defaults,
  checked (each message names the key and the value)."""
  given = dict(run_config)
  values = defaults()
  unknown = sorted(set(given) - set(values))
  if unknown:
    raise ValueError(f"run config has unknown keys {unknown}; known: "
                     f"{sorted(values)}.")
  values.update(given)
  v = validation
  for key in ("num-server-rounds", "clients-per-round", "examples-per-client",
              "batch-size", "client-epochs", "num-test-clients"):
    values[key] = v.as_int(values[key], key, minimum=1)
  for key in ("num-inserted", "num-held-out", "seed", "eval-every"):
    values[key] = v.as_int(values[key], key, minimum=0)
  values["noise-seed"] = v.as_int(values["noise-seed"], "noise-seed",
                                  minimum=-1)
  values["noise-multiplier"] = v.as_nonnegative(values["noise-multiplier"],
                                                "noise-multiplier")
  for key in ("clip", "client-learning-rate", "clip-learning-rate"):
    values[key] = v.as_positive(values[key], key)
  values["target-clipped-quantile"] = v.as_unit_interval(
      values["target-clipped-quantile"], "target-clipped-quantile")
  values["clipping"] = v.as_choice(values["clipping"], "clipping", CLIPPINGS)
  values["data"] = v.as_choice(values["data"], "data", DATA)
  values["model-size"] = v.as_choice(values["model-size"], "model-size",
                                     tuple(task.MODEL_SIZES))
  values["plots"] = v.as_bool(values["plots"], "plots")
  return values


def dp_strategy(s: dict, num_nodes: int):
  """Flower's server-side DP strategy around FedAvg, as the settings say."""
  n = s["clients-per-round"]
  if n > num_nodes:
    raise ValueError(f"clients-per-round must be at most the federation's "
                     f"{num_nodes} nodes, got {n}.")
  fedavg = FedAvg(fraction_train=n / num_nodes, fraction_evaluate=0.0,
                  min_train_nodes=n, min_available_nodes=n,
                  weighted_by_key=client_app.WEIGHT_KEY)
  if s["clipping"] == "fixed":
    return DifferentialPrivacyServerSideFixedClipping(
        fedavg, noise_multiplier=s["noise-multiplier"], clipping_norm=s["clip"],
        num_sampled_clients=n)
  return DifferentialPrivacyServerSideAdaptiveClipping(
      fedavg, noise_multiplier=s["noise-multiplier"], num_sampled_clients=n,
      initial_clipping_norm=s["clip"],
      target_clipped_quantile=s["target-clipped-quantile"],
      clip_norm_lr=s["clip-learning-rate"])


class InWriterOrder(flower.ServerSideCanaries):
  """`ServerSideCanaries` that hands Flower the round's replies sorted by
  the writer (the reply's `client_app.WRITER_KEY` record) instead of in
  the order the ClientApps finished: FedAvg sums them in the order given,
  and float sums depend on it (module docstring)."""

  def aggregate_train(self, server_round, replies):
    return super().aggregate_train(server_round,
                                   sorted(replies, key=client_app.writer_of))


def test_data(s: dict, num_nodes: int) -> dict:
  """The held-out writers: synthetic writers after the population's (as the
  TFF runs' test clients), or the TFF test file's first ones."""
  count = s["num-test-clients"]
  if s["data"] == "tff":
    data = emnist_files.EmnistFile(os.path.join(s["data-dir"],
                                                emnist_files.TEST_FILE))
    parts = [data.client(i) for i in range(min(count, len(data)))]
  else:
    parts = [synthetic.client(s["seed"], num_nodes + i,
                              s["examples-per-client"]) for i in range(count)]
  return {k: np.concatenate([p[k] for p in parts]) for k in
          ("pixels", "label")}


def wait_for_nodes(grid: Grid, minimum: int, timeout: float = 120.0,
                   poll: float = 0.5) -> int:
  """The federation's number of nodes, once at least `minimum` have
  registered and the count held for one poll (`run_simulation` starts the
  ServerApp while its nodes register); TimeoutError after `timeout` s."""
  deadline = time.monotonic() + timeout
  before = -1
  while True:
    count = len(list(grid.get_node_ids()))
    if count >= minimum and count == before:
      return count
    if time.monotonic() > deadline:
      raise TimeoutError(f"clients-per-round is {minimum}, but only {count} "
                         f"nodes registered in {timeout:g} s.")
    before = count
    time.sleep(poll)


def run(grid: Grid, s: dict) -> dict:
  """Trains, writes the run directory, prints the headline; returns what
  it kept (strategy, result, report)."""
  num_nodes = wait_for_nodes(grid, s["clients-per-round"])
  canaries = canary_config.CanaryConfig(
      seed=s["seed"], num_inserted=s["num-inserted"],
      num_held_out=s["num-held-out"],
      schedule=schedules.ShuffledEpochs(s["num-server-rounds"],
                                        s["num-server-rounds"]))
  strategy = InWriterOrder(dp_strategy(s, num_nodes), canaries)
  initial = task.to_record(task.initial_params(s["seed"], s["model-size"]))
  held_out = test_data(s, num_nodes)
  accuracy = {}

  def evaluate(server_round: int, arrays: ArrayRecord) -> MetricRecord:
    last = server_round == s["num-server-rounds"]
    every = s["eval-every"]
    if not (last or every and server_round % every == 0):
      return MetricRecord({})
    accuracy[server_round] = task.evaluate(task.from_record(arrays), held_out)
    return MetricRecord(accuracy[server_round])

  config = ConfigRecord({k: s[k] for k in CLIENT_KEYS})
  noise_seed = s["noise-seed"] if s["noise-seed"] >= 0 else None
  state = np.random.get_state()
  try:
    if noise_seed is not None:
      np.random.seed(noise_seed)  # module docstring: simulations only
    result = strategy.start(grid, initial, num_rounds=s["num-server-rounds"],
                            train_config=config, evaluate_fn=evaluate)
  finally:
    if noise_seed is not None:  # the process's RNG is not left known
      np.random.set_state(state)
  check = flower_noise_check.check_flower_noise(strategy, initial)
  output_dir = os.path.abspath(s["output-dir"])
  report = flower_run.write_run(
      output_dir, strategy, initial, result.arrays, num_clients=num_nodes,
      task="emnist", seed=s["seed"], plots=s["plots"],
      noise_check=dataclasses.replace(check, noise_seed=noise_seed))
  final = accuracy.get(s["num-server-rounds"])
  print()
  print(report.terminal_text())
  if final is not None:
    print(f"\ntest accuracy {final['accuracy']:.4f} (loss "
          f"{final['loss']:.4f}) on {held_out['label'].shape[0]} held-out "
          "examples")
  print(f"\nreport: {os.path.join(report.run_dir, run_dir.REPORT_MD)}",
        flush=True)
  return dict(strategy=strategy, result=result, report=report,
              accuracy=accuracy)


def make_app(overrides: dict | None = None) -> ServerApp:
  """A ServerApp whose settings are the run config, then `overrides` (for
  `run_simulation`, which passes no run config)."""
  server = ServerApp()

  @server.main()
  def main(grid: Grid, context: Context) -> None:
    run(grid, settings({**dict(context.run_config), **(overrides or {})}))

  return server


app = make_app()

__all__ = ["CLIENT_KEYS", "InWriterOrder", "app", "defaults", "dp_strategy", "make_app", "run",
           "settings", "test_data", "wait_for_nodes"]
