"""The correlated-noise family's NumPy half: per-round scores under a known linear map.

DP-FTRL's tree, banded and BLT DP-FTRL release each round's aggregate with
noise that is a known linear map of independent node noises
(`tff_canary.stats.correlated.linear_noise.LinearNoise`;
docs/method/dp-ftrl.md, docs/method/matrix-mechanisms.md). Their runs have
no ledger: each round records its canaries' scores in units of the node
noise (tree_scores.npy, `round_scores`), and the report's section is
DP-FTRL's (`tff_canary.mechanisms.correlated.report`), which computes the
claim from the noise's accounting. What the family needs of the run
(orthogonal coin canaries, a fixed clip, a sampling its accounting covers)
is `CorrelatedMechanism.requirements`; a mechanism of the family subclasses
it and gives its noise (`round_noise`) and its settings' line
(`section_settings`).
"""

from __future__ import annotations

import dataclasses

import numpy as np

from tff_canary.mechanisms import protocol
from tff_canary.stats.correlated import tree_audit


@dataclasses.dataclass(frozen=True)
class CorrelatedMechanism(protocol.Mechanism):
  """A mechanism scored per round in correlated noise (module docstring);
  a subclass sets `samplings`, `sampling_reason` and `scores_of`, and
  gives `round_noise` and `section_settings`."""

  records_ledger = False
  round_scores = True
  scores_of = ""  # whose scores, in the refusals' text
  # The client samplings whose participation its noise is accounted for.
  samplings = ()
  sampling_reason = ""

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
          "is mechanisms.tree.aggregation.tree_adaptive, in your own loop"))
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

  def restart_every(self, settings, rounds_per_epoch: int):
    """The rounds between the noise's restarts (None: never restarted)."""
    return rounds_per_epoch

  def check_rounds(self, settings, num_rounds: int,
                   rounds_per_epoch: int) -> None:
    """The run's claimed noise (`round_noise`) exists for these rounds."""
    self.round_noise(settings, num_rounds, rounds_per_epoch)

  def audit_reach(self, settings, *, num_rounds: int, rounds_per_epoch: int,
                  delta: float, inserted: np.ndarray):
    """The reach of the DP-FTRL report's bounds (`tree_audit.bounds_reach`,
    at the report's default 95%, no self-test noise) against the claim of
    the run's noise (`round_noise`)."""
    claim = self.round_noise(settings, num_rounds, rounds_per_epoch).claim(
        settings.noise_multiplier, delta=delta)
    return tree_audit.bounds_reach(inserted, claimed_epsilon=claim.epsilon,
                                   delta=delta, level=0.05)


  def round_noise(self, settings, num_rounds: int, rounds_per_epoch: int):
    """The claimed released noise of the run's rounds (a `LinearNoise`) for
    `settings` (`protocol.MechanismSettings`, or what `settings_of` reads),
    which the report's section audits against."""
    raise NotImplementedError

  def section_settings(self, settings) -> list[str]:
    """The report's settings lines for this mechanism's noise."""
    raise NotImplementedError


__all__ = ["CorrelatedMechanism"]
