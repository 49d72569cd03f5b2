"""The numbers TFF's `DistributedDpSumFactory` derives from its arguments.

TFF 0.87's distributed-DP aggregator (`tensorflow_federated/python/aggregators/
distributed_dp.py`, with `discretization.py`, `modular_clipping.py` and
tensorflow_privacy's `DistributedDiscreteGaussianSumQuery` /
`DistributedSkellamSumQuery`) turns (noise_multiplier z, expected
clients_per_round n, bits b, l2_clip C, beta, mechanism, rotation) into the
parameters below; its queries emit `UnsupportedDpEvent`, so there is no ledger
to read them from. `ddp_parameters` recomputes them in NumPy, formula for
formula, for a fixed clip (`auto_l2_clip=False`):

* padded dimension: DFT rotation pads d to an even number, the randomized
  Hadamard transform to a power of two;
* k = sqrt(2) erfcinv(modclip_prob): how many standard deviations of the sum
  must fit in the modulus 2^b;
* central std z C, local (per-client noise share) std z C / sqrt(n);
* the scale s (Kairouz, Liu & Steinke 2021, arXiv 2102.06387, Section 4.2
  and 4.4, TFF's `_heuristic_scale_factor`), solving
    2^b = 2 k sqrt(C^2 n^2 / d + (1/(4 s^2) + sigma_l^2) n) s
  as  s = sqrt(2^(2b) - n k^2) / (2 k sqrt(C^2 n^2 / d + n sigma_l^2)),
  capped at 1e6; the rounding granularity is gamma = 1/s;
* the L2 norm bound after (conditional) randomized rounding, TFF's
  `discretization.inflated_l2_norm_bound`, which cites Theorem 1 and Sec. 4.1
  of Kairouz, Liu & Steinke 2021 (arXiv 2102.06387):
    bound_1 = C + gamma sqrt(d),
    bound_2 = sqrt(C^2 + gamma^2 d / 4 + sqrt(2 log(1/beta)) gamma (C + gamma sqrt(d) / 2)),
  inflated = min(bound_1, bound_2) (bound_1 alone when beta = 0);
* in the integer (scaled) domain: Delta_2 = (inflated + 1e-5) s (TFF's
  leeway), Delta_1 = ceil(Delta_2 min(sqrt(d), Delta_2)) (integer vectors
  have L1 <= L2^2), and the noise-share parameter sigma_l s;
* the noise each client actually adds: Skellam Sk(lambda, lambda) with
  lambda = (sigma_l s)^2 / 2 (variance (sigma_l s)^2), or the discrete
  Gaussian N_Z(0, sigma^2) with sigma = ceil(sigma_l s): tensorflow_privacy's
  sampler takes integer scales only and rounds up, so DDG clients add more
  noise than z asks for when sigma_l s is small;
* the modulus 2^b: the sum is reduced to [-2^(b-1), 2^(b-1)).

TFF computes some of these in float32; the values here are float64, so they
agree to 1e-5 relative (tests/stats/accounting/test_ddp_parameters.py compares them
with a factory's own state). NumPy and SciPy only.
"""

from __future__ import annotations

import dataclasses
import math
import typing
from typing import Any, Literal

import numpy as np
from scipy import special

from tff_canary.stats import validation

Mechanism = Literal["distributed_dgauss", "distributed_skellam"]
MECHANISMS = typing.get_args(Mechanism)
Rotation = Literal["dft", "hd"]
ROTATIONS = typing.get_args(Rotation)

# TFF's cap on the scale (distributed_dp.MAX_SCALE_FACTOR) and its leeway on
# the norm bounds checked by the queries.
MAX_SCALE = 1e6
NORM_LEEWAY = 1e-5
MAX_BITS = 22  # TFF: float32 represents integers up to 2^24.


