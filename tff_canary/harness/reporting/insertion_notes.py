"""What the report says about the insertion mode (NumPy only, no TensorFlow).

Every report names its mode (config.json's `insertion`; a run directory
from before the client mode, or a `RunWriter`'s, is "server";
docs/guide/insertion-modes.md): server-side canaries added to the DP
query's sum at the round's clip, or canary clients of norm `canary_norm`
through TFF's own aggregator (the mechanism's `client_aggregator`, or the
DDP `chain`). For canary clients the report says, from
canary_outcomes.json, how many the DP query or a clipping stage clipped
and lists every canary a zeroing stage DROPPED as a finding (its cosines
are of a canary that was not inserted, which the estimates still count as
inserted), and that canary clients are extra members of the cohort: the
query's denominator and the analytical ε are those of `clients_per_round`
real clients.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Optional

from tff_canary.harness.config import experiment_config
from tff_canary.harness.recording import run_dir as run_dir_lib
from tff_canary.mechanisms import protocol
from tff_canary.mechanisms import registry
from tff_canary.stats import atomic_files

# Zeroed canaries listed in the terminal table (report.md lists all).
TERMINAL_FINDINGS = 10


@dataclasses.dataclass(frozen=True)
class InsertionNotes:
  """The insertion mode of a run and, for canary clients, their outcomes.

  Attributes:
    outcomes: canary_outcomes.json's records (one per canary and round of
      participation; `client_insertion.ClientRounds`), () for server.
    chain, aggregator, accounting: the mechanism's `chain(config)` (None
      but for a chain other than TFF's `DifferentiallyPrivateFactory`),
      `client_aggregator` and `client_accounting` (`protocol.Mechanism`).
  """

  mode: experiment_config.Insertion
  canary_norm: Optional[float] = None
  clients_per_round: Optional[float] = None
  outcomes: tuple[dict[str, Any], ...] = ()
  chain: Optional[str] = None
  aggregator: str = ""
  accounting: str = protocol.Mechanism.client_accounting
  writer: str = "tff"

  @property
  def zeroed(self) -> list[dict[str, Any]]:
    return [o for o in self.outcomes if o["zeroed"]]

  def mode_line(self) -> str:
    if self.mode == "server":
      return ("insertion: server-side canaries, added to the DP sum at the "
              "round's clip (they see the noise step only)")
    by_round: dict[int, int] = {}
    for o in self.outcomes:
      by_round[o["round_num"]] = by_round.get(o["round_num"], 0) + 1
    dp_clipped = sum(bool(o.get("dp_clipped")) for o in self.outcomes)
    stage_clipped = sum(bool(o["clipped"]) for o in self.outcomes)
    through = f"TFF's own DP aggregator{self.aggregator}"
    clipped = (f"clipped by the DP query (entered at its clip), "
               f"{stage_clipped} by a clipping stage, {len(self.zeroed)} "
               "ZEROED")
    counted = (f"the DP query divides by clients_per_round = "
               f"{self.clients_per_round:g} and {self.accounting}")
    if self.chain is not None:
      through = f"TFF's distributed-DP chain ({self.chain})"
      clipped = "clipped at the chain's clip (before rounding)"
      counted = (
          "the noise shares and the analytical ε (the DDP bound) are those "
          f"of clients_per_round = {self.clients_per_round:g} real clients, "
          "each canary client adds its own share on top, and the chain's "
          "mean divides by every participant (the recorded aggregate is "
          "rescaled to sum / clients_per_round); SecAgg's sums are plain "
          "sums in this simulation (the same sum, without its secrecy)")
    if self.writer == "flower":  # mechanisms.gaussian.flower_clients
      return (
          f"insertion: canary clients of norm {self.canary_norm:g} through "
          f"the ClientApp's mods and Flower's DP strategy; "
          f"{len(self.outcomes)} canary-client participations: {dp_clipped} "
          "above the round's clip; canary clients replace sampled clients "
          f"(up to {max(by_round.values(), default=0)} a round): Flower's "
          f"noise divides by num_sampled_clients = "
          f"{self.clients_per_round:g} and the ledger's DpEvents are "
          "Flower's claim for them")
    return (f"insertion: canary clients of norm {self.canary_norm:g} through "
            f"{through}; {len(self.outcomes)} canary-client participations: "
            f"{dp_clipped} {clipped}; canary clients are extra members of the "
            f"cohort (up to {max(by_round.values(), default=0)} a round): "
            f"{counted}")

  def findings(self) -> list[str]:
    """One line per zeroed canary and round."""
    out = []
    for o in self.zeroed:
      stage = next(s for s in o["stages"] if s["kind"] == "zeroing"
                   and s["acted"])
      out.append(
          f"finding: canary {o['canary_id']} ZEROED in round "
          f"{o['round_num']}: the zeroing stage's threshold "
          f"{stage['threshold']:.4g} < its norm {stage['canary_norm']:.4g} "
          "in the stage's order; it did not reach the sum")
    return out

  def lines(self, limit: Optional[int] = None) -> list[str]:
    """The mode line, then the findings (at most `limit` of them)."""
    findings = self.findings()
    if limit is not None and len(findings) > limit:
      findings = findings[:limit] + [
          f"finding: ... and {len(findings) - limit} more zeroed canaries "
          "(report.md lists every one)"]
    return [self.mode_line()] + findings

  def as_dict(self) -> dict[str, Any]:
    return dict(mode=self.mode, canary_norm=self.canary_norm,
                chain=self.chain,
                line=self.mode_line(), zeroed=self.zeroed,
                findings=self.findings(),
                participations=len(self.outcomes))


def load(rd: run_dir_lib.RunDir, config: dict[str, Any]) -> InsertionNotes:
  """The notes of a run directory (its config.json `config`)."""
  mode = experiment_config.insertion_of(config)
  mechanism = registry.of_config(config)
  if mode == "server":
    return InsertionNotes("server")
  path = rd.file(run_dir_lib.CANARY_OUTCOMES)
  try:
    outcomes = atomic_files.read_json(path)["outcomes"]
  except FileNotFoundError:
    raise run_dir_lib.RunDirError(
        f"{path} is missing: a run with insertion='clients' records what "
        "its aggregator did with every canary client there.") from None
  except (ValueError, KeyError, TypeError) as e:
    raise run_dir_lib.RunDirError(f"{path} is not valid: {e}") from None
  return InsertionNotes(
      "clients", canary_norm=float(config["canary_norm"]),
      clients_per_round=float(config["clients_per_round"]),
      outcomes=tuple(outcomes),
      chain=mechanism.chain(mechanism.settings_of(config)),
      aggregator=mechanism.client_aggregator,
      accounting=mechanism.client_accounting,
      writer=str(config.get("writer", "tff")))


__all__ = ["InsertionNotes", "load"]
