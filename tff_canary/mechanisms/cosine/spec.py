"""The cosine family's NumPy half: mechanisms audited by a cosine table.

DP-FedAvg's Gaussian mechanism and TFF's distributed DP record a `DpEvent`
ledger (their claim, `protocol.Mechanism.claim`'s default) and score their
canaries by cosines, on the final model and on every iterate
(docs/method/estimates.md); their report section is the cosine table's
(`tff_canary.mechanisms.cosine.report`). A mechanism of the family
subclasses `CosineMechanism` instead of `protocol.Mechanism`.
"""

from __future__ import annotations

import dataclasses
from typing import Optional

from tff_canary.mechanisms import protocol


@dataclasses.dataclass(frozen=True)
class CosineMechanism(protocol.Mechanism):
  """A mechanism audited by a cosine table (module docstring)."""

  def report_section(self, records, *, delta: float, confidence: float,
                     claimed_epsilon: Optional[float]):
    """The cosine table's section (`tff_canary.mechanisms.cosine.report.
    build`)."""
    from tff_canary.mechanisms.cosine import report  # pylint: disable=g-import-not-at-top
    return report.build(records, delta=delta, confidence=confidence,
                        claimed_epsilon=claimed_epsilon)


__all__ = ["CosineMechanism"]
