"""The epsilons of a DP-FTRL run that its estimates are compared with.

DP-FTRL (Kairouz et al. 2021, arXiv 2103.00039) restarts its noise after
every epoch, each participant in at most one round per epoch. Three
epsilons describe one run, from the largest down, each the exact epsilon at
delta of a Gaussian DP mu (Dong, Roth & Su 2019, arXiv 1905.02383; Balle &
Wang 2018, Thm 8; docs/method/dp-ftrl.md, "Three ε"):

  * node release, the claim the audit tests: `LinearNoise.release_mu`
    (the tree's mu = sqrt(sum_e h_e) / z, `tree_accounting.node_mu`);
  * rounds, worst-case participant: `LinearNoise.worst_case_mu`, the
    ceiling of any attack on the rounds;
  * this run's schedules: the mean over the inserted canaries of mu_j =
    sqrt(a_j^T K^-1 a_j) / z (`gls_statistics.schedule_mu`), what
    epsilon-all by T estimates; not a ceiling. With every canary on the
    worst-case pattern a* (`schedules.SharedRounds`) it is the worst case's
    mu, for the plain tree and a square B the analytical mu itself
    (`TreeTargets.scheduled_target` names which).

Beside them, epsilon-final's target: the final model holds the sum of the
rounds, whose canary score is N(P_j / z, 1^T K 1), so the mean over the
inserted canaries of P_j / (z sqrt(1^T K 1)), P_j canary j's rounds.

NumPy/SciPy only.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import numpy as np
import numpy.typing as npt

from tff_canary.stats.accounting import gaussian_accounting
from tff_canary.stats.correlated import gls_statistics, linear_noise
from tff_canary.stats import validation

NODES = "node release"
WORST_CASE = "rounds, worst-case participant"
SCHEDULES = "rounds, this run's schedules"
FINAL = "final model, this run's schedules"


@dataclasses.dataclass(frozen=True)
class TreeTargets:
  """The epsilons of one DP-FTRL run at `delta` (module docstring).

  Attributes:
    delta, noise_multiplier: as given.
    node_mu, node_epsilon: the node release (the analytical epsilon).
    worst_case_mu, worst_case_epsilon: the rounds, for the worst-case
      participant (one round per epoch).
    schedules_mu, schedules_epsilon: the rounds, for this run's inserted
      canaries: the mean of their mu_j, and epsilon of that mean.
    largest_schedule_mu: the largest inserted canary's mu_j.
    final_mu, final_epsilon: the final model (the sum of the rounds), mean
      over the inserted canaries.
  """

  delta: float
  noise_multiplier: float
  node_mu: float
  node_epsilon: float
  worst_case_mu: float
  worst_case_epsilon: float
  schedules_mu: float
  schedules_epsilon: float
  largest_schedule_mu: float
  final_mu: float
  final_epsilon: float

  def epsilons(self) -> dict[str, float]:
    """The three epsilons of the module docstring, largest first, then the
    final model's."""
    return {NODES: self.node_epsilon, WORST_CASE: self.worst_case_epsilon,
            SCHEDULES: self.schedules_epsilon, FINAL: self.final_epsilon}

  @property
  def scheduled_target(self) -> str:
    """The name of the epsilon that epsilon-all by T estimates: NODES (the
    analytical epsilon) when every inserted canary's mu_j is the node
    release's (the worst-case placement; plain tree or square B), else
    WORST_CASE when every one is the worst case's (the efficient tree's
    a*), else SCHEDULES. With one round per epoch no mu_j exceeds the worst
    case, so the mean of the mu_j equals it only when every one does."""
    def at(mu):
      return abs(self.schedules_mu - mu) <= 1e-9 * mu
    return (NODES if at(self.node_mu) else WORST_CASE
            if at(self.worst_case_mu) else SCHEDULES)

  def mus(self) -> dict[str, float]:
    return {NODES: self.node_mu, WORST_CASE: self.worst_case_mu,
            SCHEDULES: self.schedules_mu, FINAL: self.final_mu}

  def as_dict(self) -> dict[str, Any]:
    return dataclasses.asdict(self)


def tree_targets(noise: linear_noise.LinearNoise, schedule: npt.ArrayLike,
                 inserted: npt.ArrayLike, *, rounds_per_epoch: int,
                 noise_multiplier: float, delta: float) -> TreeTargets:
  """The epsilons of `TreeTargets` for a run's claimed noise (restarted after
  every epoch) and canaries; arguments as `tree_audit.audit_ftrl`'s."""
  noise = linear_noise.as_linear_noise(noise)
  z = validation.as_positive(noise_multiplier, "noise_multiplier")
  delta = validation.as_open_unit(delta, "delta")
  noise.epochs(rounds_per_epoch)   # one block per epoch, or a clear error
  a = np.asarray(schedule)
  if a.ndim != 2:
    raise ValueError(f"schedule must be [candidates, rounds], got shape "
                     f"{a.shape}.")
  mask = validation.as_mask(inserted, "inserted", a.shape[:1],
                            "the candidates of schedule")
  if not mask.any():
    raise ValueError("inserted must have at least one inserted candidate.")
  mu_j = gls_statistics.schedule_mu(a[mask], noise, noise_multiplier=z)
  node = noise.release_mu(z)
  worst = noise.worst_case_mu(z)
  rounds = (a[mask] != 0).sum(axis=1)
  final = float(rounds.mean()) / (z * math.sqrt(noise.final_variance()))
  schedules = float(mu_j.mean())

  def eps(mu):
    return gaussian_accounting.gaussian_epsilon_of_mu(mu, delta)

  return TreeTargets(
      delta=delta, noise_multiplier=z, node_mu=node, node_epsilon=eps(node),
      worst_case_mu=worst, worst_case_epsilon=eps(worst),
      schedules_mu=schedules, schedules_epsilon=eps(schedules),
      largest_schedule_mu=float(mu_j.max()), final_mu=final,
      final_epsilon=eps(final))


__all__ = ["FINAL", "NODES", "SCHEDULES", "TreeTargets", "WORST_CASE",
           "tree_targets"]
