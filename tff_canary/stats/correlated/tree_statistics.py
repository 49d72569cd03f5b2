"""Canary statistics for DP-FTRL, whose noise is correlated across rounds.

The scores. With orthogonal canaries (docs/method/orthogonal-canaries.md),
canary j's score in round t is its inner product with the round's noised sum
of clipped updates, in units of the node noise sigma = z C:

    u_{j,t} = <c_j, sum_t> / sigma  ~  N(a_{j,t} / z, K)   over t,

where a_{j,t} = 1 when canary j took part in round t (at the clip norm C),
K is the rounds' covariance of the claimed noise, B B^T for released noise
B xi (`linear_noise.LinearNoise.covariance`: the tree's, or any known linear
map of independent node noises, such as a matrix mechanism's B = C^-1), and
the canaries' noise vectors are exactly independent (orthonormal directions,
isotropic noise). Nothing below uses more than K, so every statistic holds
for any such B. A statistic that treats the rounds as independent is wrong
here: the tree's released noises are differences of prefix noises, so
neighbouring rounds are correlated, and the variance of a sum of rounds is
not the sum of their variances.

The statistics (the known-covariance Gaussian linear model; Aitken 1935, "On
least squares and linear combination of observations", generalized least
squares):

* `scheduled_statistic`: the auditor knows canary j's schedule a_j, so the
  most powerful test of "j took part in its schedule" against "j took no
  part" (Neyman-Pearson for two Gaussians with one covariance) is linear:

      T_j = a_j^T K^-1 u_j / sqrt(a_j^T K^-1 a_j)  ~  N(mu_j, 1),
      mu_j = sqrt(a_j^T K^-1 a_j) / z                (`schedule_mu`),

  exactly N(0, 1) for a canary that took no part. mu_j is the GDP mu of what
  the released rounds reveal about that schedule (Dong, Roth & Su 2019,
  arXiv 1905.02383, Thm 2.7): the ceiling of any attack on the released
  updates for that one schedule. Schedules differ, and so do their mu_j:
  the mean T over inserted canaries estimates the mean mu_j (not a ceiling:
  one canary's mu_j can exceed it), and `worst_case_mu` is the largest
  mu_j that one participation per epoch can have.
* `round_statistics`: without the schedule, the score test of "j took part
  in round t alone" is g_{j,t} = (K^-1 u_j)_t / sqrt((K^-1)_tt), N(0, 1)
  per round under the null but correlated across rounds; `max_statistic` is
  its max over rounds (the all-iterates statistic of Andrew et al., ICLR
  2024, arXiv 2302.03098, Algorithm 3, with the tree's covariance).
* `independent_scheduled_statistic`: the statistic of independent rounds,
  sum_{t in S_j} u_{j,t} / sqrt(K_tt) / sqrt(P_j) (`estimators.scheduled_sums`
  with the rounds' own scale). Its variance under the null is
  1_S^T R 1_S / P (R the correlation), not 1: shown to make the point.
* `epoch_counts`: a canary's participations per epoch estimated by the sum
  of its scores over the epoch, z * sum_{t in e} u_{j,t}: unbiased, with
  covariance z^2 E^T K E across epochs (E the epochs' round indicators).
  Telescoping makes this cheap in noise: within one tree the sum of released
  rounds is one prefix noise.

NumPy/SciPy only.
"""

from __future__ import annotations

import math

import numpy as np
import numpy.typing as npt
from scipy import linalg

from tff_canary.stats import validation


def _covariance(covariance: npt.ArrayLike) -> np.ndarray:
  k = np.asarray(covariance, dtype=np.float64)
  if k.ndim != 2 or k.shape[0] != k.shape[1] or k.shape[0] == 0:
    raise ValueError(f"covariance must be a square [rounds, rounds] matrix, "
                     f"got shape {k.shape}.")
  if not np.all(np.isfinite(k)) or not np.allclose(k, k.T):
    raise ValueError("covariance must be finite and symmetric.")
  return k


def _factor(k: np.ndarray):
  try:
    return linalg.cho_factor(k, lower=True)
  except linalg.LinAlgError as error:
    raise ValueError("covariance is not positive definite: the rounds' "
                     "noises are linearly dependent, so no statistic is "
                     "defined by it.") from error


def _scores(scores: npt.ArrayLike, rounds: int) -> np.ndarray:
  u = np.asarray(scores, dtype=np.float64)
  if u.ndim != 2 or u.shape[1] != rounds:
    raise ValueError(f"scores must be [canaries, rounds] with {rounds} "
                     f"rounds (the covariance's size), got shape {u.shape}.")
  if not np.all(np.isfinite(u)):
    raise ValueError("scores must be finite.")
  return u


