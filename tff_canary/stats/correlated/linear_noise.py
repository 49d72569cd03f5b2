"""Correlated noise as a known linear map B of independent node noises.

A mechanism with correlated noise releases, in round t,

    y_t = x_t + e_t,    e_t = sum_k B[t, k] xi_k,    xi_k iid N(0, sigma^2 I_d),

x_t the round's sum of clipped updates and B a known [rounds, nodes] matrix,
so that over the rounds each coordinate's noise is N(0, sigma^2 K) with the
rounds' covariance K = B B^T, the same for every coordinate and independent
across coordinates. Two mechanisms have this form:

* DP-FTRL's tree (Kairouz et al. 2021, arXiv 2103.00039): the nodes are the
  tree's nodes, more of them than rounds, and B is the tree's prefix
  combinations differenced (`tree_noise.TreeNoise`, a `LinearNoise`);
* a matrix mechanism in DP-FTRL's streaming form (Choquette-Choo et al.
  2023, arXiv 2306.08153; Denisov et al. 2022): y = x + C^-1 xi for a
  lower-triangular invertible strategy C, so B = C^-1 is square, one node
  per round (banded or buffered-linear-Toeplitz C: docs/method/dp-ftrl.md).

The statistics (`tree_statistics`), the epsilons they are compared with
(`tree_targets`) and the audit (`tree_audit`) need only what this class
holds: B, K, the blocks of rounds whose noises are independent (the tree's
restarts; a matrix mechanism restarted every epoch), and the accounting of
the full release for one participation per epoch (`release_mu`, `claim`).
For a square invertible B the release is the rounds themselves (y and
B^-1 y = B^-1 x + xi determine each other), so that accounting follows from
K: a participant in round t of each epoch e has GDP mu
sqrt(sum_e max_{t in e} (K_e^-1)_tt) / z (Dong, Roth & Su 2019, arXiv
1905.02383, Cor. 3.3). A non-square B (the tree) has more nodes than rounds
and its own accounting: a subclass gives it.

NumPy/SciPy only.
"""

from __future__ import annotations

import dataclasses
from typing import Optional, Sequence

import numpy as np
import numpy.typing as npt
from scipy import linalg

from tff_canary.stats.accounting import gaussian_accounting
from tff_canary.stats.correlated import tree_statistics
from tff_canary.stats import validation


@dataclasses.dataclass(frozen=True)
class LinearEpsilons:
  """The analytical epsilon of a square B released for one participation
  per epoch (module docstring).

  Attributes:
    epsilon: the exact epsilon of `mu` at delta (Balle & Wang 2018, Thm 8).
    mu: `LinearNoise.release_mu`.
    noise_multiplier, delta: as given.
    rounds_per_block: the rounds of each epoch.
  """

  epsilon: float
  mu: float
  noise_multiplier: float
  delta: float
  rounds_per_block: tuple[int, ...]

  def __str__(self) -> str:
    return (f"analytical ε = {self.epsilon:.4g} (exact, the rounds, "
            f"μ = {self.mu:.4g}); z = {self.noise_multiplier:g}, "
            f"δ = {self.delta:g}, {len(self.rounds_per_block)} epochs of "
            f"{sorted(set(self.rounds_per_block))} rounds")


@dataclasses.dataclass(frozen=True)
class LinearNoise:
  """Released noise e = B xi in units of the node noise sigma (module docstring).

  Attributes:
    released: [T, K] float64, B: round t's released noise is
      sum_k released[t, k] xi_k, xi_k iid node noises.
    round_block: [T] int, the block of each round (0, 1, ... in order of
      their first round): the claim is that rounds of different blocks share
      no node, so their noises are independent (the tree's restarts).
  """

  released: np.ndarray
  round_block: np.ndarray

  def __post_init__(self):
    b, blocks = self.released, self.round_block
    if (not isinstance(b, np.ndarray) or b.ndim != 2 or b.shape[0] == 0
        or b.shape[1] == 0):
      raise ValueError(f"released must be a [rounds, nodes] array, got "
                       f"{validation.show(b)}.")
    if (not isinstance(blocks, np.ndarray) or blocks.shape != (b.shape[0],)
        or not np.issubdtype(blocks.dtype, np.integer)):
      raise ValueError(f"round_block must be an integer array of one block "
                       f"per round ({b.shape[0]}), got "
                       f"{validation.show(blocks)}.")

  @property
  def num_rounds(self) -> int:
    """T, rounds released."""
    return int(self.released.shape[0])

  @property
  def num_nodes(self) -> int:
    """K, independent node noises."""
    return int(self.released.shape[1])

  @property
  def covariance(self) -> np.ndarray:
    """K = B B^T, [T, T]: the rounds' noise covariance over sigma^2."""
    return self.released @ self.released.T

  @property
  def correlation(self) -> np.ndarray:
    """K scaled to unit diagonal: the covariance of per-round z-scores."""
    k = self.covariance
    s = 1.0 / np.sqrt(np.diag(k))
    return k * s[:, None] * s[None, :]

  @property
  def num_blocks(self) -> int:
    return int(self.round_block.max()) + 1

  def block_starts(self) -> list[int]:
    """The first round of each block, in order."""
    return np.flatnonzero(np.diff(self.round_block, prepend=-1)).tolist()

  def final_variance(self) -> float:
    """1^T K 1: the variance over sigma^2 of the noise on the sum of all rounds."""
    total = self.released.sum(axis=0)
    return float(total @ total)

  def with_coefficients(self, released: np.ndarray) -> "LinearNoise":
    """The same structure with other released coefficients (a planted bug)."""
    return dataclasses.replace(self, released=np.asarray(released, float))

  def whiten(self, noise: npt.ArrayLike) -> np.ndarray:
    """L^-1 noise, K = L L^T: rows are rounds. Noise B Xi (Xi iid N(0, 1))
    becomes iid N(0, 1); whitening mixes rounds, never columns."""
    return whiten(np.asarray(noise, dtype=np.float64), self.covariance)

  def release_mu(self, noise_multiplier: float,
                 epochs: npt.ArrayLike) -> float:
    """The GDP mu of the mechanism's full release for a participant in at
    most one round of each epoch (module docstring): for a square B, the
    rounds' worst case (`tree_statistics.worst_case_mu`).

    Args:
      noise_multiplier: z > 0, the node noise over the clip.
      epochs: [rounds, epochs] Boolean or 0/1 (`tree_statistics.
        epoch_matrix`).
    """
    if self.num_nodes != self.num_rounds:
      raise ValueError(
          f"released is [{self.num_rounds}, {self.num_nodes}], not square: "
          "its nodes are not its rounds, so its accounting is the "
          "mechanism's own (a LinearNoise subclass gives release_mu and "
          "claim, as tree_noise.TreeNoise does).")
    e = np.asarray(epochs)
    return tree_statistics.worst_case_mu(
        self.covariance, e if e.dtype == bool else e != 0,
        noise_multiplier=noise_multiplier)

  def claim(self, noise_multiplier: float, epochs: npt.ArrayLike, *,
            delta: float) -> LinearEpsilons:
    """The analytical epsilon at delta of `release_mu` (what the audit tests)."""
    delta = validation.as_open_unit(delta, "delta")
    mu = self.release_mu(noise_multiplier, epochs)
    return LinearEpsilons(
        epsilon=gaussian_accounting.gaussian_epsilon_of_mu(mu, delta), mu=mu,
        noise_multiplier=float(noise_multiplier), delta=delta,
        rounds_per_block=tuple(
            int(n) for n in np.asarray(epochs).sum(axis=0)))


