"""Canary statistics for noise correlated across rounds (DP-FTRL's).

With orthogonal canaries (docs/method/orthogonal-canaries.md), canary j's
score in round t is its inner product with the round's noised sum of
clipped updates, in units of the node noise sigma = z C:

    u_{j,t} = <c_j, sum_t> / sigma  ~  N(a_{j,t} / z, K)   over t,

a_{j,t} = 1 when canary j took part in round t (at the clip norm C), K =
B B^T the claimed noise's round covariance (`linear_noise.LinearNoise`, its
only input here), the canaries' noises exactly independent. Rounds are not
independent: the variance of a sum of rounds is 1_S^T K 1_S, not sum K_tt.
The statistics are those of the known-covariance Gaussian linear model
(generalized least squares; Aitken 1935), tabulated in docs/method/dp-ftrl.md.

NumPy/SciPy only.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from tff_canary.stats.correlated import linear_noise
from tff_canary.stats import validation


def _scores(scores: npt.ArrayLike, rounds: int) -> np.ndarray:
  u = np.asarray(scores, dtype=np.float64)
  if u.ndim != 2 or u.shape[1] != rounds:
    raise ValueError(f"scores must be [canaries, rounds] with {rounds} "
                     f"rounds (the noise's), got shape {u.shape}.")
  if not np.all(np.isfinite(u)):
    raise ValueError("scores must be finite.")
  return u


def _schedule(schedule: npt.ArrayLike, rounds: int,
              canaries: int | None = None) -> np.ndarray:
  """The schedule as a Boolean array (Booleans, or numbers all 0 or 1)."""
  a = np.asarray(schedule)
  if a.dtype != bool:
    if not (np.issubdtype(a.dtype, np.integer)
            or np.issubdtype(a.dtype, np.floating)):
      raise TypeError(f"schedule must be a Boolean array or an array of 0 "
                      f"and 1, got dtype {a.dtype}.")
    bad = ~np.isin(a, (0, 1))
    if bad.any():
      index = tuple(int(i) for i in np.argwhere(bad)[0])
      raise ValueError(f"schedule must hold only 0 and 1 (or Booleans), but "
                       f"schedule{list(index)} = "
                       f"{validation.show(a[index])}.")
    a = a == 1
  if (a.ndim != 2 or a.shape[1] != rounds
      or a.shape[0] != (canaries or a.shape[0])):
    raise ValueError(f"schedule has shape {a.shape}; expected "
                     f"[{canaries or 'canaries'}, {rounds}], one flag per "
                     "canary and round.")
  empty = ~a.any(axis=1)
  if empty.any():
    raise ValueError(f"schedule[{int(np.flatnonzero(empty)[0])}] has no "
                     "round: every canary needs at least one scheduled round.")
  return a


def _quadratic(precision: np.ndarray, a: np.ndarray) -> np.ndarray:
  """a_j^T P a_j for each row of the Boolean a."""
  w = a.astype(np.float64)
  return np.sum((w @ precision) * w, axis=1)


def schedule_mu(schedule: npt.ArrayLike, noise: linear_noise.LinearNoise,
                *, noise_multiplier: float) -> np.ndarray:
  """mu_j = sqrt(a_j^T K^-1 a_j) / z: what the released rounds reveal about
  schedule a_j (GDP; Dong, Roth & Su 2019, arXiv 1905.02383, Thm 2.7). The
  mean T over inserted canaries estimates the mean mu_j, not a ceiling
  (`LinearNoise.worst_case_mu` is the largest).

  Args:
    schedule: [canaries, rounds] Boolean a_j.
    noise: the claimed noise.
    noise_multiplier: z > 0, the node noise over the clip.
  """
  noise = linear_noise.as_linear_noise(noise)
  z = validation.as_positive(noise_multiplier, "noise_multiplier")
  a = _schedule(schedule, noise.num_rounds)
  return np.sqrt(_quadratic(noise.precision, a)) / z


def scheduled_statistic(scores: npt.ArrayLike, schedule: npt.ArrayLike,
                        noise: linear_noise.LinearNoise) -> np.ndarray:
  """T_j = a_j^T K^-1 u_j / sqrt(a_j^T K^-1 a_j) ~ N(mu_j, 1) (`schedule_mu`),
  exactly N(0, 1) without the canary: the most powerful test of "j took part
  in schedule a_j" against no part (Neyman-Pearson)."""
  noise = linear_noise.as_linear_noise(noise)
  u = _scores(scores, noise.num_rounds)
  a = _schedule(schedule, *u.shape[::-1])
  v = noise.solve(u.T).T          # K^-1 u_j, row j
  return (np.where(a, v, 0.0).sum(axis=1)
          / np.sqrt(_quadratic(noise.precision, a)))


