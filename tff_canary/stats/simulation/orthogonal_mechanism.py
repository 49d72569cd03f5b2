"""Exact simulators of the Gaussian sum mechanism with orthogonal canaries.

The mechanism is that of `gaussian_mechanism` (Andrew et al., "One-shot
Empirical Privacy Estimation for Federated Learning", ICLR 2024, Section 3 and
Algorithm 1): rho = sum_{j in I} c_j + sigma * z with z ~ N(0, I_d), the
Gaussian mechanism on a sum of sensitivity 1. Here the m candidate canaries
c_1, ..., c_m are not i.i.d. uniform unit vectors but orthonormal: the first m
rows of a random orthogonal d x d matrix (m <= d).

What that makes exact. Complete c_1, ..., c_m to an orthonormal basis; z has
i.i.d. N(0, 1) coordinates in any orthonormal basis, so

  s_j = <c_j, rho> = 1{j in I} + sigma * g_j,   g_1, ..., g_m i.i.d. N(0, 1),
  |rho|^2 = sum_{j <= m} s_j^2 + sigma^2 * chi2(d - m),

the chi-square independent of the g_j (Cochran's theorem). The scores s_j are
independent across canaries, with N(0, sigma^2) against N(1, sigma^2): each
canary faces exactly the Gaussian mechanism, whatever the others do.

Known-canary removal by projection. The auditor knows the canaries, so it can
project the other inserted canaries' directions out of rho before taking
canary j's cosine:

  x_j = s_j / sqrt(|rho|^2 - sum_{i in I, i != j} s_i^2)
      = s_j / sqrt(s_j^2 + sigma^2 * Q_j),                                 (1)

with Q_j = sum_{i not in I, i != j, i <= m} g_i^2 + chi2(d - m) ~ chi2(d - |I|
- [j not in I]). Unlike the subtraction of `known_canaries` (rho minus the
c_i, which needs rho to be linear in them), (1) needs only the projections
<c_i, rho>, so it applies to any output vector. By (1), an inserted canary's
x_j has the lone-canary law of Theorem 3.3 of the paper in dimension
d - |I| + 1 (`effective_dim`), and a held-out one the null law of
docs/method/null-law.md in dimension d - |I| (variance 1 / (d - |I|)).
Without removal the cosine is s_j / |rho|, as in the paper.

So a run costs m normals and one chi-square draw, O(m), and no d-dimensional
vector (docs/benchmarks.md). `simulate` and `simulate_coin` return `gaussian_mechanism`'s run objects with
simulator "orthogonal" (a seed inserts the same candidates as
`gaussian_mechanism.simulate_coin`); `simulate_scheduled` runs R rounds with
candidates on schedules.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from tff_canary.stats.simulation import gaussian_mechanism
from tff_canary.stats import validation

# The simulator name recorded in the results.
SIMULATOR = "orthogonal"

# Tags of the independent random streams derived from one seed (the coins are
# `gaussian_mechanism`'s).
_TAG_SCORES = 10     # the g_j (per round: rows of a [rounds, m] matrix).
_TAG_REST = 11       # chi2(d - m) of each round.
_TAG_SCHEDULE = 12   # the candidates' schedules.


@dataclasses.dataclass(frozen=True, eq=False)
class ScheduledRun:
  """One multi-round run with fair-coin candidates on schedules.

  Attributes:
    dim, num_candidates, num_rounds, participations, noise_std, seed:
      `simulate_scheduled`'s arguments (d, m, R, P, sigma).
    statistics: T_j = sqrt(d / P) * sum over the schedule of x_{j,r}, in
      candidate order (read-only).
    inserted_mask: Boolean, True where candidate j was inserted (read-only).
    max_cosines: max over the R rounds of x_{j,r} (read-only).
    schedule: [m, P] sorted rounds of each candidate's schedule (read-only).
  """
  dim: int
  num_candidates: int
  num_rounds: int
  participations: int
  noise_std: float
  seed: int
  statistics: np.ndarray
  inserted_mask: np.ndarray
  max_cosines: np.ndarray
  schedule: np.ndarray


def effective_dim(dim: int, num_inserted: int) -> int:
  """The dimension of an inserted canary's law after removal (1): d - |I| + 1.

  Pass it as `dim` to `estimates.epsilon_final` for removal cosines: the
  inserted canary then faces N(0, 1/dim') against its lone-canary law in
  dim' = d - |I| + 1 (module docstring). With |I| = d / 10 the plain d would
  overstate the GDP mu by sqrt(d / (d - |I|)), 5%.
  """
  dim = validation.as_dim(dim, "dim")
  num_inserted = validation.as_int(num_inserted, "num_inserted", minimum=0)
  _check_fits(dim, num_inserted, "num_inserted")
  return dim - num_inserted + 1


def simulate(*,
             dim: int,
             num_inserted: int,
             num_held_out: int,
             noise_std: float,
             seed: int,
             remove_known_canaries: bool = True
             ) -> gaussian_mechanism.GaussianMechanismRun:
  """Runs the mechanism once with orthonormal inserted and held-out canaries.

  `num_inserted`, `num_held_out` and `seed` are as in
  `gaussian_mechanism.simulate`.

  Args:
    dim: The dimension d, at least 2 and at least num_inserted + num_held_out.
    noise_std: The noise std sigma on the sum, positive.
    remove_known_canaries: The removal cosines (1) of the module docstring
      (project the other inserted canaries out of rho); False: cos(c_j, rho).

  Returns:
    A `gaussian_mechanism.GaussianMechanismRun` with simulator "orthogonal"
    and block_size None; held-out canary j is canary num_inserted + j.

  Raises:
    TypeError, ValueError: for a bad argument, naming it.
  """
  dim, noise_std, seed = _check_common(dim, noise_std, seed)
  num_inserted, num_held_out, remove_known_canaries = (
      gaussian_mechanism._check_canaries(  # pylint: disable=protected-access
          num_inserted, num_held_out, remove_known_canaries))
  _check_fits(dim, num_inserted + num_held_out,
              "num_inserted + num_held_out")
  mask = np.arange(num_inserted + num_held_out) < num_inserted
  cosines, norm = _one_round(dim, mask, noise_std, seed,
                             remove_known_canaries)
  return gaussian_mechanism.GaussianMechanismRun(
      dim=dim, num_inserted=num_inserted, num_held_out=num_held_out,
      noise_std=noise_std, seed=seed, simulator=SIMULATOR, block_size=None,
      remove_known_canaries=remove_known_canaries,
      inserted=_frozen(cosines[:num_inserted]),
      held_out=_frozen(cosines[num_inserted:]), output_norm=float(norm))


def simulate_coin(*, dim: int, num_candidates: int, noise_std: float,
                  seed: int) -> gaussian_mechanism.CoinRun:
  """Runs the mechanism once, inserting each orthonormal candidate by a coin.

  Args:
    dim: The dimension d, at least 2 and at least num_candidates.
    num_candidates: The number m of candidates, at least 1.
    noise_std: The noise std sigma on the sum, positive.
    seed: A nonnegative integer; the same seed gives identical arrays, and the
      same coins as `gaussian_mechanism.simulate_coin`.

  Returns:
    A `gaussian_mechanism.CoinRun` with simulator "orthogonal" whose
    statistics are the removal cosines (1) of the module docstring.

  Raises:
    TypeError, ValueError: for a bad argument, naming it.
  """
  dim, noise_std, seed, num_candidates, mask = _check_common(
      dim, noise_std, seed, num_candidates)
  cosines, norm = _one_round(dim, mask, noise_std, seed, True)
  return gaussian_mechanism.CoinRun(
      dim=dim, num_candidates=num_candidates, noise_std=noise_std, seed=seed,
      simulator=SIMULATOR, block_size=None, statistics=_frozen(cosines),
      inserted_mask=_frozen(mask), output_norm=float(norm))


def simulate_scheduled(*, dim: int, num_candidates: int, num_rounds: int,
                       participations: int, noise_std: float,
                       seed: int) -> ScheduledRun:
  """Runs R rounds with fair-coin orthonormal candidates on random schedules.

  Each round r is an independent Gaussian mechanism rho_r = sum_{j in I_r} c_j
  + sigma z_r with the same canaries, I_r the inserted candidates whose
  schedule holds r: every candidate has a schedule of P distinct uniformly
  random rounds (held-out ones are never inserted). The statistic is the
  schedule-aware T_j = sqrt(d / P) * sum_{r in S_j} x_{j,r} of Agrawal et al.
  (2026, "Let's Ask Gauss: Improved One-Run Privacy Auditing", arXiv
  2606.12733; docs/method/orthogonal-canaries.md), x_{j,r} the removal
  cosine (1) of round r: about N(0, 1) held out and N(sqrt(P) / sigma, 1)
  inserted (`tff_canary.stats.estimators.scheduled_sums`). Costs O(m R) time
  and memory (m R normals).

  Args:
    dim: The dimension d, at least 2 and at least num_candidates.
    num_candidates: The number m of candidates, at least 1.
    num_rounds: The number R of rounds, at least 1.
    participations: The number P of distinct rounds in each candidate's
      schedule, in [1, num_rounds].
    noise_std: The noise std sigma of each round, positive.
    seed: A nonnegative integer; the same seed gives identical arrays, and the
      same coins as `simulate_coin`.

  Returns:
    A `ScheduledRun`; its `max_cosines` are the all-iterates statistic
    (Algorithm 3 of Andrew et al.).

  Raises:
    TypeError, ValueError: for a bad argument, naming it.
  """
  dim, noise_std, seed, num_candidates, mask = _check_common(
      dim, noise_std, seed, num_candidates)
  num_rounds = validation.as_int(num_rounds, "num_rounds", minimum=1)
  participations = validation.as_int(participations, "participations",
                                     minimum=1)
  if participations > num_rounds:
    raise ValueError(f"participations must be at most num_rounds="
                     f"{num_rounds} (distinct rounds), got {participations}.")
  # P distinct rounds per candidate: the first P of a random permutation
  # (argsort of uniforms: every P-subset equally likely).
  keys = np.random.default_rng([seed, _TAG_SCHEDULE]).random(
      (num_candidates, num_rounds))
  schedule = np.sort(np.argsort(keys, axis=1)[:, :participations], axis=1)
  scheduled = np.zeros((num_candidates, num_rounds), bool)
  scheduled[np.arange(num_candidates)[:, None], schedule] = True
  own = scheduled & mask[:, None]  # [m, R]: j inserted in round r
  g, rest = _draw(dim, num_candidates, noise_std, seed, num_rounds)
  x = _round_cosines(g, rest, own.T)  # [R, m]
  total = np.where(scheduled.T, x, 0.0).sum(axis=0)
  statistics = np.sqrt(dim / participations) * total
  return ScheduledRun(
      dim=dim, num_candidates=num_candidates, num_rounds=num_rounds,
      participations=participations, noise_std=noise_std, seed=seed,
      statistics=_frozen(statistics), inserted_mask=_frozen(mask),
      max_cosines=_frozen(x.max(axis=0)), schedule=_frozen(schedule))


def _check_common(dim, noise_std, seed, num_candidates=None):
  """The checked common arguments; with `num_candidates`, it and the coins."""
  checked = (validation.as_dim(dim, "dim"),
             validation.as_positive(noise_std, "noise_std"),
             validation.as_int(seed, "seed", minimum=0))
  if num_candidates is None:
    return checked
  num_candidates = validation.as_int(num_candidates, "num_candidates",
                                     minimum=1)
  _check_fits(checked[0], num_candidates, "num_candidates")
  coins = gaussian_mechanism._coins  # pylint: disable=protected-access
  return checked + (num_candidates, coins(checked[2], num_candidates))


def _check_fits(dim: int, count: int, what: str) -> None:
  if count > dim:
    raise ValueError(f"{what} must be at most dim={dim} (at most d "
                     f"orthonormal canaries fit in R^d), got {count}.")


def _draw(dim: int, size: int, noise_std: float, seed: int,
          rounds: int) -> tuple[np.ndarray, np.ndarray]:
  """The noise of `rounds` rounds: sigma g [rounds, size] and sigma^2 times
  chi2(d - size) [rounds] (0 when size = d)."""
  g = np.random.default_rng([seed, _TAG_SCORES]).standard_normal(
      (rounds, size))
  if dim > size:
    rest = np.random.default_rng([seed, _TAG_REST]).chisquare(dim - size,
                                                              rounds)
  else:
    rest = np.zeros(rounds)
  return noise_std * g, noise_std**2 * rest


def _round_cosines(noise: np.ndarray, rest: np.ndarray,
                   own: np.ndarray) -> np.ndarray:
  """The removal cosines (1) of every candidate in every round.

  noise [R, m] holds sigma g_{j,r}, rest [R] sigma^2 chi2(d - m), own [R, m]
  whether j is inserted in round r. sigma^2 Q_j + s_j^2 is the residual
  |rho_r|^2 - sum_{i in I_r} s_i^2 = sum over the non-inserted of (sigma g)^2
  plus rest, with s_j^2 added back for an inserted j: a sum of squares, never
  a difference.
  """
  scores = noise + own
  residual = np.where(own, 0.0, noise * noise).sum(axis=1) + rest
  squared = residual[:, None] + np.where(own, scores * scores, 0.0)
  return scores / np.sqrt(squared)


def _one_round(dim: int, mask: np.ndarray, noise_std: float, seed: int,
               remove: bool) -> tuple[np.ndarray, float]:
  """One round's cosines (removal (1) or plain) and |rho|."""
  noise, rest = _draw(dim, mask.size, noise_std, seed, 1)
  scores = noise[0] + mask
  norm = float(np.sqrt(np.sum(scores * scores) + rest[0]))
  cosines = _round_cosines(noise, rest, mask[None])[0] if remove else (
      scores / norm)
  return np.clip(cosines, -1.0, 1.0), norm


_frozen = gaussian_mechanism._frozen  # pylint: disable=protected-access
