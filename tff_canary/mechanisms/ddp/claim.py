"""The analytical epsilon of a run with the DDP aggregator (NumPy only).

TFF's distributed-DP queries emit no DpEvent (`TODO: b/221465205` in TFF's
`DistributedDpSumFactory`), so a DDP run has no ledger; its analytical
reference (docs/method/accounting.md, "Distributed DP") is
`ddp_accounting.ddp_epsilon` of the factory's own parameters as config.json
records them (`parameters`) over r participations composed in RDP: Agarwal,
Kairouz & Liu 2021 (arXiv 2110.04995) Theorem 3.5 for distributed Skellam,
Kairouz, Liu & Steinke 2021 (arXiv 2102.06387) Proposition 14 for the
distributed discrete Gaussian, converted to (epsilon, delta) by Canonne,
Kamath & Steinke 2020 Proposition 12.

`analytical` names them as the Gaussian ledger's are ("one participation",
"<r> participations"), so the report treats them alike. Subsampling is not
modelled (no "Poisson sampling" entry): the adversary knows the rounds a
client took part in. The bound assumes all `clients_per_round` noise shares
are added and every client is clipped at C; canary clients add their own
shares on top (more noise than the claim counts).
"""

from __future__ import annotations

import dataclasses
import types
from typing import Any, Optional

import numpy as np

from tff_canary.mechanisms import records as records_lib
from tff_canary.stats.accounting import ddp_accounting
from tff_canary.stats.accounting import ddp_parameters

_KEYS = ("noise_multiplier", "clients_per_round", "ddp_bits", "clip", "dim",
         "ddp_beta", "ddp_mechanism", "ddp_rotation")


def parameters_of(spec, dim: int, bits: Optional[int] = None,
                  clip: Optional[float] = None) -> ddp_parameters.DdpParameters:
  """What the DDP factory derives for a run `spec` (its noise_multiplier,
  clients_per_round, clip and `ddp_*` settings as attributes: an
  `ExperimentConfig`) and `dim` trainable parameters; `bits`, `clip`: other
  values than the spec's. The runner's factory and the report's bound are
  both built from this."""
  return ddp_parameters.ddp_parameters(
      spec.noise_multiplier, spec.clients_per_round,
      spec.ddp_bits if bits is None else bits,
      spec.clip if clip is None else clip, dim, beta=spec.ddp_beta,
      mechanism=spec.ddp_mechanism, rotation=spec.ddp_rotation)


def parameters(config: dict[str, Any]) -> ddp_parameters.DdpParameters:
  """What the run's DDP factory derived (config.json `config`, with dim,
  read by `parameters_of`); `records.RunDirError` naming the keys a DDP
  run's config.json lacks."""
  missing = [k for k in _KEYS if config.get(k) is None]
  if missing:
    raise records_lib.RunDirError(
        f"config.json of a run with aggregator='ddp' lacks {missing}.")
  return parameters_of(types.SimpleNamespace(**config), config["dim"])


def describe_chain(config: dict[str, Any]) -> str:
  """e.g. "distributed_skellam, 20 bits, dft rotation, clip 1"."""
  beta = f", beta {config['ddp_beta']:g}" if config["ddp_beta"] else ""
  return (f"{config['ddp_mechanism']}, {config['ddp_bits']} bits, "
          f"{config['ddp_rotation']} rotation, clip {config['clip']:g}"
          f"{beta}")


@dataclasses.dataclass(frozen=True)
class DdpClaim:
  """The DDP bounds behind a report's analytical epsilons.

  Attributes:
    epsilons: analytical name ("one participation", ...) -> its
      `ddp_accounting.DdpEpsilon` (parameters, delta, theorem, order).
  """

  epsilons: dict[str, ddp_accounting.DdpEpsilon]

  def row_name(self, name: str) -> str:
    return f"analytical DDP bound: {name}"

  def detail(self, name: str) -> str:
    e = self.epsilons[name]
    p = e.parameters
    return (f"DDP bound of the factory's parameters (no DpEvent): {e.bound},"
            f" {e.participations} participation(s) composed in RDP, order "
            f"{e.order:.4g}, {ddp_accounting.CONVERSION}; valid if all "
            f"{e.num_shares} noise shares are added and every client is "
            f"clipped at C = {p.l2_clip:g} (rounding inflates the L2 "
            f"sensitivity to {p.inflated_l2 / p.l2_clip:.4g} C); nominal "
            f"central-Gaussian ε {e.nominal_epsilon:.4g}")

  def as_dict(self) -> dict[str, Any]:
    return {name: e.as_dict() for name, e in self.epsilons.items()}


def analytical(config: dict[str, Any], events: np.ndarray, delta: float
               ) -> tuple[dict[str, float], int, DdpClaim]:
  """(analytical epsilons by name, the largest canary participation, the
  claim behind them) of a DDP run (module docstring): config.json's values
  `config`, participation.npz's (round, canary id) `events`, delta in (0, 1).
  """
  params = parameters(config)
  epsilons = {"one participation": ddp_accounting.ddp_epsilon(
      params, delta=delta)}
  max_participation = 0
  events = np.asarray(events)
  if events.size:
    _, counts = np.unique(events[:, 1], return_counts=True)
    max_participation = int(counts.max())
    if max_participation > 1:
      epsilons[f"{max_participation} participations"] = (
          ddp_accounting.ddp_epsilon(params, delta=delta,
                                     participations=max_participation))
  return ({k: e.epsilon for k, e in epsilons.items()}, max_participation,
          DdpClaim(epsilons))


__all__ = ["DdpClaim", "analytical",
           "describe_chain", "parameters", "parameters_of"]
