"""Correlated noise as a known linear map B of independent node noises.

A mechanism with correlated noise releases, in round t,

    y_t = x_t + e_t,    e_t = sum_k B[t, k] xi_k,    xi_k iid N(0, sigma^2 I_d),

x_t the round's sum of clipped updates and B a known [rounds, nodes] matrix,
so that over the rounds each coordinate's noise is N(0, sigma^2 K) with the
rounds' covariance K = B B^T, independent across coordinates. DP-FTRL's tree
(Kairouz et al. 2021, arXiv 2103.00039; `tree_noise.TreeNoise`) has this
form, as does a matrix mechanism in streaming form (Choquette-Choo et al.
2023, arXiv 2306.08153; Denisov et al. 2022): y = x + C^-1 xi for a
lower-triangular invertible strategy C, so B = C^-1 is square.

`LinearNoise` holds B, K (its Cholesky factor and K^-1 computed once) and
the blocks of rounds whose noises are independent (the tree's restarts),
each participant in at most one round of each block; the statistics, the
targets, the audit and the simulated runs of this package use nothing
else (docs/method/dp-ftrl.md). For a square invertible B the release's own
accounting is the rounds' worst case (`release_mu`, `claim`): y and
B^-1 y = B^-1 x + xi determine each other. A non-square B (the tree) has
its own accounting: a subclass gives it.

NumPy/SciPy only.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from typing import ClassVar, Sequence

import numpy as np
import numpy.typing as npt
from scipy import linalg, sparse
from scipy.sparse import csgraph

from tff_canary.stats.accounting import gaussian_accounting
from tff_canary.stats import validation


@dataclasses.dataclass(frozen=True)
class LinearEpsilons:
  """The analytical epsilon of a square B released for one participation
  per block (module docstring).

  Attributes:
    epsilon: the exact epsilon of `mu` at delta (Balle & Wang 2018, Thm 8).
    mu: `LinearNoise.release_mu`.
    noise_multiplier, delta: as given.
    rounds_per_block: the rounds of each block (epoch).
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

  @property
  def rdp_epsilon(self) -> None:
    """No Rényi-DP account: the GDP epsilon above is exact."""
    return None

  def rows(self) -> list[tuple[str, float, str]]:
    """(name, epsilon, detail) of the claim, as a report shows it."""
    epochs = len(self.rounds_per_block)
    return [(f"DP-FTRL, {epochs} epoch{'s' if epochs > 1 else ''} (exact GDP, "
             "μ = sens / z)", self.epsilon,
             "what the accounting guarantees: the rounds released as C x + ξ, "
             "restarted every epoch, sens = max over one round per epoch of "
             "‖C a‖")]


def _frozen(array: np.ndarray) -> np.ndarray:
  array.setflags(write=False)
  return array


