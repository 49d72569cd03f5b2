"""A run's settings by step: small frozen parts of its checked config.

An `ExperimentConfig` is checked once, at construction; each step of a run
(`tff_canary.harness.runner.experiment`) takes the part it reads, made from
the config by a named constructor (`DataSettings.of`), rather than the whole
config: what it is given is what it depends on, and it checks nothing again
(the public functions under it, called with raw arguments, still check
theirs).
"""

from __future__ import annotations

import dataclasses
import os
from typing import Optional

from tff_canary.harness.config import experiment_config


@dataclasses.dataclass(frozen=True)
class DataSettings:
  """What the run's data and task are built from
  (`tff_canary.harness.data.datasets.load`, `tasks.build`).

  Attributes:
    task: "emnist" or "stackoverflow".
    source: "synthetic" or "tff" (the config's `data`).
    cache_dir: Where TFF's data files are (`~/.tff` by default).
    vocab_path: StackOverflow's word-count file, or None (in `cache_dir`).
    num_clients: The synthetic clients (derived when the config has none,
      `experiment_config.default_num_clients`); None with TFF's data.
    examples_per_client: Examples (EMNIST) or sentences (StackOverflow) of
      a synthetic client.
    seed: The synthetic data's seed.
    batch_size: The clients' batch size.
    client_epochs: The clients' local epochs.
  """

  task: str
  source: str
  cache_dir: str
  vocab_path: Optional[str]
  num_clients: Optional[int]
  examples_per_client: int
  seed: int
  batch_size: int
  client_epochs: int

  @classmethod
  def of(cls, config: experiment_config.ExperimentConfig) -> DataSettings:
    """The data settings of `config` (checked at its construction)."""
    synthetic = config.data == "synthetic"
    return cls(
        task=config.task, source=config.data,
        cache_dir=(config.cache_dir
                   or os.path.join(os.path.expanduser("~"), ".tff")),
        vocab_path=config.vocab_path,
        num_clients=((config.num_clients
                      or experiment_config.default_num_clients(config))
                     if synthetic else None),
        examples_per_client=config.examples_per_client, seed=config.seed,
        batch_size=config.batch_size, client_epochs=config.client_epochs)
