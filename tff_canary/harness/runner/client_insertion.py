"""An experiment's rounds in the client-insertion mode (`insertion="clients"`).

The process is `canary_clients.build_canary_client_fedavg` over TFF's own DP
aggregator (`dp_fedavg`). Each round, `ClientRounds.round` reads the clip
C_r from the state before it (`TffMechanism.client_clip`), runs `next` with
the round's scheduled canary clients appended to the sampled ones, takes
the round's aggregate from the weights, a_r = (theta_{r-1} - theta_r) / eta
(`client_round_state.round_aggregate`; in the report's units,
`TffMechanism.client_aggregate`), records per canary what the aggregator
did with it (canary_outcomes.json, with `dp_clipped` = canary_norm > C_r)
and takes what the mechanism records of the round
(`TffMechanism.client_round`). The mode, and what differs from the
server-side one: docs/guide/insertion-modes.md.
"""

from __future__ import annotations

from typing import Any, Optional

import numpy as np

from tff_canary.federated.insertion import canary_client_outcomes
from tff_canary.federated.insertion import canary_clients
from tff_canary.federated.insertion import client_round_state
from tff_canary.harness.config import experiment_config
from tff_canary.harness.recording import run_dir as run_dir_lib
from tff_canary.harness.writing import round_metrics
from tff_canary.harness.runner import training
from tff_canary.mechanisms import protocol_tff
from tff_canary.stats import atomic_files
from tff_canary.stats.canaries import canary_config


def load_outcomes(rd: run_dir_lib.RunDir, done: int) -> list[dict[str, Any]]:
  """canary_outcomes.json's records of rounds before `done` ([] if none)."""
  if not done or not rd.exists(run_dir_lib.CANARY_OUTCOMES):
    return []
  records = atomic_files.read_json(
      rd.file(run_dir_lib.CANARY_OUTCOMES))["outcomes"]
  return [r for r in records if r["round_num"] < done]


class ClientRounds:
  """The rounds of client mode, for `training.train` (module docstring)."""

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
    self.settings = config.mechanism_settings
    self.mechanism = protocol_tff.of(self.settings)

  def round(self, process, state, round_num: int, client_data: list,
            recorder) -> training.RoundResult:
    """Runs one round (module docstring)."""
    ids = canary_clients.scheduled_canary_ids(self.canaries, round_num)
    clip = self.mechanism.client_clip(self.settings, state)
    before = round_metrics.flat_trainable(
        process.get_model_weights(state), finite=False)
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
          before, round_metrics.flat_trainable(process.get_model_weights(
              output.state), finite=False), self.config.server_learning_rate)
      recorder.write(round_num, self.mechanism.client_aggregate(
          self.settings, aggregate, len(client_data) + ids.size))
    norm = self.config.canary_norm
    for outcome in canary_client_outcomes.canary_client_outcomes(
        output.metrics, round_num, ids, self.canaries.seed, norm, self.dim,
        canaries=self.canaries):
      self.outcomes.append(dict(outcome.as_dict(), dp_clip=clip,
                                dp_clipped=bool(norm > clip)))
    event, scores = self.mechanism.client_round(self.settings, output, clip)
    return training.RoundResult(output, clip, inserted, event, scores)

  def save(self, rd: run_dir_lib.RunDir) -> None:
    """canary_outcomes.json: every canary client's outcome so far."""
    atomic_files.write_json(rd.file(run_dir_lib.CANARY_OUTCOMES), dict(
        canary_norm=self.config.canary_norm, outcomes=self.outcomes))


__all__ = ["ClientRounds", "load_outcomes"]