def whiten(noise: np.ndarray, covariance: np.ndarray) -> np.ndarray:
  """L^-1 noise with K = L L^T the Cholesky factor: rows are rounds."""
  factor = np.linalg.cholesky(covariance)
  return linalg.solve_triangular(factor, noise, lower=True)


def _blocks_of(b: np.ndarray) -> np.ndarray:
  """The connected blocks of rounds that share a node, numbered in order."""
  used = b != 0.0
  parent = list(range(b.shape[0]))

  def root(t):
    while parent[t] != t:
      parent[t] = parent[parent[t]]
      t = parent[t]
    return t

  for k in range(b.shape[1]):
    rounds = np.flatnonzero(used[:, k])
    for t in rounds[1:]:
      parent[root(int(t))] = root(int(rounds[0]))
  labels: dict[int, int] = {}
  return np.array([labels.setdefault(root(t), len(labels))
                   for t in range(b.shape[0])], dtype=np.int64)


def linear_noise(released: npt.ArrayLike,
                 round_block: Optional[npt.ArrayLike] = None) -> LinearNoise:
  """A `LinearNoise` from its coefficients B.

  Args:
    released: [rounds, nodes] B, finite.
    round_block: [rounds] int, each round's block; default the connected
      blocks of rounds that share a node (so a B without restarts is one
      block, a block-diagonal B one block per diagonal block).

  Raises:
    ValueError: for a bad argument, naming it.
  """
  b = np.array(released, dtype=np.float64)
  if b.ndim != 2 or 0 in b.shape or not np.all(np.isfinite(b)):
    raise ValueError(f"released must be a finite [rounds, nodes] array, got "
                     f"shape {b.shape}.")
  if round_block is None:
    return LinearNoise(released=b, round_block=_blocks_of(b))
  blocks = np.asarray(round_block)
  if blocks.shape != (b.shape[0],) or not np.issubdtype(blocks.dtype,
                                                        np.integer):
    raise ValueError(f"round_block must be one integer per round "
                     f"({b.shape[0]}), got dtype {blocks.dtype} and shape "
                     f"{blocks.shape}.")
  blocks = blocks.astype(np.int64)
  for k in range(b.shape[1]):
    shared = np.unique(blocks[b[:, k] != 0.0])
    if shared.size > 1:
      raise ValueError(f"round_block puts rounds that share node {k} in "
                       f"blocks {shared.tolist()}: noises of different "
                       "blocks must be independent.")
  return LinearNoise(released=b, round_block=blocks)


def split_tensors(noise: np.ndarray,
                  sizes: Sequence[int]) -> list[list[np.ndarray]]:
  """[T, d] rows (a value's tensors side by side) -> T rounds of the tensors
  of `sizes`: `noise_stats.check_noise`'s input, so that its tests between
  tensors run (a self-test's whitened noise keeps each coordinate's column,
  so it splits like the released noise)."""
  noise = np.asarray(noise)
  sizes = [validation.as_int(n, f"sizes[{k}]", minimum=1)
           for k, n in enumerate(sizes)]
  if noise.ndim != 2 or sum(sizes) != noise.shape[1]:
    raise ValueError(f"the tensor sizes {sizes} must add up to the noise's "
                     f"coordinates, got noise of shape {noise.shape}.")
  edges = np.cumsum([0] + sizes)
  return [[row[a:b] for a, b in zip(edges[:-1], edges[1:])] for row in noise]


__all__ = ["LinearEpsilons", "LinearNoise", "linear_noise", "split_tensors",
           "whiten"]
