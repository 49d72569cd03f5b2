"""DP-FedAvg's Gaussian mechanism: central Gaussian noise (the default).

tensorflow_privacy's Gaussian sum query (TFF's `DifferentiallyPrivateFactory`
or this package's `CanaryDPFactory`), fixed or adaptive clipping (Andrew et
al. 2021), with TFF's zeroing if asked. Every round emits its `DpEvent`
(ledger.json), and the claim is the ledger's (docs/method/accounting.md).
Its TFF half is `tff_canary.mechanisms.gaussian.tff`.
"""

from __future__ import annotations

import dataclasses

from tff_canary.mechanisms import protocol
from tff_canary.mechanisms.cosine import spec as cosine_spec


@dataclasses.dataclass(frozen=True)
class GaussianMechanism(cosine_spec.CosineMechanism):
  """DP-FedAvg with Gaussian noise: every default of `protocol.Mechanism` and
  the cosine family's section."""

  name = "gaussian"
  help = ("DP-FedAvg's central Gaussian noise, at a fixed --clip or with "
          "adaptive clipping, --zeroing if asked; its analytical ε is the "
          "DpEvent ledger's.")
  # The paper's EMNIST noise levels (Table 3) and no noise; adaptive clip.
  sweep = protocol.SweepDefaults(("0", "0.0487", "0.0958", "0.2207"),
                                 ("0", "0.1"))


MECHANISM = GaussianMechanism()
