"""The all-iterates statistic on the Gaussian mechanism, over several rounds.

The all-iterates threat model of Andrew et al. (ICLR 2024, arXiv 2302.03098,
Algorithm 3; docs/method/null-law.md) takes m_j = max over rounds r of cos(c_j, a_r). Here
each round r = 1..R is one Gaussian sum mechanism (`gaussian_mechanism`)

    a_r = sum_{j in S_r} c_j + sigma z_r,

with its own `inserted_per_round` canaries S_r (each inserted canary takes
part in exactly one round, as with one epoch of `schedules.ShuffledEpochs`),
and `num_held_out` canaries that are never inserted.

Each canary's own-round cosine comes from `gaussian_mechanism.simulate` and
its other rounds' cosines are independent exact nulls (`null_cosines`), so
each canary's max is drawn exactly from its law; across canaries, cosines
with the same foreign round are treated as independent, ignoring their
correlation c_i.c_j of order 1 / sqrt(d) (docs/method/null-law.md,
"Several rounds").
"""

from __future__ import annotations

import dataclasses

import numpy as np

from tff_canary.stats.simulation import gaussian_mechanism
from tff_canary.stats.simulation.gaussian_mechanism import null_cosines
from tff_canary.stats import validation

# Tags of the random streams derived from the seed.
_TAG_ROUND = 0  # round r's mechanism: SeedSequence([seed, _TAG_ROUND, r]).
_TAG_NULL = 1   # the cosines with foreign rounds.


@dataclasses.dataclass(frozen=True, eq=False)
class RoundsRun:
  """One run of `num_rounds` Gaussian-mechanism rounds with canaries.

  The attributes up to `remove_known_canaries` are `simulate_rounds`'s
  arguments.

  Attributes:
    inserted: max over rounds of each inserted canary's cosines, round by
      round (the canaries of round 0 first), read-only.
    held_out: the same for the held-out canaries, read-only.
    inserted_own: each inserted canary's cosine in its own round, read-only.
  """
  dim: int
  num_rounds: int
  inserted_per_round: int
  num_held_out: int
  noise_std: float
  seed: int
  remove_known_canaries: bool
  inserted: np.ndarray
  held_out: np.ndarray
  inserted_own: np.ndarray


def simulate_rounds(*,
                    dim: int,
                    num_rounds: int,
                    inserted_per_round: int,
                    num_held_out: int,
                    noise_std: float,
                    seed: int,
                    remove_known_canaries: bool = True) -> RoundsRun:
  """Runs `num_rounds` rounds of the mechanism; returns max-over-rounds cosines.

  Args:
    dim: d >= inserted_per_round + 1 (the fast simulator's condition).
    num_rounds: R >= 1.
    inserted_per_round: canaries inserted in each round, >= 1.
    num_held_out: held-out canaries, >= 0.
    noise_std: sigma > 0, the noise std of each round (sensitivity 1).
    seed: a nonnegative integer; the same seed gives identical arrays.
    remove_known_canaries: Take each cosine against the round's aggregate
      without the other inserted canaries (`known_canaries`; exact here).

  Returns:
    A `RoundsRun`.

  Raises:
    TypeError, ValueError: for a bad argument, naming it.
  """
  dim = validation.as_dim(dim)
  num_rounds = validation.as_int(num_rounds, "num_rounds", minimum=1)
  per_round = validation.as_int(inserted_per_round, "inserted_per_round",
                                minimum=1)
  num_held_out = validation.as_int(num_held_out, "num_held_out", minimum=0)
  noise_std = validation.as_positive(noise_std, "noise_std")
  seed = validation.as_int(seed, "seed", minimum=0)
  own = np.empty((num_rounds, per_round))
  for r in range(num_rounds):
    state = np.random.SeedSequence([seed, _TAG_ROUND, r])
    run = gaussian_mechanism.simulate(
        dim=dim, num_inserted=per_round, num_held_out=0, noise_std=noise_std,
        seed=int(state.generate_state(1, np.uint32)[0]),
        remove_known_canaries=remove_known_canaries)
    own[r] = run.inserted
  rng = np.random.default_rng([seed, _TAG_NULL])
  own = own.reshape(-1)
  inserted = own.copy()
  if num_rounds > 1:
    foreign = null_cosines(dim, (own.size, num_rounds - 1), rng)
    inserted = np.maximum(inserted, foreign.max(axis=1))
  held_out = null_cosines(dim, (num_held_out, num_rounds), rng).max(axis=1)
  for array in (inserted, held_out, own):
    array.setflags(write=False)
  return RoundsRun(dim=dim, num_rounds=num_rounds,
                   inserted_per_round=per_round, num_held_out=num_held_out,
                   noise_std=noise_std, seed=seed,
                   remove_known_canaries=bool(remove_known_canaries),
                   inserted=inserted, held_out=held_out, inserted_own=own)
