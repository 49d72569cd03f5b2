"""The noise DP-FTRL releases, as a known linear map of independent node noises.

DP-FTRL (Kairouz et al. 2021, "Practical and Private (Deep) Learning without
Sampling or Shuffling", arXiv 2103.00039, Algorithm 1) gives every tree node
its own noise xi_k ~ N(0, sigma^2 I_d). tensorflow_privacy's
`TreeResidualSumQuery` (what TFF's `DifferentiallyPrivateFactory.
tree_aggregation` and `tree_adaptive` build) releases each round the
difference of two noised prefix sums:

    y_t = x_t + N_t - N_{t-1},    N_t = sum_k A[t, k] xi_k,

with N_{-1} = 0, and N_{t-1} = 0 again in the first round after a restart
(`tfp.RestartQuery`). So e_t = sum_k B[t, k] xi_k, B the rows of A
differenced within a tree: a `linear_noise.LinearNoise`. A is set by the
plain tree (`TreeAggregator`: one node per set bit of t + 1) or Honaker's
efficient tree (`EfficientTreeAggregator`, Honaker 2015, "Efficient Use of
Differentially Private Binary Trees": a node is its own noise plus half its
children's, reweighted by 1 / (2 - 2^-level)); docs/method/dp-ftrl.md.

`tree_noise` does not transcribe these rules: it runs tensorflow_privacy's
algorithm on symbolic values, each generator call a new basis vector, so A
and B are the implementation's (tests/stats/correlated/test_tree_noise.py compares with the
real query). Calls that a reset throws away are columns of zeros.
`TreeNoise` adds the tree's own accounting of its node release
(`tree_accounting`).

NumPy and dp-accounting only.
"""

from __future__ import annotations

import dataclasses
from typing import ClassVar, Optional

import numpy as np

from tff_canary.stats.correlated import linear_noise, tree_accounting
from tff_canary.stats import validation


@dataclasses.dataclass(frozen=True)
class _Call:
  """One call of the tree's noise generator: a node's own noise."""
  index: int   # calls before it within its tree
  level: int   # the node's level (0 = leaf)


class _Tree:
  """tensorflow_privacy's (Efficient)TreeAggregator on symbolic values."""

  def __init__(self, efficient: bool, calls: list[_Call]):
    self.efficient = efficient
    self.calls = calls
    self.count = 0
    # The level buffer: (level, value) pairs, lowest level first; a value is
    # a dict {call: coefficient}.
    self.buffer = [(0, self._next(0))]

  def _next(self, level: int) -> dict[int, float]:
    self.calls.append(_Call(self.count, level))
    self.count += 1
    return {len(self.calls) - 1: 1.0}

  def cumsum_and_update(self) -> dict[int, float]:
    total: dict[int, float] = {}
    for level, value in self.buffer:
      w = 1.0 / (2.0 - 0.5**level) if self.efficient else 1.0   # Honaker's
      for k, c in value.items():
        total[k] = total.get(k, 0.0) + w * c
    level = 0
    new = self._next(0)
    while level < len(self.buffer) and self.buffer[level][0] == level:
      if self.efficient:
        own = self._next(level + 1)
        left = self.buffer[level][1]
        merged = {k: 0.5 * c for k, c in left.items()}
        for k, c in new.items():
          merged[k] = merged.get(k, 0.0) + 0.5 * c
        for k, c in own.items():
          merged[k] = merged.get(k, 0.0) + c
        new = merged
      level += 1
    if not self.efficient:
      # The plain tree draws one node per step, at the level it creates.
      self.calls[-1] = dataclasses.replace(self.calls[-1], level=level)
    self.buffer = [(level, new)] + self.buffer[level:]
    return total


def restart_rounds(num_rounds: int, restart_period: Optional[int],
                   restart_warmup: Optional[int]) -> list[int]:
  """The rounds after which the tree restarts (`PeriodicRoundRestartIndicator`).

  The indicator counts calls k = 1, 2, ... and restarts after call k when
  k mod period == warmup (warmup None means 0): rounds k - 1, 0-based.
  """
  if restart_period is None:
    if restart_warmup is not None:
      raise ValueError(f"restart_warmup={restart_warmup!r} needs a "
                       "restart_period.")
    return []
  period = validation.as_int(restart_period, "restart_period", minimum=1)
  warmup = 0 if restart_warmup is None else validation.as_int(
      restart_warmup, "restart_warmup", minimum=1)
  if restart_warmup is not None and warmup >= period:
    raise ValueError(f"restart_warmup must be below restart_period="
                     f"{period} (tensorflow_privacy's rule), got {warmup}.")
  return [k - 1 for k in range(1, num_rounds + 1) if k % period == warmup]


