"""Removing the other inserted canaries from a canary's statistic
(docs/method/estimates.md, "Other canaries are noise: removing them": why,
when it is exact, and where it is used).

With k inserted canaries in one aggregate, every other canary is noise for
canary j's cosine: in the Gaussian mechanism rho = sum_{i in I} c_i + sigma z
(Andrew et al., "One-shot Empirical Privacy Estimation for Federated
Learning", ICLR 2024, arXiv 2302.03098, Section 3 and Theorem 3.3), the
inserted mean cosine is about 1 / sqrt(sigma^2 d + k). The auditor knows
every inserted canary, each round it took part in and that round's scale s_r
(C_r / clients_per_round in DP-FedAvg; 1 in the Gaussian mechanism). With S_r
the canaries inserted in round r and a_r the round's aggregate as the server
applies it (docs/method/sign-convention.md),

    a'_r = a_r - s_r sum_{i in S_r} c_i

is the aggregate without any inserted canary, and canary j's statistic is
taken against the aggregate in which j alone is inserted:

    b_{j,r} = a'_r + [j in S_r] s_r c_j,
    cos(c_j, b_{j,r}) = (c_j.a'_r + [j in S_r] s_r)
                        / sqrt(|a'_r|^2 + [j in S_r] (2 s_r c_j.a'_r + s_r^2))

(|c_j| = 1): `corrected_cosines`, with no per-canary d-vector. Held-out
canaries (never in S_r) get cos(c_j, a'_r). In the Gaussian mechanism
b_{j,r} is exactly the output of the mechanism run with canary j alone (same
noise), whatever k is.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt


def _check_finite(array: np.ndarray, name: str, nonnegative: bool) -> None:
  bad = ~np.isfinite(array)
  if nonnegative:
    bad |= array < 0
  if bad.any():
    index = tuple(int(i) for i in np.argwhere(bad)[0])
    need = "finite and nonnegative" if nonnegative else "finite"
    raise ValueError(f"{name} must be {need}, but {name}{list(index)} = "
                     f"{array[index]}.")


def corrected_cosines(dots: npt.ArrayLike, residual_norms: npt.ArrayLike,
                      scales: npt.ArrayLike,
                      own: npt.ArrayLike) -> np.ndarray:
  """cos(c_j, a'_r + [own] s_r c_j) from c_j.a'_r and |a'_r| (module docstring).

  All arguments broadcast together (e.g. dots [canaries, rounds] with
  residual_norms and scales [rounds] and own [canaries, rounds]).

  Args:
    dots: c_j . a'_r for unit canaries c_j, finite.
    residual_norms: |a'_r| >= 0, finite.
    scales: s_r >= 0, the scale at which an inserted canary enters a_r.
    own: Boolean, True where canary j was inserted in round r.

  Returns:
    float64 cosines clipped to [-1, 1]. A zero vector b_{j,r} (a'_r = 0 and
    not own, or s_r = 0 too) gives 0, the null's mean, as in the cosine pass.

  Raises:
    ValueError: for non-finite dots or norms, or negative norms or scales.
  """
  dots = np.asarray(dots, np.float64)
  norms = np.asarray(residual_norms, np.float64)
  scales = np.asarray(scales, np.float64)
  own = np.asarray(own, bool)
  _check_finite(dots, "dots", nonnegative=False)
  _check_finite(norms, "residual_norms", nonnegative=True)
  _check_finite(scales, "scales", nonnegative=True)
  added = np.where(own, scales, 0.0)
  numerator = dots + added
  squared = norms * norms + added * (2.0 * dots + added)
  # |a' + s c|^2 >= 0 exactly; rounding can push it a hair below.
  squared = np.maximum(squared, 0.0)
  norm = np.sqrt(squared)
  safe = np.where(norm > 0.0, norm, 1.0)
  return np.clip(np.where(norm > 0.0, numerator / safe, 0.0), -1.0, 1.0)
