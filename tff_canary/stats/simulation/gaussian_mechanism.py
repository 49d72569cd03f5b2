"""Simulators of the Gaussian sum mechanism with random canaries.

The mechanism of Andrew et al., "One-shot Empirical Privacy Estimation for
Federated Learning" (ICLR 2024), Section 3 and Algorithm 1 (docs/method/canaries.md, docs/method/sign-convention.md, docs/method/null-law.md):
m candidate canaries c_1, ..., c_m, each a uniform unit vector of R^d drawn as
c = g / |g| with g ~ N(0, I_d); a subset I of them is inserted, and the output
is

  rho = sum_{j in I} c_j + sigma * z,   z ~ N(0, I_d),

the Gaussian mechanism on a sum of sensitivity 1 with noise std `sigma`. The
statistic of canary j is cos(c_j, rho). Inserted canaries have mean cosine close
to 1 / sqrt(sigma^2 d + |I|); the others (held out) follow the exact null law of
docs/method/null-law.md (mean 0, variance 1/d).

With `remove_known_canaries` (the default) the statistics are the auditor's
corrected ones of `tff_canary.stats.estimators.known_canaries`, exact here:
cos(c_j, c_j + sigma z) for inserted and cos(c_j, sigma z) for held-out
canaries.

Two simulators give the same law:

* ``"brute"`` materializes the d-dimensional vectors, `block_size` of them
  at a time (`_brute_cosines`). It costs O(m d) time.
* ``"fast"`` is exact in distribution without any d-dimensional vector; see
  `_fast_cosines` for the derivation (Bartlett decomposition of a Wishart
  matrix). It costs O(|I|^2 + m) time and needs d >= |I| + 1.
"""

from __future__ import annotations

import dataclasses
import typing
from typing import Literal

import numpy as np

from tff_canary.stats.estimators import known_canaries
from tff_canary.stats import validation

# "fast": exact in distribution, no d-dim vector; "brute": the vectors.
Simulator = Literal["fast", "brute"]
SIMULATORS = typing.get_args(Simulator)

# Tags that separate the independent random streams derived from one seed.
_TAG_CANARY = 0    # brute: canary j is default_rng([seed, _TAG_CANARY, j]).
_TAG_NOISE = 1     # brute: the noise z.
_TAG_COIN = 2      # both: the fair coins of `simulate_coin`.
_TAG_BARTLETT = 3  # fast: block b of the Bartlett factor.
_TAG_NULL = 4      # fast: the held-out cosines.

# Rows of the Bartlett factor generated per random stream (fast simulator). It
# is part of the definition of the random stream, so it is a constant, not an
# argument: changing it would change the numbers drawn for a given seed.
_BARTLETT_ROWS = 256

# Default memory budget of the brute-force simulator, in float64 entries of one
# block of canaries (2**22 entries = 32 MiB).
_BRUTE_BLOCK_ENTRIES = 2**22


@dataclasses.dataclass(frozen=True, eq=False)
class GaussianMechanismRun:
  """One run of the mechanism with `num_inserted` + `num_held_out` canaries.

  Attributes:
    dim, num_inserted, num_held_out, noise_std, seed, simulator, block_size:
      `simulate`'s arguments (k = num_inserted, k' = num_held_out).
    remove_known_canaries: Whether the other inserted canaries were removed
      from each canary's statistic (module docstring).
    inserted: The k cosines of the inserted canaries (read-only).
    held_out: The k' cosines of the held-out canaries (read-only).
    output_norm: |rho|.
  """
  dim: int
  num_inserted: int
  num_held_out: int
  noise_std: float
  seed: int
  simulator: Simulator
  block_size: int | None
  remove_known_canaries: bool
  inserted: np.ndarray
  held_out: np.ndarray
  output_norm: float


@dataclasses.dataclass(frozen=True, eq=False)
class CoinRun:
  """One run where each candidate canary is inserted by a fair coin.

  This is the setting of the one-run bound of Steinke, Nasr & Jagielski (2023)
  (docs/method/lower-bounds.md).

  Attributes:
    num_candidates: The number m of candidate canaries.
    statistics: The m cosines cos(c_j, rho), in candidate order (read-only).
    inserted_mask: Boolean, True where candidate j was inserted (read-only).
    dim, noise_std, seed, simulator, block_size: `simulate_coin`'s arguments.
    output_norm: |rho|.
  """
  dim: int
  num_candidates: int
  noise_std: float
  seed: int
  simulator: Simulator
  block_size: int | None
  statistics: np.ndarray
  inserted_mask: np.ndarray
  output_norm: float


