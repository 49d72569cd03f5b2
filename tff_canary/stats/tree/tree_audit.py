"""The audit of a DP-FTRL claim: three checks, and the estimates beside them.

A DP-FTRL claim (`tree_accounting`) rests on three things: the noise is the
tree's (independent N(0, sigma^2) node noises, combined as the query says),
each client takes part at most once per epoch, and together these give the
epsilon claimed. `audit_ftrl` checks each, at a family-wise level `level`
split evenly (Bonferroni), so a correct mechanism raises an alarm with
probability at most `level`:

* "self-test": the mechanism run on zero values (`self_test_noise`, rounds x
  coordinates) is whitened by the claimed round covariance, e_t -> L^-1 e
  with K = L L^T, which makes correct noise i.i.d. N(0, 1) in every round;
  `noise_stats.check_noise` then tests variance, mean, correlation between
  rounds and reuse of values (Holm). Noise reused after a restart, a level
  of nodes without noise, or node noise at the wrong scale change that law.
* "participations": each inserted canary's participations per epoch,
  estimated from its scores (`tree_statistics.epoch_counts`, unbiased, with
  the known covariance z^2 E^T K E), minus its schedule's. The GLS estimate
  of a common excess per epoch over the inserted canaries is N(0, 1) under
  the claim; a one-sided test catches a client counted more often than its
  schedule.
* "bounds": one-run lower bounds on epsilon from the fair-coin canaries'
  scheduled statistics T_j and max statistics M_j (`tree_statistics`)
  against the claimed epsilon (`audit.audit`): Steinke, Nasr & Jagielski's
  bound (valid for any claim) on both, and, since the node release is a
  Gaussian mechanism and the canaries' statistics are independent, the tight
  one-run bound on T (`audit.tight_bound`). Each has its reach (its value
  on perfectly separated statistics); a claim beyond every reach is
  "beyond reach", not consistent (`audit.AuditVerdict`).

`ftrl_estimates` gives the estimates of epsilon (not bounds) from the same
scores: final model, and all iterates by each statistic.

NumPy/SciPy only.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Optional, Sequence

import numpy as np
import numpy.typing as npt
from scipy import linalg, stats

from tff_canary.stats.audit import audit as audit_module
from tff_canary.stats.audit import audit_bounds
from tff_canary.stats.bounds import lower_bounds
from tff_canary.stats.estimators import estimates, scheduled_sums
from tff_canary.stats.noise import noise_stats
from tff_canary.stats.tree import tree_accounting, tree_noise, tree_statistics
from tff_canary.stats import results
from tff_canary.stats import validation

CHECKS = ("self-test", "participations", "bounds")


@dataclasses.dataclass(frozen=True)
class FtrlAudit:
  """The verdict on a DP-FTRL claim (module docstring).

  Attributes:
    refuted: True when any check failed.
    caught_by: the checks that failed, in `CHECKS` order.
    level: family-wise false-alarm level; each check runs at level / checks.
    claim: the analytical epsilons (`tree_accounting.TreeEpsilons`).
    self_test: the whitened noise check, or None without self-test noise.
    participation_excess: GLS estimate of the inserted canaries' extra
      participations per epoch (0 under the claim).
    participation_z, participation_p_value: its z-score and one-sided p.
    bounds: the bounds' `audit.AuditVerdict` at confidence 1 - level / checks,
      with their reach ("beyond reach" when no bound could exceed the claim
      with these candidates).
  """

  refuted: bool
  caught_by: tuple[str, ...]
  level: float
  claim: tree_accounting.TreeEpsilons
  self_test: Optional[noise_stats.NoiseCheck]
  participation_excess: float
  participation_z: float
  participation_p_value: float
  bounds: audit_module.AuditVerdict

  def __str__(self) -> str:
    head = ("REFUTED by " + ", ".join(self.caught_by) if self.refuted else
            "not refuted, but the bounds cannot reach the claim"
            if self.bounds.beyond_reach else "consistent with the claim")
    lines = [f"DP-FTRL audit: {head} (family-wise level {self.level:g}); "
             f"{self.claim}"]
    if self.self_test is not None:
      lines.append("  self-test: " + ("passed" if self.self_test.passed else
                                      self.self_test.failures[0]))
    lines.append(f"  participations: excess {self.participation_excess:+.3g}"
                 f" per epoch (z = {self.participation_z:.3g}, p = "
                 f"{self.participation_p_value:.2g})")
    lines.append(f"  bounds: {self.bounds}")
    return "\n".join(lines)


def _participation_test(scores, schedule, inserted, covariance, epochs, z):
  counts = tree_statistics.epoch_counts(scores[inserted], epochs,
                                        noise_multiplier=z)
  expected = schedule[inserted].astype(np.float64) @ epochs
  cov = tree_statistics.epoch_count_covariance(covariance, epochs,
                                               noise_multiplier=z)
  ones = np.ones(epochs.shape[1])
  w = linalg.solve(cov, ones, assume_a="pos")
  information = float(ones @ w) * counts.shape[0]
  excess = float(((counts - expected) @ w).sum()) / information
  z_score = excess * math.sqrt(information)
  return excess, z_score, float(stats.norm.sf(z_score))


def _inputs(scores, schedule, inserted, noise):
  """Checked (scores, schedule, inserted mask, covariance)."""
  if not isinstance(noise, tree_noise.TreeNoise):
    raise TypeError(f"noise must be a TreeNoise, got {type(noise).__name__}.")
  covariance = noise.covariance
  u = np.asarray(scores, dtype=np.float64)
  if u.ndim != 2 or u.shape[1] != noise.num_rounds:
    raise ValueError(f"scores must be [candidates, rounds] with "
                     f"{noise.num_rounds} rounds (the tree's), got shape "
                     f"{u.shape}.")
  mask = np.asarray(inserted)
  if mask.dtype != bool or mask.shape != (u.shape[0],):
    raise ValueError(f"inserted must be a Boolean array of one flag per "
                     f"candidate ({u.shape[0]}), got dtype {mask.dtype} and "
                     f"shape {mask.shape}.")
  if mask.all() or not mask.any():
    raise ValueError("inserted must have both inserted and held-out "
                     "candidates (fair coins).")
  return u, np.asarray(schedule), mask, covariance


def _whitened(noise: np.ndarray, covariance: np.ndarray) -> np.ndarray:
  factor = np.linalg.cholesky(covariance)
  return linalg.solve_triangular(factor, noise, lower=True)


def audit_ftrl(scores: npt.ArrayLike, schedule: npt.ArrayLike,
               inserted: npt.ArrayLike, *, noise: tree_noise.TreeNoise,
               rounds_per_epoch: int, noise_multiplier: float, delta: float,
               self_test_noise: Optional[npt.ArrayLike] = None,
               self_test_sizes: Optional[Sequence[int]] = None,
               level: float = 0.05,
               claimed_epsilon: Optional[float] = None) -> FtrlAudit:
  """Audits a DP-FTRL claim from one run's canary scores (module docstring).

  Args:
    scores: [candidates, rounds] u_{j,t}, in units of the node noise.
    schedule: [candidates, rounds] Boolean, each candidate's schedule.
    inserted: [candidates] Boolean, the fair coins.
    noise: the claimed tree (`tree_noise.tree_noise`).
    rounds_per_epoch: the epoch length; the tree restarts after each epoch.
    noise_multiplier: the claimed z.
    delta: the claim's delta.
    self_test_noise: [rounds, coordinates] the mechanism on zero values in
      units of the node noise, or None to skip the self-test.
    self_test_sizes: the sizes of the value's tensors whose coordinates
      `self_test_noise` holds side by side (`TreeNoiseCheck.check.
      tensor_sizes`), so that its tests between tensors run; default one
      tensor.
    level: family-wise false-alarm level in (0, 1).
    claimed_epsilon: the epsilon the bounds are held against; default the
      tree's analytical one (`tree_accounting.tree_epsilons(...).epsilon`).
  """
  u, a, mask, covariance = _inputs(scores, schedule, inserted, noise)
  z = validation.as_positive(noise_multiplier, "noise_multiplier")
  level = validation.as_open_unit(level, "level")
  per = validation.as_int(rounds_per_epoch, "rounds_per_epoch", minimum=1)
  epochs = tree_statistics.epoch_matrix(noise.num_rounds, per)
  epoch_of_round = np.arange(noise.num_rounds) // per
  if not np.array_equal(noise.round_tree, epoch_of_round):
    starts = np.flatnonzero(np.diff(noise.round_tree, prepend=-1))
    raise ValueError(
        f"the claimed tree must restart after every epoch of "
        f"rounds_per_epoch={per} rounds (tree_accounting assumes one tree "
        f"per epoch); its trees start at rounds {starts.tolist()[:8]}.")
  claim = tree_accounting.tree_epsilons(
      z, [int(n) for n in epochs.sum(axis=0)], delta=delta)
  checks = len(CHECKS) if self_test_noise is not None else len(CHECKS) - 1
  each = level / checks
  t_stat = tree_statistics.scheduled_statistic(u, a, covariance)
  m_stat = tree_statistics.max_statistic(u, covariance)
  # Each with its reach (`audit_bounds.coin_bound`): with 512 candidates the
  # tight bound cannot exceed 20.0 here, and a claim beyond every reach is
  # "beyond reach", not consistent.
  coin_bound = audit_bounds.coin_bound
  fns = {
      "one-run bound (scheduled T)": coin_bound(
          lower_bounds.one_run_bound, t_stat, mask, delta=delta),
      "one-run bound (max M)": coin_bound(
          lower_bounds.one_run_bound, m_stat, mask, delta=delta),
      "tight one-run bound (scheduled T)": coin_bound(
          audit_module.tight_bound, t_stat, mask, delta=delta),
  }
  claimed = (claim.epsilon if claimed_epsilon is None else
             validation.as_nonnegative(claimed_epsilon, "claimed_epsilon"))
  bounds = audit_module.audit(fns, claimed_epsilon=claimed, delta=delta,
                              confidence=1.0 - each)
  excess, z_score, p_value = _participation_test(u, a, mask, covariance,
                                                 epochs.astype(np.float64), z)
  self_test = None
  if self_test_noise is not None:
    e = np.asarray(self_test_noise, dtype=np.float64)
    if e.ndim != 2 or e.shape[0] != noise.num_rounds:
      raise ValueError(f"self_test_noise must be [rounds, coordinates] with "
                       f"{noise.num_rounds} rounds, got shape {e.shape}.")
    sizes = [e.shape[1]] if self_test_sizes is None else self_test_sizes
    try:
      tensors = tree_noise.split_tensors(_whitened(e, covariance), sizes)
    except ValueError as error:
      raise ValueError(f"self_test_sizes: {error}") from None
    self_test = noise_stats.check_noise(
        tensors, 1.0, level=each, claim="tree covariance (whitened)")
  failed = {"self-test": self_test is not None and not self_test.passed,
            "participations": p_value < each,
            "bounds": bounds.refuted}
  caught = tuple(name for name in CHECKS if failed[name])
  return FtrlAudit(refuted=bool(caught), caught_by=caught, level=level,
                   claim=claim, self_test=self_test,
                   participation_excess=excess, participation_z=z_score,
                   participation_p_value=p_value, bounds=bounds)


@dataclasses.dataclass(frozen=True)
class FtrlEstimates:
  """Estimates of epsilon from one DP-FTRL run's canaries (not bounds).

  Attributes:
    final: from the final model's scores, sum_t u_{j,t} / sqrt(1^T K 1)
      (N(0, 1) for held-out canaries), `scheduled_sums.epsilon_scheduled`.
    scheduled: all iterates, the GLS scheduled statistic T_j.
    max: all iterates, the max statistic M_j, two Gaussians fitted to the
      inserted and held-out M (the paper's epsilon-all).
    independent: all iterates, the statistic of independent rounds with an
      N(0, 1) null (wrong when rounds are correlated; shown for contrast).

  What each estimates: `tree_targets` (final: the final model's epsilon;
  scheduled: this run's schedules; max: none, a fit to maxima). The inserted
  canaries' means differ by schedule, as the targets compute them, so each
  variance check is given that known spread (`epsilon_scheduled`'s
  `inserted_mu`).
  """

  final: scheduled_sums.ScheduledEstimate
  scheduled: scheduled_sums.ScheduledEstimate
  max: results.EpsilonEstimate
  independent: scheduled_sums.ScheduledEstimate


def ftrl_estimates(scores: npt.ArrayLike, schedule: npt.ArrayLike,
                   inserted: npt.ArrayLike, *, noise: tree_noise.TreeNoise,
                   noise_multiplier: float, delta: float,
                   confidence: float = 0.95) -> FtrlEstimates:
  """The estimates of `FtrlEstimates` from one run's canary scores."""
  u, a, mask, covariance = _inputs(scores, schedule, inserted, noise)
  final = u.sum(axis=1) / math.sqrt(noise.final_variance())
  t_stat = tree_statistics.scheduled_statistic(u, a, covariance)
  m_stat = tree_statistics.max_statistic(u, covariance)
  naive = tree_statistics.independent_scheduled_statistic(u, a, covariance)
  # Each inserted statistic's mean under the claim, up to the common 1 / z:
  # the known spread its variance check allows for.
  a_in = a[mask] != 0
  rounds = a_in.sum(axis=1)
  shape = {
      "final": rounds.astype(np.float64),
      "scheduled": tree_statistics.schedule_mu(a_in, covariance,
                                               noise_multiplier=1.0),
      "independent": (a_in / np.sqrt(np.diag(covariance))).sum(axis=1)
                     / np.sqrt(rounds)}

  def gauss(values, kind):
    return scheduled_sums.epsilon_scheduled(
        values[mask], values[~mask], delta=delta, confidence=confidence,
        inserted_mu=shape[kind])

  def exact(values, kind):
    return scheduled_sums.epsilon_scheduled(
        values[mask], delta=delta, confidence=confidence,
        inserted_mu=shape[kind])

  # epsilon_all fits two Gaussians, whose epsilon is unchanged by one
  # positive scale applied to both samples; it validates cosines, so M is
  # scaled into [-1, 1] first.
  scale = 1.01 * float(np.abs(m_stat).max())
  return FtrlEstimates(
      final=gauss(final, "final"), scheduled=gauss(t_stat, "scheduled"),
      max=estimates.epsilon_all(m_stat[mask] / scale, m_stat[~mask] / scale,
                                delta=delta, confidence=confidence),
      independent=exact(naive, "independent"))


__all__ = ["CHECKS", "FtrlAudit", "FtrlEstimates", "audit_ftrl",
           "ftrl_estimates"]