def _schedule(schedule: npt.ArrayLike, shape: tuple[int, int]) -> np.ndarray:
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
                       f"schedule{list(index)} = {a[index]!r}.")
    a = a == 1
  if a.shape != shape:
    raise ValueError(f"schedule has shape {a.shape}; expected {shape}, one "
                     "flag per canary and round.")
  empty = ~a.any(axis=1)
  if empty.any():
    raise ValueError(f"schedule[{int(np.flatnonzero(empty)[0])}] has no "
                     "round: every canary needs at least one scheduled round.")
  return a


def _quadratic(precision: np.ndarray, a: np.ndarray) -> np.ndarray:
  """a_j^T P a_j for each row of the Boolean a."""
  w = a.astype(np.float64)
  return np.sum((w @ precision) * w, axis=1)


def schedule_mu(schedule: npt.ArrayLike, covariance: npt.ArrayLike, *,
                noise_multiplier: float) -> np.ndarray:
  """mu_j = sqrt(a_j^T K^-1 a_j) / z: what the released rounds reveal (GDP).

  Args:
    schedule: [canaries, rounds] Boolean a_j.
    covariance: K, [rounds, rounds] (`LinearNoise.covariance`).
    noise_multiplier: z > 0, the node noise over the clip.
  """
  k = _covariance(covariance)
  z = validation.as_positive(noise_multiplier, "noise_multiplier")
  a = np.asarray(schedule)
  a = _schedule(a, (a.shape[0] if a.ndim == 2 else -1, k.shape[0]))
  precision = linalg.cho_solve(_factor(k), np.eye(k.shape[0]))
  return np.sqrt(_quadratic(precision, a)) / z


def worst_case_mu(covariance: npt.ArrayLike, epochs: npt.ArrayLike, *,
                  noise_multiplier: float) -> float:
  """sqrt(sum_e max_{t in e} (K^-1)_tt) / z: the rounds' mu for the worst case.

  What the released rounds reveal (GDP) about the participant they reveal
  most about, among those who take part at most once per epoch (DP-FTRL's
  participation; Kairouz et al. 2021, arXiv 2103.00039, Appendix D). With
  the noise restarted after every epoch (the tree; a matrix mechanism with a
  per-epoch block of its strategy C), K is block-diagonal by epoch, so
  `schedule_mu` of one round t_e per epoch is sqrt(sum_e (K_e^-1)_{t_e t_e})
  / z and the largest is the formula above. The node release's mu
  (`tree_accounting.node_mu`, sqrt(sum_e h_e) / z) bounds it; for the plain
  tree the two are equal (round 0 of a tree is on a path of h nodes, each
  released alone), for Honaker's efficient tree ("Efficient Use of
  Differentially Private Binary Trees", 2015) this is smaller: its rounds
  release less than its nodes. For a square B = C^-1 the nodes are the
  rounds, and this is the release's mu: sqrt(sum_e max_t ||C_e e_t||^2) / z.

  Args:
    covariance: K, [rounds, rounds] (`LinearNoise.covariance`), with no
      covariance between rounds of different epochs.
    epochs: [rounds, epochs] Boolean, which epoch each round is in
      (`epoch_matrix`).
    noise_multiplier: z > 0, the node noise over the clip.
  """
  k = _covariance(covariance)
  z = validation.as_positive(noise_multiplier, "noise_multiplier")
  e = np.asarray(epochs)
  if e.dtype != bool or e.ndim != 2 or e.shape[0] != k.shape[0]:
    raise ValueError(f"epochs must be a Boolean [rounds, epochs] array with "
                     f"{k.shape[0]} rounds (epoch_matrix), got dtype "
                     f"{e.dtype} and shape {e.shape}.")
  if not np.array_equal(e.sum(axis=1), np.ones(k.shape[0])):
    raise ValueError("epochs must put every round in exactly one epoch.")
  same_epoch = (e.astype(np.float64) @ e.T.astype(np.float64)) > 0
  if np.any(np.abs(k[~same_epoch]) > 1e-12 * np.abs(k).max()):
    raise ValueError("covariance correlates rounds of different epochs: the "
                     "noise (the tree) must restart after every epoch for "
                     "one participation per epoch to be its worst case.")
  precision = np.diag(linalg.cho_solve(_factor(k), np.eye(k.shape[0])))
  total = sum(float(precision[e[:, i]].max()) for i in range(e.shape[1])
              if e[:, i].any())
  return math.sqrt(total) / z