def simulate(*,
             dim: int,
             num_inserted: int,
             num_held_out: int,
             noise_std: float,
             seed: int,
             simulator: Simulator = "fast",
             block_size: int | None = None,
             remove_known_canaries: bool = True) -> GaussianMechanismRun:
  """Runs the Gaussian mechanism once with inserted and held-out canaries.

  Args:
    dim: The dimension d, at least 2; the fast simulator also needs
      d >= num_inserted + 1.
    num_inserted: The number of inserted canaries, at least 0.
    num_held_out: The number of held-out canaries, at least 0.
    noise_std: The noise std sigma on the sum, at least 0 (0 needs at least one
      inserted canary, or rho would be 0).
    seed: A nonnegative integer; the same seed gives identical arrays.
    simulator: "fast" (exact in distribution, no d-dim vector) or "brute".
    block_size: Canaries materialized at once by the brute-force simulator
      (memory block_size x dim floats); default about 32 MiB. Ignored by "fast".
    remove_known_canaries: Take each canary's cosine against rho without the
      other inserted canaries (module docstring). False: against rho itself,
      as the paper does.

  Returns:
    A `GaussianMechanismRun`. With the brute-force simulator inserted canary j
    has index j and held-out canary j has index num_inserted + j.

  Raises:
    TypeError, ValueError: for a bad argument, naming it.
  """
  dim, noise_std, seed, simulator, block_size = _check_common(
      dim, noise_std, seed, simulator, block_size)
  num_inserted, num_held_out, remove_known_canaries = _check_canaries(
      num_inserted, num_held_out, remove_known_canaries)
  cosines, norm, noise = _cosines(
      dim, np.arange(num_inserted + num_held_out) < num_inserted, noise_std,
      seed, simulator, block_size, "num_inserted")
  if remove_known_canaries:
    # c_j . (sigma z) and |sigma z|: the residual a' = rho - sum_i c_i (brute:
    # every canary; fast: the inserted ones).
    corrected = known_canaries.corrected_cosines(
        noise_std * noise.norm * noise.dots, noise_std * noise.norm, 1.0,
        np.arange(noise.dots.size) < num_inserted)
    cosines[:corrected.size] = corrected
    if simulator == "fast" and noise_std == 0.0:
      # Held-out cosines with rho and with sigma z both have the exact null
      # law, independent of the inserted ones (`_fast_cosines`); the same
      # draws serve for either, but they are 0 when sigma z = 0.
      cosines[num_inserted:] = 0.0
  return GaussianMechanismRun(
      dim=dim, num_inserted=num_inserted, num_held_out=num_held_out,
      noise_std=noise_std, seed=seed, simulator=simulator,
      block_size=block_size, remove_known_canaries=remove_known_canaries,
      inserted=_frozen(cosines[:num_inserted]),
      held_out=_frozen(cosines[num_inserted:]), output_norm=norm)


def simulate_coin(*,
                  dim: int,
                  num_candidates: int,
                  noise_std: float,
                  seed: int,
                  simulator: Simulator = "fast",
                  block_size: int | None = None) -> CoinRun:
  """Runs the mechanism once, inserting each candidate by a fair coin.

  The coins come from their own stream of `seed`, so both simulators insert the
  same candidates for the same seed. `seed`, `simulator` and `block_size` are
  as in `simulate`.

  Args:
    dim: The dimension d, at least 2; the fast simulator also needs d to exceed
      the number of inserted candidates (d >= num_candidates + 1 always works).
    num_candidates: The number m of candidates, at least 1.
    noise_std: The noise std sigma on the sum, at least 0 (0 fails if no coin
      comes up heads).

  Returns:
    A `CoinRun`; with the brute-force simulator candidate j has index j.

  Raises:
    TypeError, ValueError: for a bad argument, naming it.
  """
  dim, noise_std, seed, simulator, block_size = _check_common(
      dim, noise_std, seed, simulator, block_size)
  num_candidates = validation.as_int(num_candidates, "num_candidates",
                                     minimum=1)
  mask = _coins(seed, num_candidates)
  statistics, norm, _ = _cosines(dim, mask, noise_std, seed, simulator,
                                 block_size, "the number of inserted candidates")
  return CoinRun(dim=dim, num_candidates=num_candidates, noise_std=noise_std,
                 seed=seed, simulator=simulator, block_size=block_size,
                 statistics=_frozen(statistics), inserted_mask=_frozen(mask),
                 output_norm=norm)


def _check_common(dim, noise_std, seed, simulator, block_size):
  dim = validation.as_dim(dim, "dim")
  noise_std = validation.as_nonnegative(noise_std, "noise_std")
  seed = validation.as_int(seed, "seed", minimum=0)
  simulator = validation.as_choice(simulator, "simulator", SIMULATORS)
  if block_size is not None:
    block_size = validation.as_int(block_size, "block_size", minimum=1)
  return dim, noise_std, seed, simulator, block_size


