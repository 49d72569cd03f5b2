"""Buffered linear Toeplitz (BLT) strategies: a Toeplitz C with a few buffers.

A BLT (Dvijotham et al. 2024, "Efficient and Near-Optimal Noise Generation
for Streaming Differential Privacy", arXiv 2404.16706) with output
scales omega_i and buffer decays theta_i, i = 1 .. m, is the lower-triangular
Toeplitz C with coefficients

    c_0 = 1,    c_t = sum_i omega_i theta_i^(t-1)   (t >= 1),

that is c(x) = 1 + sum_i omega_i x / (1 - theta_i x), a rational function
of degree m. Its inverse is again a BLT with m buffers (Dvijotham et al.
2024, Lemma 5.2; in closed form McMahan & Pillutla 2025, "An Inversion
Theorem for Buffered Linear Toeplitz (BLT) Matrices", arXiv 2504.21413,
Thm 2): writing c(x) = 1 + x omega^T (I - x Theta)^-1 1,
Sherman-Morrison gives 1 / c(x) = 1 - x omega^T (I - x (Theta - 1 omega^T))^-1
1, so the inverse's decays theta^ are the eigenvalues of Theta - 1 omega^T
and its scales are

    omega^_i = prod_j (theta^_i - theta_j) / prod_{j != i} (theta^_i - theta^_j)

(the theorem's closed form; `BLT.inverse`). Multiplying by C or C^-1 in a
stream needs one buffer (a vector of the model's size) per pair
(`streaming.BltNoise`; McMahan, Xu & Zhang 2024, arXiv 2408.08868, Alg. 2-3).

With omega_i > 0, theta_i in (0, 1) and sum_i omega_i <= 1 the coefficients
are positive and non-increasing (c_1 = sum_i omega_i <= c_0), the condition
under which `sensitivity` finds the worst case by the strategy's structure.

NumPy only.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

from tff_canary.stats import validation


@dataclasses.dataclass(frozen=True)
class BLT:
  """A BLT strategy (module docstring); build it with `blt`.

  Attributes:
    output_scale: [m] float64, omega.
    buf_decay: [m] float64, theta, distinct.
  """

  output_scale: np.ndarray
  buf_decay: np.ndarray

  @property
  def num_buffers(self) -> int:
    return int(self.buf_decay.size)

  def coefficients(self, rounds: int) -> np.ndarray:
    """c_0 .. c_{rounds-1}: 1, then sum_i omega_i theta_i^(t-1)."""
    n = validation.as_int(rounds, "rounds", minimum=1)
    powers = self.buf_decay[None, :] ** np.arange(n - 1)[:, None]
    return np.concatenate([[1.0], powers @ self.output_scale])

  def inverse(self) -> "BLT":
    """The BLT of C^-1 (McMahan & Pillutla 2025, Thm 2; module docstring).

    Raises:
      ValueError: if Theta - 1 omega^T has complex or repeated eigenvalues
        (the inverse is then no BLT with real parameters).
    """
    theta, omega = self.buf_decay, self.output_scale
    eigenvalues = np.linalg.eigvals(np.diag(theta) - np.outer(
        np.ones_like(theta), omega))
    if np.max(np.abs(eigenvalues.imag), initial=0.0) > 1e-9:
      raise ValueError(f"the inverse of {self} has complex buffer decays "
                       f"{validation.show(eigenvalues.tolist())}; it is no "
                       "real BLT (McMahan & Pillutla 2025, Thm 1 gives "
                       "conditions that avoid this).")
    theta_hat = np.sort(eigenvalues.real)[::-1]
    _check_distinct(theta_hat, "the inverse's buf_decay")
    gaps = theta_hat[:, None] - theta_hat[None, :]
    np.fill_diagonal(gaps, 1.0)
    omega_hat = (np.prod(theta_hat[:, None] - theta[None, :], axis=1)
                 / np.prod(gaps, axis=1))
    return BLT(output_scale=omega_hat, buf_decay=theta_hat)

  def __str__(self) -> str:
    return (f"BLT(output_scale={self.output_scale.tolist()}, "
            f"buf_decay={self.buf_decay.tolist()})")


def _check_distinct(theta: np.ndarray, name: str) -> None:
  if theta.size > 1:
    gap = np.min(np.diff(np.sort(theta)))
    if gap < 1e-9:
      raise ValueError(f"{name} must hold distinct values (at least 1e-9 "
                       f"apart), got {validation.show(theta.tolist())}.")


def blt(output_scale: Any, buf_decay: Any) -> BLT:
  """A `BLT` from its scales omega and decays theta (one per buffer).

  Raises:
    TypeError, ValueError: for a bad argument, naming it: different lengths,
      non-finite values, repeated decays, or a decay outside (-1, 1) (whose
      coefficients do not decay).
  """
  omega = validation.as_sample(output_scale, "output_scale", min_size=1)
  theta = validation.as_sample(buf_decay, "buf_decay", min_size=1)
  if omega.size != theta.size:
    raise ValueError(f"output_scale and buf_decay must have one value per "
                     f"buffer each, got {omega.size} and {theta.size}.")
  outside = np.flatnonzero(np.abs(theta) >= 1.0)
  if outside.size:
    i = int(outside[0])
    raise ValueError(f"buf_decay must lie in (-1, 1), but buf_decay[{i}] = "
                     f"{validation.show(theta[i])}.")
  _check_distinct(theta, "buf_decay")
  order = np.argsort(theta)[::-1]
  return BLT(output_scale=omega[order], buf_decay=theta[order])


__all__ = ["BLT", "blt"]