def round_statistics(scores: npt.ArrayLike,
                     noise: linear_noise.LinearNoise) -> np.ndarray:
  """g_{j,t} = (K^-1 u_j)_t / sqrt((K^-1)_tt): each round's score test, N(0, 1)
  without the canary, correlated across rounds."""
  noise = linear_noise.as_linear_noise(noise)
  v = noise.solve(_scores(scores, noise.num_rounds).T).T
  return v / np.sqrt(np.diag(noise.precision))[None, :]


def max_statistic(scores: npt.ArrayLike,
                  noise: linear_noise.LinearNoise) -> np.ndarray:
  """M_j = max over rounds of g_{j,t} (`round_statistics`): the all-iterates
  statistic of Andrew et al., ICLR 2024, arXiv 2302.03098, Algorithm 3."""
  return round_statistics(scores, noise).max(axis=1)


def independent_scheduled_statistic(
    scores: npt.ArrayLike, schedule: npt.ArrayLike,
    noise: linear_noise.LinearNoise) -> np.ndarray:
  """sum_{t in S_j} u_{j,t} / sqrt(K_tt) / sqrt(P_j): rounds taken as independent."""
  noise = linear_noise.as_linear_noise(noise)
  u = _scores(scores, noise.num_rounds)
  a = _schedule(schedule, *u.shape[::-1])
  z = u / np.sqrt(np.diag(noise.covariance))[None, :]
  return np.where(a, z, 0.0).sum(axis=1) / np.sqrt(a.sum(axis=1))


def independent_null_variance(
    schedule: npt.ArrayLike, noise: linear_noise.LinearNoise) -> np.ndarray:
  """The true null variance of `independent_scheduled_statistic`: 1_S^T R 1_S / P."""
  noise = linear_noise.as_linear_noise(noise)
  a = _schedule(schedule, noise.num_rounds)
  return _quadratic(noise.correlation, a) / a.sum(axis=1)


def epoch_counts(scores: npt.ArrayLike, epochs: npt.ArrayLike, *,
                 noise_multiplier: float) -> np.ndarray:
  """n_{j,e} = z sum_{t in e} u_{j,t}: participations per epoch, unbiased
  (`epoch_count_covariance`); E, [rounds, epochs], the epochs' rounds."""
  z = validation.as_positive(noise_multiplier, "noise_multiplier")
  e = np.asarray(epochs, dtype=np.float64)
  u = _scores(scores, e.shape[0])
  return z * (u @ e)


def epoch_count_covariance(noise: linear_noise.LinearNoise,
                           epochs: npt.ArrayLike, *,
                           noise_multiplier: float) -> np.ndarray:
  """z^2 E^T K E: the covariance of a canary's `epoch_counts` across epochs."""
  noise = linear_noise.as_linear_noise(noise)
  z = validation.as_positive(noise_multiplier, "noise_multiplier")
  e = np.asarray(epochs, dtype=np.float64)
  if e.shape[0] != noise.num_rounds:
    raise ValueError(f"epochs has {e.shape[0]} rounds, the noise "
                     f"{noise.num_rounds}.")
  return z**2 * (e.T @ noise.covariance @ e)


__all__ = [
    "epoch_count_covariance", "epoch_counts", "independent_null_variance",
    "independent_scheduled_statistic", "max_statistic", "round_statistics",
    "schedule_mu", "scheduled_statistic",
]
