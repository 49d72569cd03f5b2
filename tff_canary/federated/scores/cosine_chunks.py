"""All-iterates cosines of a block of canaries with a chunk of rounds.

docs/method/null-law.md (Andrew et al., ICLR 2024, arXiv 2302.03098, Section 3): the
all-iterates statistic of canary j is m_j = max over rounds r of
cos(c_j, a_r), a_r the round's noised aggregate. Both ways of computing it,
after training (`tff_canary.federated.scores.cosine_pass`) and while training goes on
(`tff_canary.federated.scores.cosine_stream`), take it the same way, with the
functions here:

  * `row_norms(rows)`: |a_r| per row, accumulated in float64;
  * `round_cosines(block, rows, norms)`: the [canaries, rounds] float32
    cosines of a block of unit canaries with a chunk of rows, one GEMM times
    1 / |a_r| (float32; a zero row gets 0, so its cosines are 0, the null's
    mean). This is the one place where the rows meet the canaries. With a
    `known_canary_removal.ChunkRemoval` the rows are a'_r, the chunk's
    aggregates without the inserted canaries (`take_chunk` forms them), and
    the cosines are the corrected ones of `tff_canary.stats.estimators.known_canaries`;
  * `RunningMax.update`: per canary the running max and its round, the first
    round attaining it (rounds come in increasing order; strict `>`).

So the result depends only on which canaries form a block and which rounds
form a chunk, never on the order the (block, chunk) pairs are visited: a
post-training pass with the stream's plan gives the stream's table bit for
bit (tests/test_cosine_stream.py). With another plan the GEMMs have other
shapes and may sum in another order; the difference is then bounded by
`reorder_bound` (Higham, "Accuracy and Stability of Numerical Algorithms",
2nd ed., Eq. 3.5: |fl(x.y) - x.y| <= gamma_d sum |x_i y_i|, gamma_d =
d u / (1 - d u), u = 2^-24, for ANY summation order, so two orders differ by
at most twice that).

NumPy; the canaries themselves come from `canary_directions`.
"""

from __future__ import annotations

import dataclasses
import os
from typing import Callable, Iterable

import numpy as np

from tff_canary.federated.scores import known_canary_removal
from tff_canary.stats import atomic_files
from tff_canary.stats import validation

_UNIT_ROUNDOFF = 2.0 ** -24


def row_norms(rows: np.ndarray) -> np.ndarray:
  """float64 [n]: |row|, the squares summed in float64.

  Raises:
    ValueError: if a row holds a non-finite value.
  """
  squares = np.einsum("ij,ij->i", rows, rows, dtype=np.float64)
  if not np.all(np.isfinite(squares)):
    raise ValueError("aggregates hold non-finite values.")
  return np.sqrt(squares)


def inverse_norms(norms: np.ndarray) -> np.ndarray:
  """float32 [n]: 1 / norm, 0 for a zero norm."""
  zero = norms == 0.0
  return np.where(zero, 0.0, 1.0 / np.where(zero, 1.0, norms)).astype(
      np.float32)


def round_cosines(block: np.ndarray, rows: np.ndarray, norms: np.ndarray,
                  *, block_ids: np.ndarray | None = None,
                  removal: known_canary_removal.ChunkRemoval | None = None
                  ) -> np.ndarray:
  """float32 [len(block), len(rows)]: cos(c_j, a_r) for unit canaries c_j.

  The single place where aggregates meet canaries (module docstring). With
  `removal` (and the `block_ids` of the block), `rows` are a'_r and `norms`
  their norms, and the cosines are corrected (`ChunkRemoval.cosines`).
  """
  dots = block @ rows.T
  if removal is None:
    return dots * inverse_norms(norms)
  return removal.cosines(dots, block_ids, norms)


def reorder_bound(block: np.ndarray, rows: np.ndarray,
                  norms: np.ndarray) -> np.ndarray:
  """Largest difference of `round_cosines` between two summation orders.

  2 gamma_d sum_i |c_i a_i| / |a| (Higham Eq. 3.5, twice: each order is
  within gamma_d of the exact dot product), plus 2 u |cos| for the rounding
  of the product with 1/|a|, computed in float64.
  """
  d = block.shape[1]
  gamma = d * _UNIT_ROUNDOFF / (1.0 - d * _UNIT_ROUNDOFF)
  inv = inverse_norms(norms)
  absolute = (np.abs(block).astype(np.float64)
              @ np.abs(rows).astype(np.float64).T) * inv
  return 2.0 * gamma * absolute + 2.0 * _UNIT_ROUNDOFF * np.abs(
      round_cosines(block, rows, norms)).astype(np.float64)