def null_cosines(dim: int, shape: tuple[int, ...] | int,
                 rng: np.random.Generator) -> np.ndarray:
  """Draws of the exact null law of docs/method/null-law.md: cos(c, v), c uniform on S^{d-1}.

  Rotating v to e_1, cos = y / sqrt(y^2 + q) with y ~ N(0, 1) and q ~
  chi2(d - 1) independent (no cancellation at any d).
  """
  y = rng.standard_normal(shape)
  q = rng.chisquare(dim - 1, shape)
  return y / np.sqrt(y * y + q)


def _check_canaries(num_inserted, num_held_out, remove_known_canaries):
  """The arguments `simulate` shares with `orthogonal_mechanism.simulate`."""
  num_inserted = validation.as_int(num_inserted, "num_inserted", minimum=0)
  num_held_out = validation.as_int(num_held_out, "num_held_out", minimum=0)
  if num_inserted + num_held_out == 0:
    raise ValueError("num_inserted + num_held_out must be at least 1, got "
                     "num_inserted=0 and num_held_out=0.")
  return num_inserted, num_held_out, validation.as_bool(
      remove_known_canaries, "remove_known_canaries")


def _coins(seed: int, size: int) -> np.ndarray:  # also orthogonal_mechanism's
  return np.random.default_rng([seed, _TAG_COIN]).random(size) < 0.5


def _cosines(dim: int, mask: np.ndarray, noise_std: float, seed: int,
             simulator: Simulator, block_size: int | None,
             what: str) -> tuple[np.ndarray, float, _Noise]:
  """cos(c_j, rho) of every canary (inserted where `mask`), |rho| and the
  `_Noise` of every canary (brute) or of the inserted ones (fast)."""
  num_inserted = int(mask.sum())
  if num_inserted == 0 and noise_std == 0.0:
    raise ValueError("noise_std=0.0 with no inserted canary makes the output "
                     "rho = 0, whose cosines are undefined; use noise_std > 0 "
                     "or insert a canary.")
  if simulator == "brute":
    return _brute_cosines(dim, np.flatnonzero(mask), np.arange(mask.size),
                          noise_std, seed, block_size)
  if dim < num_inserted + 1:
    raise ValueError(
        f"The fast simulator needs dim >= {what} + 1 (the noise and the "
        f"inserted canaries must be linearly independent for the Bartlett "
        f"decomposition), got dim={dim} with {num_inserted} inserted; use "
        f"simulator='brute'.")
  inserted, held_out, norm, noise = _fast_cosines(
      dim, num_inserted, mask.size - num_inserted, noise_std, seed)
  cosines = np.empty(mask.size)
  cosines[mask], cosines[~mask] = inserted, held_out
  return cosines, norm, noise


def _frozen(array: np.ndarray) -> np.ndarray:
  array = np.ascontiguousarray(array)
  array.setflags(write=False)
  return array


@dataclasses.dataclass(frozen=True)
class _Noise:
  """The canaries' inner products with the unit noise direction z / |z|."""
  dots: np.ndarray  # c_j . z / |z| for the simulated canaries, in order.
  norm: float       # |z|