def scheduled_statistic(scores: npt.ArrayLike, schedule: npt.ArrayLike,
                        covariance: npt.ArrayLike) -> np.ndarray:
  """T_j = a_j^T K^-1 u_j / sqrt(a_j^T K^-1 a_j), N(0, 1) without the canary."""
  k = _covariance(covariance)
  u = _scores(scores, k.shape[0])
  a = _schedule(schedule, u.shape)
  factor = _factor(k)
  v = linalg.cho_solve(factor, u.T).T          # K^-1 u_j, row j
  precision = linalg.cho_solve(factor, np.eye(k.shape[0]))
  return np.where(a, v, 0.0).sum(axis=1) / np.sqrt(_quadratic(precision, a))


def round_statistics(scores: npt.ArrayLike,
                     covariance: npt.ArrayLike) -> np.ndarray:
  """g_{j,t} = (K^-1 u_j)_t / sqrt((K^-1)_tt): each round's score test."""
  k = _covariance(covariance)
  u = _scores(scores, k.shape[0])
  factor = _factor(k)
  v = linalg.cho_solve(factor, u.T).T
  precision = linalg.cho_solve(factor, np.eye(k.shape[0]))
  return v / np.sqrt(np.diag(precision))[None, :]


def max_statistic(scores: npt.ArrayLike,
                  covariance: npt.ArrayLike) -> np.ndarray:
  """M_j = max over rounds of g_{j,t} (`round_statistics`)."""
  return round_statistics(scores, covariance).max(axis=1)


def independent_scheduled_statistic(scores: npt.ArrayLike,
                                    schedule: npt.ArrayLike,
                                    covariance: npt.ArrayLike) -> np.ndarray:
  """sum_{t in S_j} u_{j,t} / sqrt(K_tt) / sqrt(P_j): rounds taken as independent."""
  k = _covariance(covariance)
  u = _scores(scores, k.shape[0])
  a = _schedule(schedule, u.shape)
  z = u / np.sqrt(np.diag(k))[None, :]
  return np.where(a, z, 0.0).sum(axis=1) / np.sqrt(a.sum(axis=1))


def independent_null_variance(schedule: npt.ArrayLike,
                              covariance: npt.ArrayLike) -> np.ndarray:
  """The true null variance of `independent_scheduled_statistic`: 1_S^T R 1_S / P."""
  k = _covariance(covariance)
  a = np.asarray(schedule)
  a = _schedule(a, (a.shape[0] if a.ndim == 2 else -1, k.shape[0]))
  s = 1.0 / np.sqrt(np.diag(k))
  r = k * s[:, None] * s[None, :]
  return _quadratic(r, a) / a.sum(axis=1)


def epoch_matrix(num_rounds: int, rounds_per_epoch: int) -> np.ndarray:
  """E, [rounds, epochs] Boolean: which epoch each round is in (the last may be short)."""
  num_rounds = validation.as_int(num_rounds, "num_rounds", minimum=1)
  per = validation.as_int(rounds_per_epoch, "rounds_per_epoch", minimum=1)
  epochs = -(-num_rounds // per)
  e = np.zeros((num_rounds, epochs), dtype=bool)
  e[np.arange(num_rounds), np.arange(num_rounds) // per] = True
  return e


def epoch_counts(scores: npt.ArrayLike, epochs: npt.ArrayLike, *,
                 noise_multiplier: float) -> np.ndarray:
  """n_{j,e} = z sum_{t in e} u_{j,t}: participations per epoch, unbiased."""
  z = validation.as_positive(noise_multiplier, "noise_multiplier")
  e = np.asarray(epochs, dtype=np.float64)
  u = _scores(scores, e.shape[0])
  return z * (u @ e)


def epoch_count_covariance(covariance: npt.ArrayLike, epochs: npt.ArrayLike,
                           *, noise_multiplier: float) -> np.ndarray:
  """z^2 E^T K E: the covariance of a canary's `epoch_counts` across epochs."""
  k = _covariance(covariance)
  z = validation.as_positive(noise_multiplier, "noise_multiplier")
  e = np.asarray(epochs, dtype=np.float64)
  if e.shape[0] != k.shape[0]:
    raise ValueError(f"epochs has {e.shape[0]} rounds, the covariance "
                     f"{k.shape[0]}.")
  return z**2 * (e.T @ k @ e)


__all__ = [
    "epoch_count_covariance", "epoch_counts", "epoch_matrix",
    "independent_null_variance", "independent_scheduled_statistic",
    "max_statistic", "round_statistics", "schedule_mu", "scheduled_statistic",
    "worst_case_mu",
]
