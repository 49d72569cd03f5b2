"""An experiment's rounds in the client-insertion mode (`insertion="clients"`).

The process is `canary_clients.build_canary_client_fedavg` over TFF's own DP
aggregator (`dp_fedavg`). Each round, `ClientRounds.round`:

  1. reads the clip C_r this round uses from the state before it
     (`client_round_state.query_clip`) and theta_{r-1};
  2. appends the round's scheduled canary clients to the sampled clients
     (`canary_clients.scheduled_canary_ids`, `with_canary_clients`: the
     server-side mode's schedule) and runs `next`; the client work's
     `canary_clients` count must equal the canaries scheduled;
  3. takes the round's aggregate from the weights, a_r = (theta_{r-1} -
     theta_r) / eta (`client_round_state.round_aggregate`, exact for server
     SGD without momentum, which the config demands), into the same
     recorder as the server-side mode's noised aggregate (gaussian canaries;
     orthogonal canary clients are scored in the round by the process);
  4. records per canary what the aggregator did with it
     (`canary_client_outcomes`: zeroing and clipping stages from TFF's
     measurements; a zeroed canary is a finding) plus the DP query's own
     clip from the state (`dp_clip`, `dp_clipped` = canary_norm > C_r), kept
     in canary_outcomes.json (written at each checkpoint, cut back on
     resume);
  5. takes the round's DpEvent from TFF's factory state
     (`client_round_state.dp_event`) for the ledger.

With `aggregator="ddp"` (TFF's distributed-DP chain, `dp_fedavg`) three
things differ. The clip C_r is the run's fixed `clip`, the chain's L2
clip before rounding (its query's norm bounds are in the rounded integer
domain). There is no DpEvent (TFF's DDP queries emit none): the round
gives None and the run has no ledger; its analytical epsilon is the DDP
bound of the factory's parameters (`ddp_claim`). And the chain's mean
(`UnweightedMeanFactory`, as TFF's DDP aggregator) divides the sum by the
clients that took part, canary clients included, not by
`clients_per_round`: the aggregate recorded is rescaled to the sum /
clients_per_round (a_r x participants / clients_per_round), the same
quantity as the Gaussian modes record; a round's cosines do not change with
its scale.
"""

from __future__ import annotations

import json
from typing import Any, Optional

import numpy as np

from tff_canary.federated.insertion import canary_client_outcomes
from tff_canary.federated.insertion import canary_clients
from tff_canary.federated.insertion import client_round_state
from tff_canary.harness import experiment_config
from tff_canary.harness import run_dir as run_dir_lib
from tff_canary.harness import tasks
from tff_canary.stats import atomic_files
from tff_canary.stats.canaries import canary_config


def load_outcomes(rd: run_dir_lib.RunDir, done: int) -> list[dict[str, Any]]:
  """canary_outcomes.json's records of rounds before `done` ([] if none)."""
  if not done or not rd.exists(run_dir_lib.CANARY_OUTCOMES):
    return []
  with open(rd.file(run_dir_lib.CANARY_OUTCOMES), encoding="utf-8") as f:
    records = json.load(f)["outcomes"]
  return [r for r in records if r["round_num"] < done]


class ClientRounds:
  """The client-mode side of `training.train` (module docstring)."""

  def __init__(self, config: experiment_config.ExperimentConfig,
               canaries: canary_config.CanaryConfig, dim: int,
               outcomes: Optional[list[dict[str, Any]]] = None):
    if config.insertion != "clients":
      raise ValueError(f"ClientRounds is for insertion='clients', got "
                       f"{config.insertion!r}.")
    self.config = config
    self.canaries = canaries
    self.dim = dim
    self.outcomes = list(outcomes or [])

  def round(self, process, state, round_num: int, client_data: list,
            recorder) -> tuple[Any, float, int, Any]:
    """Runs one round; returns (output, C_r, canaries inserted, DpEvent or
    None with the DDP aggregator)."""
    ids = canary_clients.scheduled_canary_ids(self.canaries, round_num)
    ddp = self.config.aggregator == "ddp"
    clip = (float(self.config.clip) if ddp
            else client_round_state.query_clip(state))
    before = tasks.flat_trainable(process.get_model_weights(state))
    output = process.next(state, canary_clients.with_canary_clients(
        client_data, ids, self.canaries))
    inserted = int(np.asarray(
        output.metrics["client_work"][canary_clients.MEASUREMENT_KEY]))
    if inserted != ids.size:
      raise ValueError(f"round {round_num}: the client work counted "
                       f"{inserted} canary clients, the schedule has "
                       f"{ids.size}.")
    if recorder is not None:
      aggregate = client_round_state.round_aggregate(
          before, tasks.flat_trainable(process.get_model_weights(
              output.state)), self.config.server_learning_rate)
      if ddp:  # the mean of all participants -> sum / clients_per_round
        aggregate = aggregate * np.float32(
            (len(client_data) + ids.size) / self.config.clients_per_round)
      recorder.write(round_num, aggregate)
    norm = self.config.canary_norm
    for outcome in canary_client_outcomes.canary_client_outcomes(
        output.metrics, round_num, ids, self.canaries.seed, norm, self.dim,
        canaries=self.canaries):
      self.outcomes.append(dict(outcome.as_dict(), dp_clip=clip,
                                dp_clipped=bool(norm > clip)))
    event = None if ddp else client_round_state.dp_event(output.state)
    return output, clip, inserted, event

  def save(self, rd: run_dir_lib.RunDir) -> None:
    """canary_outcomes.json: every canary client's outcome so far."""
    atomic_files.write_json(rd.file(run_dir_lib.CANARY_OUTCOMES), dict(
        canary_norm=self.config.canary_norm, outcomes=self.outcomes))


__all__ = ["ClientRounds", "load_outcomes"]