@dataclasses.dataclass(frozen=True)
class LinearNoise:
  """Released noise e = B xi in units of the node noise sigma (module docstring).

  Attributes:
    released: [T, K] float64, B: round t's released noise is
      sum_k released[t, k] xi_k, xi_k iid node noises. Not to be changed in
      place: K, its factor and K^-1 are computed once (`with_coefficients`).
    round_block: [T] int, the block of each round (0, 1, ... in order of
      their first round): the claim is that rounds of different blocks share
      no node, so their noises are independent (the tree's restarts).
  """

  released: np.ndarray
  round_block: np.ndarray
  # What the noise is called in the audit's and self-test's text ("tree",
  # "matrix"; the subclasses').
  kind: ClassVar[str] = "correlated"

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

  @functools.cached_property
  def covariance(self) -> np.ndarray:
    """K = B B^T, [T, T], read-only: the rounds' noise covariance / sigma^2."""
    return _frozen(self.released @ self.released.T)

  @property
  def correlation(self) -> np.ndarray:
    """K scaled to unit diagonal: the covariance of per-round z-scores."""
    k = self.covariance
    s = 1.0 / np.sqrt(np.diag(k))
    return k * s[:, None] * s[None, :]

  @functools.cached_property
  def _factor(self):
    try:
      return linalg.cho_factor(self.covariance, lower=True)
    except linalg.LinAlgError as error:
      raise ValueError("the covariance is not positive definite: the rounds' "
                       "noises are linearly dependent, so no statistic is "
                       "defined by it.") from error

  def solve(self, values: np.ndarray) -> np.ndarray:
    """K^-1 values (Cholesky), values [T, ...]."""
    return linalg.cho_solve(self._factor, values)

  @functools.cached_property
  def precision(self) -> np.ndarray:
    """K^-1, [T, T], read-only."""
    return _frozen(self.solve(np.eye(self.num_rounds)))

  @property
  def num_blocks(self) -> int:
    return int(self.round_block.max()) + 1

  def block_starts(self) -> list[int]:
    """The first round of each block, in order."""
    return np.flatnonzero(np.diff(self.round_block, prepend=-1)).tolist()

  def epochs(self, rounds_per_epoch: int) -> np.ndarray:
    """E, [rounds, epochs] Boolean (`epoch_matrix`), after checking that the
    noise restarts after every epoch: one block per epoch, as every
    accounting of one participation per epoch assumes."""
    per = validation.as_int(rounds_per_epoch, "rounds_per_epoch", minimum=1)
    if not np.array_equal(self.round_block,
                          np.arange(self.num_rounds) // per):
      raise ValueError(
          f"the claimed noise must restart after every epoch of "
          f"rounds_per_epoch={per} rounds (the accounting assumes one block, "
          f"e.g. one tree, per epoch); its blocks start at rounds "
          f"{self.block_starts()[:8]}.")
    return epoch_matrix(self.num_rounds, per)

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

  def worst_case_rounds(self) -> np.ndarray:
    """a*, [blocks] int: the round t_b of each block with the largest
    (K^-1)_tt (the first on ties), the pattern `worst_case_mu` is of.

    A participant, or canary, in these rounds (one per block) is the one the
    released rounds reveal most about: `gls_statistics.schedule_mu` of the
    pattern is `worst_case_mu` (the worst-case placement of canaries,
    `tree_simulation.simulate`'s `placement`). For the plain tree a* is
    round 0 of every tree; for a square B = C^-1 restarted every block, the
    round of C_b's largest column norm (round 0 of each block for a
    Toeplitz C with non-increasing coefficients).

    Raises:
      ValueError: if K correlates rounds of different blocks.
    """
    blocks = self.round_block
    k = self.covariance
    if np.any(np.abs(k[blocks[:, None] != blocks[None, :]])
              > 1e-12 * np.abs(k).max()):
      raise ValueError("the covariance correlates rounds of different "
                       "blocks: their noises are not independent.")
    precision = np.diag(self.precision)
    return np.array([int(rounds[np.argmax(precision[rounds])])
                     for rounds in (np.flatnonzero(blocks == i)
                                    for i in range(self.num_blocks))
                     if rounds.size], dtype=np.int64)

  def worst_case_mu(self, noise_multiplier: float) -> float:
    """sqrt(sum_b max_{t in b} (K^-1)_tt) / z: the rounds' mu for the worst case.

    What the released rounds reveal (GDP; Dong, Roth & Su 2019, arXiv
    1905.02383, Thm 2.7) about the participant they reveal most about, among
    those in at most one round per block (Kairouz et al. 2021, arXiv
    2103.00039, Appendix D): K is block-diagonal, so `gls_statistics.
    schedule_mu` of one round t_b per block is sqrt(sum_b (K_b^-1)_{t_b t_b})
    / z, largest as above, attained in `worst_case_rounds`. The rounds are a
    post-processing of the nodes, so the node release's mu bounds it (for
    the tree `tree_accounting.node_mu`: equal for the plain tree, smaller
    for Honaker's efficient tree). For B = C^-1 (nodes = rounds) it is
    sqrt(sum_b max_t ||C_b e_t||^2) / z.
    """
    z = validation.as_positive(noise_multiplier, "noise_multiplier")
    rounds = self.worst_case_rounds()
    return math.sqrt(float(np.diag(self.precision)[rounds].sum())) / z

  @property
  def participation_rule(self):
    """The claimed participation rule its audit checks every candidate's
    schedule against, or None: one participation per block, which the
    blocks themselves state (`separation.SeparatedNoise` has one)."""
    return None

  def worst_case_formula(self) -> str:
    """`worst_case_mu` as a formula, for reports."""
    if self.num_blocks == 1:
      return "√(max_t (K⁻¹)_tt) / z"
    return "√(Σ_e max_t (K_e⁻¹)_tt) / z, one round per epoch"

  def release_mu(self, noise_multiplier: float) -> float:
    """The GDP mu of the mechanism's full release for a participant in at
    most one round of each block (module docstring): for a square B, the
    rounds' worst case (`worst_case_mu`)."""
    if self.num_nodes != self.num_rounds:
      raise ValueError(
          f"released is [{self.num_rounds}, {self.num_nodes}], not square: "
          "its nodes are not its rounds, so its accounting is the "
          "mechanism's own (a LinearNoise subclass gives release_mu and "
          "claim, as tree_noise.TreeNoise does).")
    return self.worst_case_mu(noise_multiplier)

  def claim(self, noise_multiplier: float, *,
            delta: float) -> LinearEpsilons:
    """The analytical epsilon at delta of `release_mu` (what the audit tests)."""
    delta = validation.as_open_unit(delta, "delta")
    mu = self.release_mu(noise_multiplier)
    return LinearEpsilons(
        epsilon=gaussian_accounting.gaussian_epsilon_of_mu(mu, delta), mu=mu,
        noise_multiplier=float(noise_multiplier), delta=delta,
        rounds_per_block=self.rounds_per_block)

  @property
  def rounds_per_block(self) -> tuple[int, ...]:
    return tuple(int(n) for n in np.bincount(self.round_block))


def as_linear_noise(noise: LinearNoise, name: str = "noise") -> LinearNoise:
  """`noise`, after checking that it is a `LinearNoise`."""
  if not isinstance(noise, LinearNoise):
    raise TypeError(f"{name} must be a linear_noise.LinearNoise (DP-FTRL's "
                    f"tree: a tree_noise.TreeNoise), got "
                    f"{type(noise).__name__}.")
  return noise


def epoch_matrix(num_rounds: int, rounds_per_epoch: int) -> np.ndarray:
  """E, [rounds, epochs] Boolean: which epoch each round is in (the last may be short)."""
  num_rounds = validation.as_int(num_rounds, "num_rounds", minimum=1)
  per = validation.as_int(rounds_per_epoch, "rounds_per_epoch", minimum=1)
  e = np.zeros((num_rounds, -(-num_rounds // per)), dtype=bool)
  e[np.arange(num_rounds), np.arange(num_rounds) // per] = True
  return e


def whiten(noise: np.ndarray, covariance: np.ndarray) -> np.ndarray:
  """L^-1 noise with K = L L^T the Cholesky factor: rows are rounds."""
  factor = np.linalg.cholesky(covariance)
  return linalg.solve_triangular(factor, noise, lower=True)


def linear_noise(released: npt.ArrayLike,
                 round_block: npt.ArrayLike | None = None) -> LinearNoise:
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
    # Rounds and nodes as one graph, rounds first: its components' labels
    # come in order of their first round.
    used = sparse.csr_matrix(b != 0.0)
    graph = sparse.bmat([[None, used], [used.T, None]])
    labels = csgraph.connected_components(graph, directed=False)[1]
    return LinearNoise(released=b, round_block=labels[:b.shape[0]]
                       .astype(np.int64))
  noise = LinearNoise(released=b, round_block=np.asarray(round_block))
  for k in range(b.shape[1]):
    shared = np.unique(noise.round_block[b[:, k] != 0.0])
    if shared.size > 1:
      raise ValueError(f"round_block puts rounds that share node {k} in "
                       f"blocks {shared.tolist()}: noises of different "
                       "blocks must be independent.")
  return noise


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


__all__ = ["LinearEpsilons", "LinearNoise", "as_linear_noise", "epoch_matrix",
           "linear_noise", "split_tensors", "whiten"]
