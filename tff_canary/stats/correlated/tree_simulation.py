"""A DP-FTRL run with orthogonal canaries, simulated in the canaries' scores.

With orthonormal canary directions and isotropic Gaussian node noise,
canary j's scores over the rounds (`gls_statistics`) are exactly

    u_j = a_j / z + B xi_j,     xi_j ~ N(0, I) independent across canaries,

B the released-noise coefficients (the tree's, or `simulate`'s `noise`) and
a_j the rounds canary j took part in, at the clip norm: a real run's law
when the clients' data has no component along the canaries (the TFF runs
have one, O(1/sqrt(d)) per round). The self-test's input, the mechanism on
zero values, is B Xi for `self_test_dim` coordinates. DP-FTRL's setting
(Kairouz et al. 2021, arXiv 2103.00039): the tree restarted after each
epoch, each inserted canary in one uniformly drawn round of every epoch;
fair-coin candidates (Steinke, Nasr & Jagielski 2023), each with a schedule.

The candidates' rounds (`simulate`'s `placement`): "random", as above, a
client's; or "worst_case", every candidate on the claimed noise's
worst-case pattern a* (`LinearNoise.worst_case_rounds`), so that every
inserted canary's GLS statistic is N(worst_case_mu, 1): for the plain tree
and a square B (a matrix mechanism) the analytical mu itself.

Planted bugs (`Bug`), each the failure of one assumption of the accounting
(docs/method/dp-ftrl.md, "Planted bugs"): "restart_reuse" (each restarted
tree draws the first tree's node noises again), "double_participation"
(each inserted canary in a second, uniformly drawn round of every epoch),
"missing_level" (the nodes of level `MISSING_LEVEL` get no noise),
"efficient_scale" (the efficient tree's internal nodes draw their own noise
at std sigma / sqrt(2): its variance reduction applied twice).

NumPy only.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from typing import Literal, Optional, Sequence, Union, get_args

import numpy as np

from tff_canary.stats.canaries import schedules
from tff_canary.stats.correlated import linear_noise, tree_noise
from tff_canary.stats import validation

Bug = Literal["none", "restart_reuse", "double_participation",
              "missing_level", "efficient_scale"]
BUGS: tuple[str, ...] = get_args(Bug)
PLACEMENTS = schedules.PLACEMENTS
# The level whose nodes lose their noise in "missing_level": the lowest
# internal level, which covers half the rounds of every tree.
MISSING_LEVEL = 1
_frozen = linear_noise._frozen  # pylint: disable=protected-access


@dataclasses.dataclass(frozen=True)
class FtrlSetting:
  """A DP-FTRL run to simulate (module docstring).

  Attributes:
    epochs: number of epochs, each its own tree.
    rounds_per_epoch: rounds in an epoch (the tree's steps).
    noise_multiplier: z, the node noise over the clip.
    num_candidates: fair-coin canary candidates.
    efficient: Honaker's efficient tree (TFF's default) or the plain one.
    self_test_dim: coordinates of the zero-value self-test run.
  """

  epochs: int
  rounds_per_epoch: int
  noise_multiplier: float
  num_candidates: int = 2000
  efficient: bool = True
  self_test_dim: int = 2000

  def __post_init__(self):
    validation.as_int(self.epochs, "epochs", minimum=1)
    validation.as_int(self.rounds_per_epoch, "rounds_per_epoch", minimum=2)
    validation.as_positive(self.noise_multiplier, "noise_multiplier")
    validation.as_int(self.num_candidates, "num_candidates", minimum=4)
    validation.as_int(self.self_test_dim, "self_test_dim", minimum=2)
    validation.as_bool(self.efficient, "efficient")

  @property
  def num_rounds(self) -> int:
    return self.epochs * self.rounds_per_epoch

  def claimed_noise(self) -> tree_noise.TreeNoise:
    """The tree as claimed: restarted after every epoch."""
    return tree_noise.tree_noise(self.num_rounds, efficient=self.efficient,
                                 restart_period=self.rounds_per_epoch)


def planted_noise(noise: tree_noise.TreeNoise, bug: Bug) -> tree_noise.TreeNoise:
  """The released-noise coefficients of the mechanism with `bug` planted."""
  bug = validation.as_choice(bug, "bug", BUGS)
  b = noise.released.copy()
  if bug == "restart_reuse":
    # Call i of every tree draws the same noise: the first tree's call i,
    # or, past the first tree's calls (a longer later tree), the first
    # later tree's.
    first: dict[int, int] = {}
    for k, i in enumerate(noise.call_index):
      target = first.setdefault(int(i), k)
      if target != k:
        b[:, target] += b[:, k]
        b[:, k] = 0.0
  elif bug == "missing_level":
    b[:, noise.call_level == MISSING_LEVEL] = 0.0
  elif bug == "efficient_scale":
    if not noise.efficient:
      raise ValueError("bug 'efficient_scale' plants a bug of the efficient "
                       "tree; give a setting with efficient=True.")
    b[:, noise.call_level >= 1] /= math.sqrt(2.0)
  return noise.with_coefficients(b)


@dataclasses.dataclass(frozen=True)
class FtrlRun:
  """One simulated run: what the auditor sees, and the truth.

  Attributes:
    setting, bug, seed: as given.
    scores: [candidates, rounds] float64 u_{j,t} (module docstring).
    schedule: [candidates, rounds] Boolean, the auditor's schedule of every
      candidate (one round per epoch).
    inserted: [candidates] Boolean, the coins.
    participations: [candidates, rounds] Boolean, the rounds each candidate
      really took part in (the schedule for inserted ones, plus the second
      rounds of "double_participation").
    self_test_noise: [rounds, self_test_dim] float64, the mechanism on zero
      values, in units of sigma.
  """

  setting: FtrlSetting
  bug: str
  seed: int
  scores: np.ndarray
  schedule: np.ndarray
  inserted: np.ndarray
  participations: np.ndarray
  self_test_noise: np.ndarray


@functools.lru_cache(maxsize=16)
def _released(setting: FtrlSetting, bug: str) -> np.ndarray:
  """The mechanism's released-noise coefficients, read-only: building the
  tree is most of a small run's time, and simulations repeat settings."""
  return _frozen(planted_noise(setting.claimed_noise(), bug).released)