@dataclasses.dataclass(frozen=True)
class DdpParameters:
  """A `DistributedDpSumFactory`'s inputs and what it derives from them.

  Inputs: noise_multiplier, clients_per_round (the factory's
  `expected_clients_per_round`), bits, l2_clip, dim (the client vector's
  length before padding), beta, mechanism, rotation, modclip_prob.

  Derived (module docstring): padded_dim, k_stddevs, scale, gamma (=1/scale),
  inflated_l2 (unscaled L2 bound after rounding), l2_sensitivity and
  l1_sensitivity (integer domain, with TFF's leeway), local_std (sigma_l,
  unscaled), scaled_local_std (sigma_l s, what the query holds),
  share_std (the parameter of each client's noise share: sigma_l s for
  Skellam, its ceiling for the discrete Gaussian), modulus (2^b).
  """

  noise_multiplier: float
  clients_per_round: int
  bits: int
  l2_clip: float
  dim: int
  beta: float
  mechanism: Mechanism
  rotation: Rotation
  modclip_prob: float
  padded_dim: int
  k_stddevs: float
  scale: float
  inflated_l2: float
  l2_sensitivity: float
  l1_sensitivity: int
  local_std: float
  scaled_local_std: float
  share_std: float
  modulus: int

  @property
  def gamma(self) -> float:
    return 1.0 / self.scale

  def total_noise_std(self, num_shares: int | None = None) -> float:
    """Std of the summed noise shares in the integer domain.

    `num_shares` clients add a share (default clients_per_round, what the
    factory assumes). For the discrete Gaussian this is sqrt(n) * the share's
    scale parameter sigma; its variance is below sigma^2 (Canonne, Kamath &
    Steinke 2020, arXiv 2004.00010, Sec. 2), by less than 3e-7 relative for
    sigma >= 1 (tests/stats/accounting/test_ddp_accounting.py sums it).
    """
    n = self.clients_per_round if num_shares is None else validation.as_int(
        num_shares, "num_shares", minimum=1)
    return math.sqrt(n) * self.share_std

  def __str__(self) -> str:
    return (f"{self.mechanism} (b={self.bits}, z={self.noise_multiplier:g}, "
            f"n={self.clients_per_round}, C={self.l2_clip:g}, d={self.dim}, "
            f"beta={self.beta:g}): scale {self.scale:.4g}, L2 bound after "
            f"rounding {self.inflated_l2 / self.l2_clip:.4g} C, noise share "
            f"std {self.share_std:.4g} (integer units), modulus 2^{self.bits}")

  def as_dict(self) -> dict[str, Any]:
    out = dataclasses.asdict(self)
    out["summary"] = str(self)
    return out


def padded_dim(dim: int, rotation: Rotation) -> int:
  """TFF's padding before rotation: even for DFT, a power of two for HD."""
  dim = validation.as_int(dim, "dim", minimum=1)
  rotation = validation.as_choice(rotation, "rotation", ROTATIONS)
  if rotation == "hd":
    return 2 ** math.ceil(math.log2(dim))
  return math.ceil(dim / 2.0) * 2


def k_stddevs(modclip_prob: float) -> float:
  """sqrt(2) erfcinv(p): TFF's `_clip_prob_to_num_stddevs` (two-sided tail p)."""
  p = validation.as_unit_interval(modclip_prob, "modclip_prob",
                                  include_low=False, include_high=False)
  return math.sqrt(2.0) * float(special.erfcinv(p))


def heuristic_scale(local_std: float, l2_clip: float, bits: int,
                    clients_per_round: int, dim: int, k: float) -> float:
  """TFF's `_heuristic_scale_factor` (module docstring), before the cap."""
  numer = math.sqrt(2.0 ** (2.0 * bits) - clients_per_round * k**2)
  denom = 2.0 * k * math.sqrt(l2_clip**2 * clients_per_round**2 / dim
                              + clients_per_round * local_std**2)
  return numer / denom


