"""What a training loop tells a `RunWriter` about itself, and config.json.

A `run_writer.RunWriter` derives what it can from the learning process;
`LoopSettings` holds, checked, what only the loop's author knows (delta,
the population, how clients are sampled, a name), and `config` writes them
with the derived values as the config.json the report reads
(`run_dir.REQUIRED_CONFIG`).
"""

from __future__ import annotations

import dataclasses
from typing import Any, Optional

import tensorflow as tf
import tensorflow_federated as tff

import tff_canary
from tff_canary.stats.canaries import canary_config
from tff_canary.stats.accounting import ledger as ledger_lib
from tff_canary.stats.canaries import client_sampling
from tff_canary.stats import validation


@dataclasses.dataclass(frozen=True)
class LoopSettings:
  """What a loop tells its `RunWriter` (checked at construction).

  Attributes:
    delta: Delta of every epsilon; default num_clients^-1.1 (the paper's),
      so one of the two is needed.
    num_clients: The population size, if known (config.json; the report's
      Poisson epsilon with `sampling="per_round"`).
    sampling: How the loop samples clients, if it is one of
      `client_sampling.SAMPLINGS`: "per_round" (Poisson at rate
      clients_per_round / num_clients) adds the clients' amplified epsilon
      to the report, audited only when the canaries are Poisson-sampled at
      that rate too (`canary_claim`, docs/guide/drop-in.md); None says
      nothing.
    clients_per_round: The factory's; derived from the aggregator state when
      its query is a `tfp.NormalizedQuery` (TFF's and this package's
      constructors), and checked against it if given.
    task: A name for the report's title.
    seed: The loop's seed, if any (config.json only).
  """

  delta: Optional[float] = None
  num_clients: Optional[int] = None
  sampling: Optional[str] = None
  clients_per_round: Optional[float] = None
  task: str = "custom"
  seed: Optional[int] = None

  def __post_init__(self):
    v = validation
    num_clients = self.num_clients
    if num_clients is not None:
      num_clients = v.as_int(num_clients, "num_clients", minimum=1)
    if self.sampling is not None:
      v.as_choice(self.sampling, "sampling", client_sampling.SAMPLINGS)
    if self.sampling == "per_round" and num_clients is None:
      raise ValueError("sampling='per_round' needs num_clients (the Poisson "
                       "rate is clients_per_round / num_clients).")
    if self.delta is None and num_clients is None:
      raise ValueError("give delta, or num_clients for the default delta = "
                       "num_clients^-1.1; got neither.")
    delta = v.as_open_unit(
        num_clients ** -1.1 if self.delta is None else self.delta, "delta")
    if self.clients_per_round is not None:
      object.__setattr__(self, "clients_per_round", v.as_positive(
          self.clients_per_round, "clients_per_round"))
    if not isinstance(self.task, str) or not self.task:
      raise TypeError(f"task must be a non-empty str, got "
                      f"{v.show(self.task)}.")
    if self.seed is not None:
      object.__setattr__(self, "seed", v.as_int(self.seed, "seed", minimum=0))
    object.__setattr__(self, "num_clients", num_clients)
    object.__setattr__(self, "delta", delta)

  def resolve_clients_per_round(self, derived: Optional[float]) -> float:
    """The run's clients_per_round from the state's (`derived`) and ours
    (an int when whole, as the experiments write it)."""
    given = self.clients_per_round
    if derived is None and given is None:
      raise ValueError("clients_per_round: the aggregator's query has no "
                       "denominator to read it from; pass clients_per_round "
                       "to the RunWriter.")
    if derived is not None and given is not None and derived != given:
      raise ValueError(f"clients_per_round = {given} but the aggregator "
                       f"state's query divides by {derived}.")
    value = derived if derived is not None else given
    return int(value) if float(value).is_integer() else value

  def config(self, canaries: canary_config.CanaryConfig, dim: int,
             ledger: ledger_lib.Ledger, clients_per_round: float,
             output_dir: str) -> dict[str, Any]:
    """config.json: these settings and what the writer derived.

    The noise multiplier is the ledger's effective one (a list if the
    rounds differ), to float32's 7 significant digits (the state's
    precision).
    """
    multipliers = sorted({float(f"{z:.7g}") for z in ledger.noise_multipliers})
    return dict(
        dataclasses.asdict(self), data="user", writer="RunWriter",
        canary_seed=canaries.seed, dim=dim,
        noise_multiplier=(multipliers[0] if len(multipliers) == 1
                          else multipliers),
        clients_per_round=clients_per_round,
        num_rounds=canaries.num_rounds, num_inserted=canaries.num_inserted,
        num_held_out=canaries.num_held_out, assignment=canaries.assignment,
        directions=canaries.directions,
        schedule=repr(canaries.schedule),
        record_aggregates=canaries.record_aggregates, output_dir=output_dir,
        versions=versions())


def versions() -> dict[str, str]:
  """config.json's `versions`: TensorFlow's, TFF's and this package's."""
  return {"tensorflow": tf.__version__,
          "tensorflow_federated": tff.__version__,
          "tff_canary": tff_canary.__version__}


__all__ = ["LoopSettings", "versions"]
