"""A BLT fitted with SciPy to a run's participation: min max-error x sensitivity^2.

The objective is jax_privacy's for BLTs under b-min-separated participation
(`buffered_toeplitz.LossFn.build_min_sep`, error "max"; McMahan, Xu & Zhang
2024, arXiv 2408.08868): for the prefix-sum workload A (the model after t
rounds is a prefix sum of the noised updates) and noise C^-1 xi,

    loss(C) = max_t ||(A C^-1)[t, :]||^2  *  sens(C)^2,

the largest variance of a prefix sum's noise at unit noise, times the
squared sensitivity (`sensitivity.toeplitz_sensitivity`) that sets the noise
for a given epsilon. A C^-1 is the Toeplitz matrix of the partial sums of
C^-1's coefficients d, and its row norms grow with t, so the first factor
is ||cumsum(d_0 .. d_{n-1})||^2.

The search keeps the coefficients positive and non-increasing (omega_i > 0,
theta_i in (0, 1), sum_i omega_i < 1; `blt`), so the sensitivity is the
structural one, exact (Kalinin & Lampert 2024, arXiv 2405.13763, Thm 2),
by parameterizing theta_i = sigmoid(u_i) and omega = sigmoid(s) softmax(v);
jax_privacy instead adds log-barrier penalties. A BLT is a rational c(x) =
P(x) / Q(x) with Q(x) = prod_i (1 - theta_i x) (Dvijotham et al. 2024, arXiv
2404.16706), so d, the series of Q / P, is one linear filter (`scipy.signal.
lfilter`) in O(n m). L-BFGS-B from a few seeded starts; the best is kept.

NumPy/SciPy only.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np
from scipy import optimize, signal, special

from tff_canary.stats.matrix import blt as blt_lib
from tff_canary.stats.matrix import sensitivity as sensitivity_lib
from tff_canary.stats.matrix import toeplitz
from tff_canary.stats import validation


@dataclasses.dataclass(frozen=True)
class BltFit:
  """A fitted BLT and its objective (module docstring).

  Attributes:
    strategy: the BLT C.
    max_error: max_t ||(A C^-1)[t, :]||^2.
    sensitivity: its worst case under the participation it was fitted to.
    loss: max_error * sensitivity.value^2.
  """

  strategy: blt_lib.BLT
  max_error: float
  sensitivity: sensitivity_lib.Sensitivity
  loss: float


def max_error(coefficients: Any, rounds: int) -> float:
  """max_t ||(A C^-1)[t, :]||^2 for the prefix-sum A: ||cumsum(d)||^2."""
  d = toeplitz.inverse_coefficients(coefficients, rounds)
  return float(np.sum(np.cumsum(d) ** 2))


def max_loss(coefficients: Any, *, rounds: int, participations: int,
             separation: int) -> float:
  """`max_error` times the squared b-min-sep sensitivity (module docstring)."""
  worst = sensitivity_lib.toeplitz_sensitivity(
      coefficients, rounds=rounds, participations=participations,
      separation=separation)
  return max_error(coefficients, rounds) * worst.value**2


def _parameters(x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
  m = (x.size - 1) // 2
  theta = special.expit(x[:m])
  omega = special.expit(x[m]) * special.softmax(x[m + 1:])
  return omega, theta


def _rational(omega: np.ndarray,
              theta: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
  """(P, Q) ascending in x with c(x) = P(x) / Q(x) (module docstring)."""
  q = np.poly(theta)  # prod_i (1 - theta_i x), ascending in x
  p = q.copy()
  for i in range(theta.size):
    p[1:] += omega[i] * np.poly(np.delete(theta, i))
  return p, q


def _loss(x: np.ndarray, n: int, k: int, b: int) -> float:
  omega, theta = _parameters(x)
  p, q = _rational(omega, theta)
  impulse = np.zeros(n)
  impulse[0] = 1.0
  with np.errstate(all="ignore"):
    d = signal.lfilter(q, p, impulse)
    error = np.sum(np.cumsum(d) ** 2)
  if not np.isfinite(error):
    return 1e300
  c = blt_lib.BLT(output_scale=omega, buf_decay=theta).coefficients(n)
  image = np.zeros(n)
  for start in np.arange(sensitivity_lib.most_participations(n, k, b)) * b:
    image[start:] += c[:n - start]
  return float(np.log(error) + np.log(image @ image))


def fit_blt(*, rounds: int, participations: int, separation: int,
            num_buffers: int = 3, starts: int = 4, seed: int = 0) -> BltFit:
  """The BLT of `num_buffers` buffers with the smallest loss found.

  Args:
    rounds: n, the rounds the strategy serves.
    participations: k, the most rounds a participant joins.
    separation: b, the fewest rounds between two of them.
    num_buffers: m >= 1.
    starts: L-BFGS-B runs (the first from decays spread over [0.5, 1 - 1/n],
      the others seeded perturbations of it).
    seed: for the perturbed starts.
  """
  n = validation.as_int(rounds, "rounds", minimum=2)
  k = validation.as_int(participations, "participations", minimum=1)
  b = validation.as_int(separation, "separation", minimum=1)
  m = validation.as_int(num_buffers, "num_buffers", minimum=1)
  starts = validation.as_int(starts, "starts", minimum=1)
  rng = np.random.default_rng(validation.as_int(seed, "seed", minimum=0))
  # Distinct decays (at n = 2, 1 / n = 0.5 would give m equal ones, where
  # the loss, flat in the decays of a 2-round strategy, can leave them).
  decays = 1.0 - np.geomspace(1.0 / n if n > 2 else 1.0 / 3.0, 0.5, m)
  first = np.concatenate([special.logit(decays), [0.0], np.zeros(m)])
  best = None
  for run in range(starts):
    x0 = first if run == 0 else first + rng.normal(scale=1.0, size=first.size)
    # Bounds keep expit below 1 in float64 (theta = 1 has no decay).
    result = optimize.minimize(_loss, x0, args=(n, k, b), method="L-BFGS-B",
                               bounds=[(-30.0, 30.0)] * x0.size)
    if best is None or result.fun < best.fun:
      best = result
  omega, theta = _parameters(best.x)
  try:
    strategy = blt_lib.blt(output_scale=omega, buf_decay=theta)
  except ValueError as e:
    raise ValueError(f"the fit with num_buffers={m} ended on a degenerate "
                     f"BLT ({e}); fit fewer buffers.") from None
  c = strategy.coefficients(n)
  worst = sensitivity_lib.toeplitz_sensitivity(
      c, rounds=n, participations=k, separation=b, fallback=False)
  error = max_error(c, n)
  return BltFit(strategy=strategy, max_error=error, sensitivity=worst,
                loss=error * worst.value**2)


__all__ = ["BltFit", "fit_blt", "max_error", "max_loss"]