def inflated_l2_bound(l2_clip: float, gamma: float, beta: float,
                      dim: int) -> float:
  """L2 norm bound after (conditional) randomized rounding to the gamma grid.

  TFF's `inflated_l2_norm_bound` (module docstring): beta = 0 (unconditional
  rounding) gives bound_1 alone; beta in (0, 1), conditional rounding
  resampling until the norm is at most min(bound_1, bound_2).
  """
  l2_clip = validation.as_positive(l2_clip, "l2_clip")
  gamma = validation.as_positive(gamma, "gamma")
  beta = validation.as_unit_interval(beta, "beta", include_high=False)
  dim = validation.as_int(dim, "dim", minimum=1)
  g_sqrt_d = gamma * math.sqrt(dim)
  bound_1 = l2_clip + g_sqrt_d
  if beta == 0.0:
    return bound_1
  squared = (l2_clip**2 + 0.25 * g_sqrt_d**2
             + math.sqrt(2.0 * math.log(1.0 / beta)) * gamma
             * (l2_clip + 0.5 * g_sqrt_d))
  return min(bound_1, math.sqrt(squared))


def ddp_parameters(noise_multiplier: float, clients_per_round: int,
                   bits: int, l2_clip: float, dim: int, *,
                   beta: float = 0.0,
                   mechanism: Mechanism = "distributed_skellam",
                   rotation: Rotation = "dft",
                   modclip_prob: float = 1e-4) -> DdpParameters:
  """What `DistributedDpSumFactory(...)` derives for a vector of `dim` values.

  Arguments as the factory's (`clients_per_round` is its
  `expected_clients_per_round`); the same checks (bits in [1, 22], 2^b >= n,
  2^(2b) >= n k^2) raise ValueError naming the argument.
  """
  z = validation.as_nonnegative(noise_multiplier, "noise_multiplier")
  n = validation.as_int(clients_per_round, "clients_per_round", minimum=1)
  bits = validation.as_int(bits, "bits", minimum=1)
  if bits > MAX_BITS:
    raise ValueError(f"bits must be at most {MAX_BITS} (TFF's limit), got "
                     f"{bits}.")
  l2_clip = validation.as_positive(l2_clip, "l2_clip")
  dim = validation.as_int(dim, "dim", minimum=1)
  beta = validation.as_unit_interval(beta, "beta", include_high=False)
  mechanism = validation.as_choice(mechanism, "mechanism", MECHANISMS)
  rotation = validation.as_choice(rotation, "rotation", ROTATIONS)
  k = k_stddevs(modclip_prob)
  if bits < math.log2(n):
    raise ValueError(f"bits must be >= log2(clients_per_round) = "
                     f"{math.log2(n):.3g}, got {bits}.")
  if 2 ** (2 * bits) < n * k**2:
    raise ValueError(f"bits = {bits} is too small for clients_per_round = {n}"
                     f" and modclip_prob = {modclip_prob} (2^(2b) < n k^2).")
  d = padded_dim(dim, rotation)
  local_std = z * l2_clip / math.sqrt(n)
  scale = min(heuristic_scale(local_std, l2_clip, bits, n, d, k), MAX_SCALE)
  inflated = inflated_l2_bound(l2_clip, 1.0 / scale, beta, d)
  l2_sens = (inflated + NORM_LEEWAY) * scale
  l1_sens = math.ceil(l2_sens * min(math.sqrt(d), l2_sens))
  scaled_local = local_std * scale
  # float32 as in the query state, then tensorflow_privacy's ceil for DDG.
  share = float(np.float32(scaled_local))
  if mechanism == "distributed_dgauss":
    share = float(math.ceil(share))
  return DdpParameters(
      noise_multiplier=z, clients_per_round=n, bits=bits, l2_clip=l2_clip,
      dim=dim, beta=beta, mechanism=mechanism, rotation=rotation,
      modclip_prob=float(modclip_prob), padded_dim=d, k_stddevs=k,
      scale=scale, inflated_l2=inflated, l2_sensitivity=l2_sens,
      l1_sensitivity=int(l1_sens), local_std=local_std,
      scaled_local_std=scaled_local, share_std=share, modulus=2**bits)


__all__ = ["DdpParameters", "Mechanism", "MECHANISMS", "Rotation",
           "ROTATIONS", "ddp_parameters", "heuristic_scale",
           "inflated_l2_bound", "k_stddevs", "padded_dim"]
