"""The analytical epsilon of DP-FTRL: the tree's accounting, two ways.

The setting of Kairouz et al. 2021 ("Practical and Private (Deep) Learning
without Sampling or Shuffling", arXiv 2103.00039, Appendix D): the tree
restarts after every epoch and each client takes part at most once per
epoch. A participation changes every node on its leaf's path, at most
h = ceil(log2(s + 1)) nodes in a tree of s steps, by at most the clip C; each
node has independent N(0, (z C)^2) noise. Releasing ALL nodes is exactly a
Gaussian mechanism with L2 sensitivity C sqrt(h) per epoch, and the epochs'
independent trees compose:

    mu_nodes = sqrt(sum_e h_e) / z                         (`node_mu`)

(Dong, Roth & Su 2019, arXiv 1905.02383, Cor. 3.3), whose exact epsilon is
`gaussian_accounting.gaussian_epsilon_of_mu` (Balle & Wang 2018, Thm 8). What
TFF and dp-accounting users cite is the looser Renyi-DP accounting of
`dp_accounting.SingleEpochTreeAggregationDpEvent(z, s)` per epoch (rho = h /
(2 z^2) at every order, REPLACE_SPECIAL), composed and converted to
(epsilon, delta); `tree_epsilons` returns both. The released updates are a
post-processing of the nodes, so both bound any attack on them
(`tree_targets`; docs/method/dp-ftrl.md).

NumPy and dp-accounting only.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Sequence

import dp_accounting

from tff_canary.stats.accounting import gaussian_accounting
from tff_canary.stats import validation


def _steps(rounds_per_tree: Sequence[int]) -> list[int]:
  if isinstance(rounds_per_tree, (int,)) or not hasattr(
      rounds_per_tree, "__len__"):
    raise TypeError(f"rounds_per_tree must be a sequence of tree sizes, one "
                    f"per epoch, got {validation.show(rounds_per_tree)}.")
  steps = [validation.as_int(s, f"rounds_per_tree[{i}]", minimum=1)
           for i, s in enumerate(rounds_per_tree)]
  if not steps:
    raise ValueError("rounds_per_tree must name at least one tree.")
  return steps


def tree_depth(steps: int) -> int:
  """h = ceil(log2(s + 1)): the most nodes a leaf's path has in a tree of s steps."""
  steps = validation.as_int(steps, "steps", minimum=1)
  return math.ceil(math.log2(steps + 1))


def node_mu(noise_multiplier: float, rounds_per_tree: Sequence[int]) -> float:
  """sqrt(sum_e h_e) / z: the GDP mu of releasing every node (module docstring)."""
  z = validation.as_positive(noise_multiplier, "noise_multiplier")
  return math.sqrt(sum(tree_depth(s) for s in _steps(rounds_per_tree))) / z


def tree_event(noise_multiplier: float,
               rounds_per_tree: Sequence[int]) -> dp_accounting.DpEvent:
  """One `SingleEpochTreeAggregationDpEvent` per epoch, composed."""
  z = validation.as_positive(noise_multiplier, "noise_multiplier")
  events = [dp_accounting.SingleEpochTreeAggregationDpEvent(z, s)
            for s in _steps(rounds_per_tree)]
  return events[0] if len(events) == 1 else dp_accounting.ComposedDpEvent(
      events)


@dataclasses.dataclass(frozen=True)
class TreeEpsilons:
  """The analytical epsilon of a DP-FTRL run, both accountings.

  Attributes:
    epsilon: the exact epsilon of the node release at delta (`node_mu`), the
      tighter one: the claim the audit tests.
    rdp_epsilon: dp-accounting's Renyi-DP epsilon of `tree_event`.
    mu: `node_mu`.
    noise_multiplier, delta: as given.
    rounds_per_tree: the tree sizes, one per epoch.
  """

  epsilon: float
  rdp_epsilon: float
  mu: float
  noise_multiplier: float
  delta: float
  rounds_per_tree: tuple[int, ...]

  def __str__(self) -> str:
    return (f"analytical ε = {self.epsilon:.4g} (exact, node release, "
            f"μ = {self.mu:.4g}); RDP accounting {self.rdp_epsilon:.4g}; "
            f"z = {self.noise_multiplier:g}, δ = {self.delta:g}, "
            f"{len(self.rounds_per_tree)} epochs of "
            f"{sorted(set(self.rounds_per_tree))} rounds")

  def rows(self) -> list[tuple[str, float, str]]:
    """(name, epsilon, detail) of both accountings, as a report shows them."""
    trees = len(self.rounds_per_tree)
    return [(f"DP-FTRL, {trees} tree{'s' if trees > 1 else ''} (exact, node "
             "release)", self.epsilon, "what the accounting guarantees: the "
             "release of every node of the trees"),
            ("DP-FTRL (RDP, dp-accounting)", self.rdp_epsilon,
             "what the accounting guarantees (Rényi DP of the same release, "
             "looser)")]


def tree_epsilons(noise_multiplier: float, rounds_per_tree: Sequence[int], *,
                  delta: float) -> TreeEpsilons:
  """Both accountings of DP-FTRL with one tree per epoch (module docstring).

  Args:
    noise_multiplier: z > 0, the node noise over the clip.
    rounds_per_tree: the number of rounds of each tree, one tree per epoch
      (each client at most once per epoch).
    delta: in (0, 1).
  """
  steps = _steps(rounds_per_tree)
  delta = validation.as_open_unit(delta, "delta")
  mu = node_mu(noise_multiplier, steps)
  accountant = dp_accounting.rdp.RdpAccountant(
      neighboring_relation=dp_accounting.NeighboringRelation.REPLACE_SPECIAL)
  accountant.compose(tree_event(noise_multiplier, steps))
  return TreeEpsilons(
      epsilon=gaussian_accounting.gaussian_epsilon_of_mu(mu, delta),
      rdp_epsilon=float(accountant.get_epsilon(delta)), mu=mu,
      noise_multiplier=float(noise_multiplier), delta=delta,
      rounds_per_tree=tuple(steps))


__all__ = ["TreeEpsilons", "node_mu", "tree_depth", "tree_epsilons",
           "tree_event"]