@functools.lru_cache(maxsize=16)
def _worst_case_rounds(setting: FtrlSetting) -> np.ndarray:
  """a* of the setting's claimed tree, read-only (building it is slow)."""
  return _frozen(setting.claimed_noise().worst_case_rounds())


def _placement(placement, setting: FtrlSetting,
               noise: Optional[linear_noise.LinearNoise]
               ) -> Optional[np.ndarray]:
  """The round of each epoch every candidate takes, or None for random."""
  if isinstance(placement, str):
    placement = validation.as_choice(placement, "placement", PLACEMENTS)
    if placement == "random":
      return None
    if noise is None:
      rounds = _worst_case_rounds(setting)
    else:
      noise.epochs(setting.rounds_per_epoch)  # one block per epoch
      rounds = noise.worst_case_rounds()
  else:
    rounds = np.asarray(placement)
  per, epochs = setting.rounds_per_epoch, setting.epochs
  if (rounds.shape != (epochs,) or not np.issubdtype(rounds.dtype, np.integer)
      or np.any(rounds // per != np.arange(epochs))):
    raise ValueError(
        f"placement must be 'random', 'worst_case' or one round in each of "
        f"the {epochs} epochs of {per} rounds, in order, got "
        f"{validation.show(placement)}.")
  return rounds - np.arange(epochs) * per


def simulate(setting: FtrlSetting, *, bug: Bug = "none", seed: int = 0,
             insert: bool = True,
             noise: Optional[linear_noise.LinearNoise] = None,
             placement: Union[str, Sequence[int]] = "random") -> FtrlRun:
  """One seeded DP-FTRL run with fair-coin orthogonal canaries.

  `insert=False` inserts no canary whatever the coins say (the "no canary"
  setting of the validity bench: every statistic follows its null).
  `noise` is the mechanism's released noise: by default the setting's tree
  with `bug` planted (`planted_noise`); else any `linear_noise.LinearNoise`
  of the setting's rounds (a matrix mechanism's B = C^-1, correct or with a
  bug of its own), `bug` then "none" or "double_participation".
  `placement` (module docstring): "random"; "worst_case", every candidate
  on a* of the claimed noise (the setting's tree, or `noise`, so a noise
  with a bug planted moves it); or the rounds of a* given, one per epoch
  (e.g. the claimed strategy's `sensitivity.restarted_sensitivity`). A
  given seed draws the same coins and noise for every placement.
  """
  if not isinstance(setting, FtrlSetting):
    raise TypeError(f"setting must be an FtrlSetting, got "
                    f"{type(setting).__name__}.")
  bug = validation.as_choice(bug, "bug", BUGS)
  seed = validation.as_int(seed, "seed", minimum=0)
  insert = validation.as_bool(insert, "insert")
  if noise is None:
    b = _released(setting, bug)
  elif bug not in ("none", "double_participation"):
    raise ValueError(f"bug={bug!r} plants a bug in the tree's noise; with a "
                     "noise given, plant it there (bug 'none' or "
                     "'double_participation').")
  elif linear_noise.as_linear_noise(noise).num_rounds != setting.num_rounds:
    raise ValueError(f"noise has {noise.num_rounds} rounds, the setting "
                     f"{setting.num_rounds}.")
  else:
    b = noise.released
  fixed = _placement(placement, setting, noise)
  rng = np.random.default_rng([seed, BUGS.index(bug)])
  m, per, epochs = (setting.num_candidates, setting.rounds_per_epoch,
                    setting.epochs)
  inserted = rng.random(m) < 0.5
  rows = np.arange(m)
  schedule = np.zeros((m, setting.num_rounds), dtype=bool)
  extra = np.zeros_like(schedule)
  for e in range(epochs):
    first = rng.integers(0, per, size=m)
    if fixed is not None:
      first = np.full(m, fixed[e])
    schedule[rows, e * per + first] = True
    # A uniformly drawn other round of the same epoch.
    second = (first + rng.integers(1, per, size=m)) % per
    extra[rows, e * per + second] = True
  participations = schedule & inserted[:, None] & insert
  if bug == "double_participation":
    participations = participations | (extra & inserted[:, None] & insert)
  xi = rng.standard_normal((m, b.shape[1]))
  scores = participations / setting.noise_multiplier + xi @ b.T
  zero_run = b @ rng.standard_normal((b.shape[1], setting.self_test_dim))
  return FtrlRun(setting=setting, bug=bug, seed=seed,
                 scores=_frozen(scores), schedule=_frozen(schedule),
                 inserted=_frozen(inserted),
                 participations=_frozen(participations),
                 self_test_noise=_frozen(zero_run))


__all__ = ["BUGS", "Bug", "FtrlRun", "FtrlSetting", "MISSING_LEVEL",
           "PLACEMENTS", "planted_noise", "simulate"]
