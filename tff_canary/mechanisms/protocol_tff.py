"""What a DP mechanism tells the runner: the TFF half of its protocol.

A mechanism's package (`registry.MECHANISMS`) holds its TFF half in its
`tff` module, whose `TFF_MECHANISM` is a `TffMechanism` (`registry.half`);
`of(settings)` loads the run's. The runner asks it, never the
mechanism's name, for what each of `TffMechanism`'s methods says: the
run's aggregator (`aggregator`: with server-side canaries or TFF's own,
which canary clients go through), the noise self-test, what a round
records, what canary-client rounds read and its planted DP bugs. Each
method takes the run's `protocol.MechanismSettings`
(`ExperimentConfig.mechanism_settings`), not the experiment's config. The
defaults are DP-FedAvg's (`gaussian_tff`); a mechanism overrides what
differs.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Optional

import numpy as np
import tensorflow_federated as tff

from tff_canary.federated.audit import noise_check as noise_check_lib
from tff_canary.federated.insertion import canary_process
from tff_canary.federated.insertion import client_round_state
from tff_canary.federated.insertion import factory
from tff_canary.mechanisms import registry

# The noise check draws from its own seed: the run's noise seed + this tag
# (the canary aggregator's own, `CanaryDPFactory.without_canaries`).
NOISE_CHECK_TAG = factory.NOISE_CHECK_SEED_TAG


@dataclasses.dataclass(frozen=True)
class NoiseCheckInputs:
  """What every noise self-test is built from.

  Attributes:
    value_type: The TFF type of the model's trainable weights (the values).
    dim: Their number of parameters, d.
    tensor_names: Their names, for the per-tensor tests (None if ambiguous).
    no_canaries: A `CanaryConfig` without canaries.
    seed: The check's own noise seed (None: unseeded).
    rounds_per_epoch: The client sampler's epoch length.
  """

  value_type: Any
  dim: int
  tensor_names: Optional[list[str]]
  no_canaries: Any
  seed: Optional[int]
  rounds_per_epoch: Optional[int]


class TffMechanism:
  """The TFF half of a DP mechanism (module docstring)."""

  # How canary clients are scored around TFF's aggregator
  # (`CanaryScoringFactory`'s `scores`).
  client_scores = "cosines"

  def aggregator(self, settings, canaries, noise_seed: Optional[int],
                 value_type, dim: int,
                 rounds_per_epoch: Optional[int] = None):
    """The run's aggregator for a model whose trainable weights have TFF
    type `value_type` and `dim` parameters: with canary clients
    (`settings.insertion == "clients"`) TFF's own (`tff_aggregator`, which
    they go through), else this package's with server-side `canaries`
    (`canary_aggregator`, its noise from `noise_seed`)."""
    if settings.insertion == "clients":
      return self.tff_aggregator(settings, value_type, dim, rounds_per_epoch)
    return self.canary_aggregator(settings, canaries, noise_seed,
                                  rounds_per_epoch)

  def canary_aggregator(self, settings, canaries, noise_seed: Optional[int],
                        rounds_per_epoch: Optional[int] = None):
    """The run's aggregator with server-side `canaries`."""
    raise NotImplementedError(
        f"aggregator={settings.aggregator!r} has no server-side canaries.")

  def tff_aggregator(self, settings, value_type, dim: int,
                     rounds_per_epoch: Optional[int] = None):
    """TFF's own aggregator of the run's settings, no canaries, for a model
    whose trainable weights have TFF type `value_type` and `dim`
    parameters."""
    raise NotImplementedError

  def noise_check(self, settings, inputs: NoiseCheckInputs):
    """The noise self-test of the run's aggregator without canaries
    (`aggregator`: server-side this package's, with canary clients TFF's
    own, unseeded)."""
    aggregator = self.aggregator(settings, inputs.no_canaries, inputs.seed,
                                 inputs.value_type, inputs.dim,
                                 inputs.rounds_per_epoch)
    return noise_check_lib.check_aggregation_noise(
        aggregator, inputs.value_type, tensor_names=inputs.tensor_names)

  def server_round(self, output, measurements: dict[str, Any]
                   ) -> tuple[Any, Optional[np.ndarray]]:
    """(the round's `DpEvent` or None, its canaries' scores or None) of a
    server-side round: its `output` and the canary aggregator's
    `measurements`. DP-FedAvg's: the canary aggregator's DpEvent."""
    return (tff.aggregators.differential_privacy.extract_dp_event_from_state(
        canary_process.state_in(output.state)), None)

  def client_round(self, settings, output, clip: float
                   ) -> tuple[Any, Optional[np.ndarray]]:
    """The same for a canary-client round through TFF's aggregator, whose
    DP query clipped at `clip`. DP-FedAvg's: TFF's DpEvent."""
    return client_round_state.dp_event(output.state), None

  def client_clip(self, settings, state) -> float:
    """The clip the DP query applies in the round after `state`."""
    return client_round_state.query_clip(state)

  def client_aggregate(self, settings, aggregate: np.ndarray,
                       participants: int) -> np.ndarray:
    """A canary-client round's recorded aggregate, read from the model
    weights (the query's noised mean), in the units of the report."""
    return aggregate

  def planted_bugs(self):
    """Its planted bugs (a `planted_runs.PlantedBugs`): the `PLANTED_BUGS` of
    the `planted` module beside this half in its package (imported when
    asked: it builds on this half), or None when the package has none."""
    planted = registry.module_if_any(
        type(self).__module__.rpartition(".")[0], "planted")
    return None if planted is None else planted.PLANTED_BUGS


def named(name: str) -> TffMechanism:
  """The TFF half of registered mechanism `name` (`registry.half`)."""
  return registry.half(name, "tff")


def of(settings) -> TffMechanism:
  """The TFF half of the mechanism of `settings` (`protocol.
  MechanismSettings`, or an `ExperimentConfig`: its `aggregator`;
  `registry.half`)."""
  return named(settings.aggregator)


def trainable_type(model_fn):
  """The TFF type of the trainable weights of `model_fn`'s model."""
  return tff.learning.models.weights_type_from_model(model_fn).trainable


__all__ = ["NOISE_CHECK_TAG", "NoiseCheckInputs", "TffMechanism", "named",
           "of", "trainable_type"]
