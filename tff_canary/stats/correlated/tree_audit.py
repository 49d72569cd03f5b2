"""The audit of a DP-FTRL claim: three checks, and the estimates beside them.

A DP-FTRL claim (`tree_accounting`) rests on three things: the noise is the
claimed one (independent N(0, sigma^2) node noises, combined by the known B),
each client contributes at most once per epoch and at most the clip norm
C, and together these give the epsilon claimed. `audit_ftrl` checks each,
at a family-wise level `level` split evenly (Bonferroni), so a correct
mechanism raises an alarm with probability at most `level`. The claimed
noise is a `linear_noise.LinearNoise` with one block per epoch (the tree's,
or a matrix mechanism's, whose claim is `LinearNoise.claim`). The checks
(docs/method/dp-ftrl.md, "The audit"):

* "self-test": the mechanism run on zero values (`self_test_noise`),
  whitened by the claimed K = L L^T, e -> L^-1 e, must be i.i.d. N(0, 1):
  `noise_stats.check_noise` (Holm);
* "contribution": each inserted canary's excess contribution per epoch
  (over the run when never restarted) over its schedule's participations,
  in participations at the clip norm, one-sided (`contribution_check`);
* "bounds": Steinke, Nasr & Jagielski's one-run bound on the scheduled and
  max statistics T_j and M_j (`gls_statistics`), and the tight one-run bound
  (`audit.tight_bound`) on T, against the claimed epsilon, each with its
  reach (`audit.AuditVerdict`).

`ftrl_estimates` gives the estimates of epsilon (not bounds) from the same
scores: final model, and all iterates by each statistic.

NumPy/SciPy only.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, Optional, Sequence, Union

import numpy as np
import numpy.typing as npt
from scipy import linalg, stats

from tff_canary.stats.audit import audit as audit_module
from tff_canary.stats.audit import audit_bounds
from tff_canary.stats.bounds import lower_bounds
from tff_canary.stats.estimators import estimates, scheduled_sums
from tff_canary.stats.noise import noise_stats
from tff_canary.stats.correlated import (gls_statistics, linear_noise,
                                         tree_accounting)
from tff_canary.stats import results
from tff_canary.stats import validation

CHECKS = ("participation", "self-test", "contribution", "bounds")
# The checks with a level (Bonferroni); "participation" is exact.
_TESTS = ("self-test", "contribution", "bounds")


@dataclasses.dataclass(frozen=True)
class FtrlAudit:
  """The verdict on a DP-FTRL claim (module docstring).

  Attributes:
    refuted: True when any check failed.
    caught_by: the checks that failed, in `CHECKS` order.
    level: family-wise false-alarm level; each check runs at level / checks.
    claim: the analytical epsilons (`noise.claim`: the tree's
      `tree_accounting.TreeEpsilons`, or `linear_noise.LinearEpsilons`).
    self_test: the whitened noise check, or None without self-test noise.
    contribution_excess, contribution_spread: the contribution check's
      `Contribution.excess` and `.spread`.
    contribution_t, contribution_p_value: its `Contribution.t`, `.p_value`.
    contribution_scheduled, contribution_unit: its `Contribution.scheduled`
      and `.unit` ("per epoch", or "over the run" when the noise has one
      block: a run never restarted).
    bounds: the bounds' `audit.AuditVerdict` at confidence 1 - level / checks,
      with their reach ("beyond reach" when no bound could exceed the claim
      with these candidates).
    noise_kind: the claimed noise's `LinearNoise.kind`, for the text.
    participation: the participation check's reading, or None when no rule
      was given (`audit_ftrl`'s `participation`).
    checks: the checks that share `level` (the bounds' confidence is
      1 - level / checks).
  """

  refuted: bool
  caught_by: tuple[str, ...]
  level: float
  claim: Union[tree_accounting.TreeEpsilons, linear_noise.LinearEpsilons]
  self_test: Optional[noise_stats.NoiseCheck]
  contribution_excess: float
  contribution_spread: float
  contribution_t: float
  contribution_p_value: float
  bounds: audit_module.AuditVerdict
  noise_kind: str = "tree"
  participation: Optional[str] = None
  contribution_scheduled: float = 1.0
  contribution_unit: str = "per epoch"
  checks: int = 2

  @property
  def contribution(self) -> float:
    """What the inserted canaries contributed, in participations at the
    clip norm per `contribution_unit`: the schedules' plus the excess."""
    return self.contribution_scheduled + self.contribution_excess

  @property
  def verdict(self) -> str:
    """The bounds' verdict (`refuted` is the whole audit's)."""
    return self.bounds.verdict

  @property
  def largest_bound(self) -> float:
    return self.bounds.largest_bound

  def as_dict(self) -> dict[str, Any]:
    return dict(summary=str(self), refuted=self.refuted,
                caught_by=list(self.caught_by), bounds=self.bounds.as_dict())

  def __str__(self) -> str:
    head = ("REFUTED by " + ", ".join(self.caught_by) if self.refuted else
            "not refuted, but the bounds cannot reach the claim"
            if self.bounds.beyond_reach else "consistent with the claim")
    lines = [f"DP-FTRL audit: {head} (family-wise level {self.level:g}); "
             f"{self.claim}"]
    if self.participation is not None:
      lines.append(f"  participation: {self.participation}")
    if self.self_test is not None:
      lines.append("  self-test: " + ("passed" if self.self_test.passed else
                                      self.self_test.failures[0]))
    lines.append("  contribution: " + self.contribution_text())
    lines.append(f"  bounds: {self.bounds}")
    return "\n".join(lines)

  def contribution_text(self) -> str:
    """The contribution check in one line, with both causes when it fails."""
    text = (f"excess {self.contribution_excess:+.3g} participations at the "
            f"clip norm {self.contribution_unit} beyond the schedules' "
            f"{self.contribution_scheduled:.3g} (t = "
            f"{self.contribution_t:.3g}, "
            f"p = {self.contribution_p_value:.2g}; spread "
            f"{self.contribution_spread:.3g}x the {self.noise_kind} noise's "
            "variance)")
    if "contribution" in self.caught_by:
      text += (": the inserted canaries put more into the sums than the "
               f"claim allows: more participations {self.contribution_unit} "
               "than their "
               "schedules (check the client sampler), or updates larger than "
               "the clip (check the clipping: e.g. each tensor clipped to C "
               "instead of the global norm)")
    return text


@dataclasses.dataclass(frozen=True)
class Contribution:
  """The contribution check's reading (`contribution_check`).

  Attributes:
    excess: the inserted canaries' mean excess contribution per epoch, in
      units of one participation at the clip norm (0 under the claim).
    spread: the variance of a canary's excess over the variance the claimed
      noise alone gives it (1 without the clients' data; above 1 when their
      updates have a component along the canaries).
    t: excess over its standard error at the larger of the two scales.
    p_value: one-sided, Student t with inserted - 1 degrees of freedom.
    inserted: the number of inserted canaries.
    scheduled: the inserted canaries' scheduled participations per block
      (epoch), on average: 1 with one per epoch; k over a run never
      restarted (one block) with k participations.
    blocks: the noise's blocks (epochs); 1 for a run never restarted.
  """

  excess: float
  spread: float
  t: float
  p_value: float
  inserted: int
  scheduled: float = 1.0
  blocks: int = 1

  @property
  def unit(self) -> str:
    """What `excess` and `scheduled` count: "per epoch", or "over the run"
    when the noise is one block."""
    return "per epoch" if self.blocks > 1 else "over the run"


def contribution_check(scores: npt.ArrayLike, schedule: npt.ArrayLike,
                       inserted: npt.ArrayLike, *,
                       noise: linear_noise.LinearNoise, rounds_per_epoch: int,
                       noise_multiplier: float) -> Contribution:
  """What the inserted canaries put into the sums per epoch, tested.

  r_j, canary j's excess per epoch (its epoch counts minus its schedule's,
  `gls_statistics.epoch_counts`, combined over the epochs by the GLS
  weights of the claimed noise's covariance V = z^2 E^T K E), has variance
  v0 = 1 / (1^T V^-1 1) from that noise alone. The clients' updates add
  a component along c_j that the claim does not describe (O(1/sqrt(d)) per
  round, summed over the epoch: docs/method/dp-ftrl.md, "The audit"); over
  random directions it has mean zero, so the r_j are
  i.i.d. (Gaussian: node noise plus a random projection) with mean the
  excess and a variance v >= v0 that the run sets. The test is Student's
  one-sample t on the inserted r_j at the scale max(v0, s^2), s^2 their
  sample variance: exact when s^2 >= v0, conservative otherwise. With one
  inserted canary only v0 is available (a z-test at the noise's scale). A
  positive excess has two causes: more participations per epoch than the
  schedules (the sampler), or updates larger than the clip (the clipping).

  Args: as `audit_ftrl`'s.
  """
  noise, u, a, mask = _inputs(scores, schedule, inserted, noise)
  z = validation.as_positive(noise_multiplier, "noise_multiplier")
  epochs = noise.epochs(rounds_per_epoch).astype(np.float64)
  counts = gls_statistics.epoch_counts(u[mask], epochs, noise_multiplier=z)
  expected = a[mask].astype(np.float64) @ epochs
  cov = gls_statistics.epoch_count_covariance(noise, epochs,
                                              noise_multiplier=z)
  ones = np.ones(epochs.shape[1])
  w = linalg.solve(cov, ones, assume_a="pos")
  v0 = 1.0 / float(ones @ w)
  r = ((counts - expected) @ w) * v0
  m = r.shape[0]
  excess = float(r.mean())
  scheduled = float(expected.mean())
  if m < 2:
    t_stat = excess / math.sqrt(v0)
    return Contribution(excess, 1.0, t_stat, float(stats.norm.sf(t_stat)), m,
                        scheduled, epochs.shape[1])
  spread = float(r.var(ddof=1)) / v0
  t_stat = excess / math.sqrt(v0 * max(1.0, spread) / m)
  return Contribution(excess, spread, t_stat,
                      float(stats.t.sf(t_stat, df=m - 1)), m, scheduled,
                      epochs.shape[1])


def _inputs(scores, schedule, inserted, noise):
  """Checked (noise, scores, schedule, inserted mask)."""
  noise = linear_noise.as_linear_noise(noise)
  u = np.asarray(scores, dtype=np.float64)
  if u.ndim != 2 or u.shape[1] != noise.num_rounds:
    raise ValueError(f"scores must be [candidates, rounds] with "
                     f"{noise.num_rounds} rounds (the noise's), got shape "
                     f"{u.shape}.")
  return noise, u, np.asarray(schedule), _coins(inserted, u.shape[0])


def _coins(inserted, candidates: int) -> np.ndarray:
  """The checked fair coins of `candidates` candidates, both values present."""
  mask = validation.as_mask(inserted, "inserted", (candidates,),
                            "the candidates")
  if mask.all() or not mask.any():
    raise ValueError("inserted must have both inserted and held-out "
                     "candidates (fair coins).")
  return mask


def _bound_fns(t_stat, m_stat, mask, delta
               ) -> dict[str, audit_bounds.AuditBound]:
  """The audit's one-run bounds on T and M, each with its reach (which
  depends on the coins `mask` only)."""
  return {
      "one-run bound (scheduled T)": audit_bounds.coin_bound(
          lower_bounds.one_run_bound, t_stat, mask, delta=delta),
      "one-run bound (max M)": audit_bounds.coin_bound(
          lower_bounds.one_run_bound, m_stat, mask, delta=delta),
      "tight one-run bound (scheduled T)": audit_bounds.coin_bound(
          audit_module.tight_bound, t_stat, mask, delta=delta),
  }


def bounds_reach(inserted: npt.ArrayLike, *, claimed_epsilon: float,
                 delta: float, level: float = 0.05,
                 self_test: bool = False) -> audit_bounds.Reach:
  """The reach of `audit_ftrl`'s bounds for the fair coins `inserted`
  ([candidates] Boolean), known before training and equal to that of the
  audit of a run with these coins (`audit.AuditVerdict`): the largest
  epsilon they can show at their share of `level` (the family-wise level;
  `self_test`: whether self-test noise takes a share too), and the
  candidates that would reach `claimed_epsilon` when these cannot."""
  mask = _coins(inserted, np.size(inserted))
  level = validation.as_open_unit(level, "level")
  checks = len(_TESTS) if validation.as_bool(self_test, "self_test") else (
      len(_TESTS) - 1)
  return audit_bounds.reach(_bound_fns(None, None, mask, delta),
                            claimed_epsilon=claimed_epsilon,
                            confidence=1.0 - level / checks)


def audit_ftrl(scores: npt.ArrayLike, schedule: npt.ArrayLike,
               inserted: npt.ArrayLike, *, noise: linear_noise.LinearNoise,
               rounds_per_epoch: int, noise_multiplier: float, delta: float,
               self_test_noise: Optional[npt.ArrayLike] = None,
               self_test_sizes: Optional[Sequence[int]] = None,
               level: float = 0.05,
               claimed_epsilon: Optional[float] = None,
               claim: Any = None, participation: Any = None) -> FtrlAudit:
  """Audits a DP-FTRL claim from one run's canary scores (module docstring).

  Args:
    scores: [candidates, rounds] u_{j,t}, in units of the node noise.
    schedule: [candidates, rounds] Boolean (or 0/1), each candidate's rounds.
    inserted: [candidates] Boolean, the fair coins.
    noise: the claimed noise, a `linear_noise.LinearNoise` (the tree's:
      `tree_noise.tree_noise`).
    rounds_per_epoch: the epoch length; the noise restarts after each
      epoch (one block per epoch).
    noise_multiplier: the claimed z.
    delta: the claim's delta.
    self_test_noise: [rounds, coordinates] the mechanism on zero values in
      units of the node noise, or None to skip the self-test.
    self_test_sizes: the sizes of the value's tensors whose coordinates
      `self_test_noise` holds side by side (`CorrelatedNoiseCheck.check.
      tensor_sizes`), so that its tests between tensors run; default one
      tensor.
    level: family-wise false-alarm level in (0, 1).
    claimed_epsilon: the epsilon the bounds are held against; default the
      claim's.
    claim: the analytical claim (its `epsilon` and text); default
      `noise.claim(...)`, one participation per epoch (the tree's:
      `tree_accounting.tree_epsilons(...)`); for another participation rule,
      e.g. `separation.MinSeparation.claim`.
    participation: None, or the claimed participation rule (an object with
      `violations(schedule)` and a text, `separation.MinSeparation`): the
      "participation" check refutes the claim when a candidate's schedule
      breaks it. Exact, so outside the level: canaries sampled as the
      clients are show the clients' real participation.
  """
  noise, u, a, mask = _inputs(scores, schedule, inserted, noise)
  z = validation.as_positive(noise_multiplier, "noise_multiplier")
  level = validation.as_open_unit(level, "level")
  per = validation.as_int(rounds_per_epoch, "rounds_per_epoch", minimum=1)
  noise.epochs(per)   # one block per epoch, or a clear error
  claim = noise.claim(z, delta=delta) if claim is None else claim
  checks = len(_TESTS) if self_test_noise is not None else len(_TESTS) - 1
  each = level / checks
  broken = 0
  if participation is not None:
    broken = int(np.count_nonzero(participation.violations(a != 0)))
  fns = _bound_fns(gls_statistics.scheduled_statistic(u, a, noise),
                   gls_statistics.max_statistic(u, noise), mask, delta)
  claimed = (claim.epsilon if claimed_epsilon is None else
             validation.as_nonnegative(claimed_epsilon, "claimed_epsilon"))
  bounds = audit_module.audit(fns, claimed_epsilon=claimed, delta=delta,
                              confidence=1.0 - each)
  contribution = contribution_check(u, a, mask, noise=noise,
                                    rounds_per_epoch=per, noise_multiplier=z)
  self_test = None
  if self_test_noise is not None:
    e = np.asarray(self_test_noise, dtype=np.float64)
    if e.ndim != 2 or e.shape[0] != noise.num_rounds:
      raise ValueError(f"self_test_noise must be [rounds, coordinates] with "
                       f"{noise.num_rounds} rounds, got shape {e.shape}.")
    sizes = [e.shape[1]] if self_test_sizes is None else self_test_sizes
    try:
      tensors = linear_noise.split_tensors(noise.whiten(e), sizes)
    except ValueError as error:
      raise ValueError(f"self_test_sizes: {error}") from None
    self_test = noise_stats.check_noise(
        tensors, 1.0, level=each, claim=f"{noise.kind} covariance (whitened)")
  failed = {"participation": broken > 0,
            "self-test": self_test is not None and not self_test.passed,
            "contribution": contribution.p_value < each,
            "bounds": bounds.refuted}
  caught = tuple(name for name in CHECKS if failed[name])
  return FtrlAudit(refuted=bool(caught), caught_by=caught, level=level,
                   claim=claim, self_test=self_test,
                   contribution_excess=contribution.excess,
                   contribution_spread=contribution.spread,
                   contribution_t=contribution.t,
                   contribution_p_value=contribution.p_value,
                   contribution_scheduled=contribution.scheduled,
                   contribution_unit=contribution.unit, checks=checks,
                   bounds=bounds, noise_kind=noise.kind,
                   participation=None if participation is None else (
                       f"{broken} of {a.shape[0]} candidates' schedules break "
                       f"the claimed {participation}" if broken else
                       f"every candidate's schedule within the claimed "
                       f"{participation}"))


@dataclasses.dataclass(frozen=True)
class FtrlEstimates:
  """Estimates of epsilon from one DP-FTRL run's canaries (not bounds).

  Attributes:
    final: from the final model's scores, sum_t u_{j,t} / sqrt(1^T K 1)
      (N(0, 1) for held-out canaries), `scheduled_sums.epsilon_scheduled`.
    scheduled, mechanism: all iterates, the GLS scheduled statistic T_j's
      mean gap in units of the held-out T's spread (the attack on this run,
      whose clients' updates may spread T beyond the noise) and of the
      claimed noise (the mechanism's epsilon if its noise is the claimed
      one; `scheduled_sums`, "The two held-out readings").
    max: all iterates, the max statistic M_j, two Gaussians fitted to the
      inserted and held-out M (the paper's epsilon-all).
    independent: all iterates, the statistic of independent rounds with an
      N(0, 1) null (wrong when rounds are correlated; shown for contrast).

  Their targets: `tree_targets` (scheduled: the analytical epsilon when
  every canary is on the worst-case pattern, `TreeTargets.scheduled_target`).
  The inserted canaries' means differ by schedule, so each variance check
  is given that known spread (`epsilon_scheduled`'s `inserted_mu`).
  """

  final: scheduled_sums.ScheduledEstimate
  scheduled: scheduled_sums.ScheduledEstimate
  max: results.EpsilonEstimate
  independent: scheduled_sums.ScheduledEstimate
  mechanism: Optional[scheduled_sums.ScheduledEstimate] = None


def ftrl_estimates(scores: npt.ArrayLike, schedule: npt.ArrayLike,
                   inserted: npt.ArrayLike, *, noise: linear_noise.LinearNoise,
                   noise_multiplier: float, delta: float,
                   confidence: float = 0.95) -> FtrlEstimates:
  """The estimates of `FtrlEstimates` from one run's canary scores."""
  noise, u, a, mask = _inputs(scores, schedule, inserted, noise)
  final = u.sum(axis=1) / math.sqrt(noise.final_variance())
  t_stat = gls_statistics.scheduled_statistic(u, a, noise)
  m_stat = gls_statistics.max_statistic(u, noise)
  naive = gls_statistics.independent_scheduled_statistic(u, a, noise)
  # Each inserted statistic's mean under the claim, up to the common 1 / z:
  # the known spread its variance check allows for.
  a_in = a[mask] != 0
  rounds = a_in.sum(axis=1)
  shape = {
      "final": rounds.astype(np.float64),
      "scheduled": gls_statistics.schedule_mu(a_in, noise,
                                              noise_multiplier=1.0),
      "independent": (a_in / np.sqrt(np.diag(noise.covariance))).sum(axis=1)
                     / np.sqrt(rounds)}

  def estimate(values, kind, held_out=None, scale="held_out"):
    # held_out None: the exact N(0, 1) null.
    return scheduled_sums.epsilon_scheduled(
        values[mask], held_out, delta=delta, confidence=confidence,
        inserted_mu=shape[kind], scale=scale)

  # epsilon_all fits two Gaussians, whose epsilon is unchanged by one
  # positive scale applied to both samples; it validates cosines, so M is
  # scaled into [-1, 1] first.
  scale = 1.01 * float(np.abs(m_stat).max())
  return FtrlEstimates(
      final=estimate(final, "final", final[~mask]),
      scheduled=estimate(t_stat, "scheduled", t_stat[~mask]),
      max=estimates.epsilon_all(m_stat[mask] / scale, m_stat[~mask] / scale,
                                delta=delta, confidence=confidence),
      independent=estimate(naive, "independent"),
      mechanism=estimate(t_stat, "scheduled", t_stat[~mask], "claimed"))


__all__ = ["CHECKS", "Contribution", "FtrlAudit", "FtrlEstimates",
           "audit_ftrl", "bounds_reach", "contribution_check",
           "ftrl_estimates"]
