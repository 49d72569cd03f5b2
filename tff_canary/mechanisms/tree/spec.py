"""DP-FTRL's tree aggregation: its requirements and what its runs record.

DP-FTRL (Kairouz et al. 2021, arXiv 2103.00039; docs/method/dp-ftrl.md)
with a fixed clip, its tree restarted after every shuffled epoch, in either
insertion mode, with orthogonal canaries inserted by fair coins
(`TreeMechanism.requirements` says why each). There is no ledger: each
round records its canaries' scores in units of the node noise
(tree_scores.npy, `round_scores`), and the report's section is DP-FTRL's
(`report_section`, which computes the tree's claim from its accounting).
Its TFF half is `tff_canary.mechanisms.tree.tff`.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

from tff_canary.mechanisms import protocol
from tff_canary.stats.correlated import tree_audit
from tff_canary.stats.correlated import tree_noise


@dataclasses.dataclass(frozen=True)
class TreeMechanism(protocol.Mechanism):
  """DP-FTRL's tree (module docstring)."""

  name = "tree"
  help = ("DP-FTRL: TFF's tree aggregation restarted every epoch; needs a "
          "fixed --clip; with --insertion=clients the canary clients go "
          "through TFF's own factory over the tree; audited against the "
          "tree accounting, docs/method/dp-ftrl.md.")
  records_ledger = False
  round_scores = True
  client_aggregator = " (DP-FTRL tree)"
  scores_of = "the tree's"  # whose scores, in the refusals' text
  client_accounting = ("the tree accounting (the analytical ε) is that of "
                       "clients_per_round real clients, each once per tree")
  # The client samplings whose participation its noise is accounted for.
  samplings = ("shuffle",)
  sampling_reason = ("DP-FTRL's accounting needs each client at most once "
                     "per tree, one tree per shuffled epoch")
  # No noise is refused (`resolve`); a fixed clip (`requirements`).
  sweep = protocol.SweepDefaults(("0.5", "1", "2", "4"), ("1",), clip=0.1)

  def subject(self, config) -> str:
    if config.insertion == "clients":
      return (f"aggregator={self.name!r} with insertion='clients' "
              f"(--aggregator={self.name} --insertion=clients)")
    return self.flag

  def report_section(self, records, *, delta, confidence, claimed_epsilon):
    """DP-FTRL's section: the per-round scores' audit against the noise's
    accounting (`tff_canary.mechanisms.correlated.report.build`)."""
    from tff_canary.mechanisms.correlated import report  # pylint: disable=g-import-not-at-top
    return report.build(records, delta=delta, confidence=confidence,
                        claimed_epsilon=claimed_epsilon)

  def requirements(self, config) -> list[protocol.Requirement]:
    """What DP-FTRL needs and the config lacks; with canary clients also
    what they need (unseeded noise, a norm that the tree's clip reaches)."""
    missing = []
    if config.insertion == "clients":
      missing += protocol.seeded_noise_requirement(config)
      norm = config.canary_norm  # its default set (ExperimentConfig)
      if config.clip is not None and norm < config.clip:
        missing.append(protocol.Requirement(
            f"--canary_norm={config.clip:g} or more (got {norm:g})",
            f"canary_norm >= clip = {config.clip:g}",
            f"{self.scores_of} scores count a canary client as entering the "
            "sum at the clip, which one below it does not"))
    if config.directions != "orthogonal":
      missing.append(protocol.Requirement(
          "--directions=orthogonal", "directions='orthogonal'",
          "the tree's per-round scores exist for orthogonal canaries only"))
    if config.clip is None:
      missing.append(protocol.Requirement(
          "--clip=C (e.g. --clip=0.1)", "clip=C",
          "the experiments run DP-FTRL at a fixed clip; adaptive clipping "
          "is CanaryDPFactory.tree_adaptive, in your own loop"))
    if config.assignment != "coin":
      missing.append(protocol.Requirement(
          "--assignment=coin", "assignment='coin'",
          "the DP-FTRL audit's one-run bounds need candidates inserted by "
          "fair coins"))
    if config.sampling not in self.samplings:
      missing.append(protocol.Requirement(
          " or ".join(f"--sampling={s}" for s in self.samplings),
          " or ".join(f"sampling={s!r}" for s in self.samplings),
          self.sampling_reason))
    if config.allow_participation_mismatch:
      missing.append(protocol.Requirement(
          "--noallow_participation_mismatch",
          "allow_participation_mismatch=False", "canaries must take part "
          "once per tree, as the clients do"))
    if config.zeroing:
      missing.append(protocol.Requirement(
          "--nozeroing", "zeroing=False",
          "zeroing is not validated with the tree's scores"))
    return missing

  def resolve(self, config) -> dict[str, Any]:
    if config.noise_multiplier == 0.0:
      raise ValueError("aggregator='tree' needs noise_multiplier > 0: the "
                       "tree's scores are in units of its node noise; got "
                       "noise_multiplier=0.0.")
    return {}

  def restart_every(self, config, rounds_per_epoch: int):
    """The rounds between the noise's restarts (None: never restarted)."""
    return rounds_per_epoch

  def round_noise(self, config, num_rounds: int, rounds_per_epoch: int):
    """The claimed released noise of the run's rounds (the report's
    section): the efficient tree restarted every epoch."""
    return tree_noise.tree_noise(num_rounds, efficient=True,
                                 restart_period=rounds_per_epoch)

  def section_settings(self, config) -> list[str]:
    """The report's settings lines for this mechanism's noise."""
    return ["tree aggregation restarted every epoch"]

  def check_rounds(self, config, num_rounds: int,
                   rounds_per_epoch: int) -> None:
    """The run's claimed noise (`round_noise`) exists for these rounds."""
    self.round_noise(config, num_rounds, rounds_per_epoch)

  def audit_reach(self, config, *, num_rounds: int, rounds_per_epoch: int,
                  delta: float, inserted: np.ndarray):
    """The reach of the DP-FTRL report's bounds (`tree_audit.bounds_reach`,
    at the report's default 95%, no self-test noise) against the claim of
    the run's noise (`round_noise`)."""
    claim = self.round_noise(config, num_rounds, rounds_per_epoch).claim(
        config.noise_multiplier, delta=delta)
    return tree_audit.bounds_reach(inserted, claimed_epsilon=claim.epsilon,
                                   delta=delta, level=0.05)


MECHANISM = TreeMechanism()