@dataclasses.dataclass
class RunningMax:
  """Per canary the max cosine over the rounds seen so far, and its round.

  Attributes:
    best: float32 [m], -inf for a canary that has seen no round.
    best_round: int64 [m], -1 for a canary that has seen no round.
    end: The rounds 0..end-1 have been taken (the chunk cursor).
  """

  best: np.ndarray
  best_round: np.ndarray
  end: int = 0

  @classmethod
  def empty(cls, num_canaries: int) -> RunningMax:
    m = validation.as_int(num_canaries, "num_canaries", minimum=1)
    return cls(np.full(m, -np.inf, np.float32), np.full(m, -1, np.int64), 0)

  def update(self, block_ids: np.ndarray, cosines: np.ndarray,
             round_ids: np.ndarray) -> None:
    """Takes a block's cosines [len(block_ids), len(round_ids)] in.

    The rounds of successive calls for a block must increase, so that a tie
    keeps the first round (np.argmax and the strict `>` both keep it).
    """
    if not cosines.size:
      return
    arg = np.argmax(cosines, axis=1)
    value = cosines[np.arange(block_ids.size), arg]
    top = self.best[block_ids]
    better = value > top
    top[better] = value[better]
    rounds = self.best_round[block_ids]
    rounds[better] = round_ids[arg[better]]
    self.best[block_ids] = top
    self.best_round[block_ids] = rounds

  def save(self, path: str | os.PathLike) -> None:
    """Writes the state atomically (NPZ)."""
    atomic_files.save_npz(path, best=self.best, best_round=self.best_round,
                          end=np.int64(self.end))

  @classmethod
  def load(cls, path: str | os.PathLike, num_canaries: int) -> RunningMax:
    """Reads a state written by `save`; checks it has `num_canaries`."""
    path = os.fspath(path)
    try:
      with np.load(path) as data:
        state = cls(np.asarray(data["best"], np.float32),
                    np.asarray(data["best_round"], np.int64),
                    int(data["end"]))
    except (OSError, ValueError, KeyError) as e:
      raise ValueError(f"{path} is not a running-max state: {e}") from None
    if state.best.shape != (num_canaries,) or state.best_round.shape != (
        num_canaries,):
      raise ValueError(f"{path} holds {state.best.shape} canaries, expected "
                       f"{num_canaries}.")
    return state


def take_chunk(running: RunningMax,
               blocks: Iterable[tuple[np.ndarray, np.ndarray]],
               rows: np.ndarray, round_ids: np.ndarray,
               removal: known_canary_removal.ChunkRemoval | None = None,
               canary: Callable[[int], np.ndarray] | None = None) -> None:
  """All canary blocks against one chunk of rows, into `running`.

  Args:
    running: The state; its `end` becomes round_ids[-1] + 1.
    blocks: Iterable of (block_ids, unit canary block [len(ids), dim]).
    rows: float32 [len(round_ids), dim], the chunk's aggregates (overwritten
      by a'_r with `removal`).
    round_ids: The rounds of `rows`, increasing, all >= running.end.
    removal: The chunk's known-canary removal, or None.
    canary: For the removal: a function of a canary id giving its unit
      vector (bitwise `canary_directions`'), or None to generate it.
  """
  round_ids = np.asarray(round_ids, np.int64)
  if round_ids.size and round_ids[0] < running.end:
    raise ValueError(f"round {round_ids[0]} was already taken (the cursor is "
                     f"at {running.end}).")
  if removal is not None:
    rows = removal.residual(rows, out=rows, canary=canary)
  norms = row_norms(rows)
  for block_ids, block in blocks:
    running.update(block_ids, round_cosines(
        block, rows, norms, block_ids=block_ids, removal=removal), round_ids)
  if round_ids.size:
    running.end = int(round_ids[-1]) + 1