@dataclasses.dataclass(frozen=True)
class TreeNoise(linear_noise.LinearNoise):
  """The released noise of a DP-FTRL run, in units of the node noise sigma:
  the tree's `linear_noise.LinearNoise`, one block per tree.

  Attributes:
    released, round_block: as `LinearNoise`'s; a block is a tree.
    efficient: True for Honaker's efficient tree.
    restart_period, restart_warmup: as given (None: no restart; warmup 0).
    prefix: [T, K] float64, A: the noise on the prefix sum of round t within
      its tree.
    call_index, call_level: [K] int, for each generator call its position
      among its tree's calls and its node's level.
  """

  efficient: bool
  restart_period: Optional[int]
  restart_warmup: Optional[int]
  prefix: np.ndarray
  call_index: np.ndarray
  call_level: np.ndarray
  kind: ClassVar[str] = "tree"

  @property
  def num_trees(self) -> int:
    return self.num_blocks

  def release_mu(self, noise_multiplier: float) -> float:
    """The node release's mu, one participation per tree
    (`tree_accounting.node_mu`): every node released, a participation on
    one leaf's path per tree."""
    return tree_accounting.node_mu(noise_multiplier, self.rounds_per_block)

  def claim(self, noise_multiplier: float, *,
            delta: float) -> tree_accounting.TreeEpsilons:
    """Both accountings of the tree, one participation per tree
    (`tree_accounting.tree_epsilons`)."""
    return tree_accounting.tree_epsilons(noise_multiplier,
                                         self.rounds_per_block, delta=delta)


def tree_noise(num_rounds: int, *, efficient: bool = True,
               restart_period: Optional[int] = None,
               restart_warmup: Optional[int] = None) -> TreeNoise:
  """The released noise of `TreeResidualSumQuery` over `num_rounds` rounds.

  Args:
    num_rounds: T >= 1.
    efficient: `use_efficient` of `build_l2_gaussian_query` (TFF's
      `tree_aggregation` default True; `tree_adaptive` uses the efficient
      tree).
    restart_period: the `period` of the `tfp.restart_query.
      PeriodicRoundRestartIndicator` of a `tfp.RestartQuery` around the tree
      query (TFF's `tree_adaptive`: 1024), or None for no restart (TFF's
      `tree_aggregation`).
    restart_warmup: its `warmup` (TFF's `tree_adaptive`: 128), or None.

  Raises:
    TypeError, ValueError: for a bad argument, naming it.
  """
  num_rounds = validation.as_int(num_rounds, "num_rounds", minimum=1)
  efficient = validation.as_bool(efficient, "efficient")
  restarts = set(restart_rounds(num_rounds, restart_period, restart_warmup))
  calls: list[_Call] = []
  trees = 0
  tree = _Tree(efficient, calls)
  prefix_rows: list[dict[int, float]] = []
  round_tree = np.zeros(num_rounds, dtype=np.int64)
  for t in range(num_rounds):
    round_tree[t] = trees
    prefix_rows.append(tree.cumsum_and_update())
    if t in restarts:
      trees += 1
      tree = _Tree(efficient, calls)
  prefix = np.zeros((num_rounds, len(calls)))
  for t, row in enumerate(prefix_rows):
    prefix[t, list(row)] = list(row.values())
  # Each round releases its prefix noise minus the previous round's in the
  # same tree.
  same_tree = np.r_[False, round_tree[1:] == round_tree[:-1]]
  released = prefix - np.where(same_tree[:, None], np.roll(prefix, 1, axis=0),
                               0.0)
  return TreeNoise(
      released=released, round_block=round_tree, efficient=efficient,
      restart_period=restart_period, restart_warmup=restart_warmup,
      prefix=prefix,
      call_index=np.array([c.index for c in calls], dtype=np.int64),
      call_level=np.array([c.level for c in calls], dtype=np.int64))


__all__ = ["TreeNoise", "restart_rounds", "tree_noise"]