def _brute_cosines(dim: int, inserted_index: np.ndarray, index: np.ndarray,
                   noise_std: float, seed: int, block_size: int | None
                   ) -> tuple[np.ndarray, float, _Noise]:
  """cos(c_j, rho) for j in `index`, materializing the vectors in blocks.

  Canary j is g_j / |g_j| with g_j = default_rng([seed, 0, j]).standard_normal
  (dim); the noise is z = default_rng([seed, 1]).standard_normal(dim). Pass 1
  sums the canaries of `inserted_index` into rho and adds noise_std * z; pass 2
  regenerates every canary of `index` and computes its cosine with rho and
  with z. All in float64.
  """
  if block_size is None:
    block_size = max(1, _BRUTE_BLOCK_ENTRIES // dim)
  z = np.random.default_rng([seed, _TAG_NOISE]).standard_normal(dim)
  z_norm = float(np.linalg.norm(z))
  rho = noise_std * z
  for start in range(0, inserted_index.size, block_size):
    block, norms = _brute_block(dim, inserted_index[start:start + block_size],
                                seed)
    rho += (block / norms[:, None]).sum(axis=0)
  rho_norm = float(np.linalg.norm(rho))
  cosines, noise_dots = np.empty(index.size), np.empty(index.size)
  for start in range(0, index.size, block_size):
    block, norms = _brute_block(dim, index[start:start + block_size], seed)
    cosines[start:start + block_size] = (block @ rho) / (norms * rho_norm)
    noise_dots[start:start + block_size] = (block @ z) / (norms * z_norm)
  return (np.clip(cosines, -1.0, 1.0), rho_norm,
          _Noise(np.clip(noise_dots, -1.0, 1.0), z_norm))


def _brute_block(dim: int, index: np.ndarray,
                 seed: int) -> tuple[np.ndarray, np.ndarray]:
  block = np.empty((index.size, dim))
  for row, j in enumerate(index):
    np.random.default_rng([seed, _TAG_CANARY, int(j)]).standard_normal(
        out=block[row])
  return block, np.linalg.norm(block, axis=1)


def _fast_cosines(dim: int, num_inserted: int, num_held_out: int,
                  noise_std: float, seed: int
                  ) -> tuple[np.ndarray, np.ndarray, float, _Noise]:
  """The cosines of one run, exact in distribution, without d-dim vectors.

  L is the Bartlett factor of the Gram matrix of X = [z, g_1, ..., g_k],
  Wishart_{k+1}(d, I) (Bartlett 1933; Muirhead, "Aspects of Multivariate
  Statistical Theory", 1982, Theorem 3.2.14), lower triangular with
  independent entries

    L_ii^2 ~ chi2(d - i + 1)  (i = 1, ..., k + 1),   L_ij ~ N(0, 1)  (i > j).

  With l_j = row (j + 1) of L divided by its norm (canary c_j in the span's
  Gram-Schmidt basis) and row 1 of L = (|z|, 0, ..., 0),

    u = noise_std * L_1 + sum_j l_j       (the coordinates of rho; |rho| = |u|)
    cos(c_j, rho) = <l_j, u> / |u|,

  in O(k^2) and float64 to about 13 digits. Held-out cosines are i.i.d.
  draws of the null law (`null_cosines`), independent of the inserted ones.
  Derivation, precision and cost: docs/method/null-law.md ("Simulating the
  Gaussian mechanism exactly").

  For the corrected statistics (`known_canaries`), c_j . z / |z| is the first
  coordinate of l_j, and |z| = L_11: returned as a `_Noise` for the inserted
  canaries.

  The factor L is generated in blocks of `_BARTLETT_ROWS` rows, each from its
  own stream [seed, _TAG_BARTLETT, block], and regenerated for the second pass,
  so memory is O(_BARTLETT_ROWS * k) whatever k.
  """
  size = num_inserted + 1
  num_blocks = -(-size // _BARTLETT_ROWS)
  # Pass 1: u = noise_std * L_1 + sum_j l_j.
  u = np.zeros(size)
  for block in range(num_blocks):
    start, rows = _bartlett_block(dim, size, seed, block)
    if start == 0:
      u[0] += noise_std * rows[0, 0]
      rows = rows[1:]
    stop = rows.shape[1]
    u[:stop] += (rows / np.linalg.norm(rows, axis=1)[:, None]).sum(axis=0)
  norm = float(np.linalg.norm(u))
  # Pass 2: <l_j, u> / |u|.
  inserted, noise_dots = np.empty(num_inserted), np.empty(num_inserted)
  for block in range(num_blocks):
    start, rows = _bartlett_block(dim, size, seed, block)
    stop = start + rows.shape[0]
    if start == 0:
      z_norm = float(rows[0, 0])
      rows, start = rows[1:], 1
    row_norms = np.linalg.norm(rows, axis=1)
    cosines = (rows @ u[:rows.shape[1]]) / (row_norms * norm)
    inserted[start - 1:stop - 1] = cosines
    noise_dots[start - 1:stop - 1] = rows[:, 0] / row_norms
  held_out = null_cosines(dim, num_held_out,
                          np.random.default_rng([seed, _TAG_NULL]))
  return (np.clip(inserted, -1.0, 1.0), held_out, norm,
          _Noise(np.clip(noise_dots, -1.0, 1.0), z_norm))


def _bartlett_block(dim: int, size: int, seed: int,
                    block: int) -> tuple[int, np.ndarray]:
  """Rows [start, stop) of the Bartlett factor L of Wishart_size(dim, I).

  Returns `start` and the rows truncated to their first `stop` columns (the
  rest of a lower-triangular row is zero). Row i (0-based) has i N(0, 1)
  entries below the diagonal and L_ii = sqrt(chi2(dim - i)).
  """
  start = block * _BARTLETT_ROWS
  stop = min(size, start + _BARTLETT_ROWS)
  rng = np.random.default_rng([seed, _TAG_BARTLETT, block])
  rows = rng.standard_normal((stop - start, stop))
  local = np.arange(stop - start)
  diagonal = start + local
  rows[np.arange(stop)[None, :] >= diagonal[:, None]] = 0.0
  rows[local, diagonal] = np.sqrt(rng.chisquare(dim - diagonal))
  return start, rows
