"""A noise self-test for TFF's distributed-DP chain, in the noise's own basis.

`check_ddp_noise(aggregator, parameters)` builds a FRESH distributed-DP sum
process (`ddp_chain.ddp_sum_factory(parameters)`, a planted-bug chain
`planted_bugs.ddp_sum_factory(...)`, or a given unweighted
`tff.templates.AggregationProcess` of that chain, initialized anew), runs it
for `num_rounds` rounds on clients whose values are all ZERO, rotates each
round's released noise back into the domain where the clients added it, and
tests it there with `noise_stats.check_noise`.

Why the rotated domain (docs/guide/distributed-dp.md, "Noise reuse inside
distributed DP"): TFF's `DistributedDpSumFactory` (TFF 0.87) adds the
clients' noise shares after rotating, scaling and rounding; the released
noise is R_t^T S_t / s (S_t the integer sum of the shares, R_t round t's
rotation), where a defect of the shares spreads over every coordinate with
the claimed variance. Whitening by the claimed structure, as
`correlated.noise_check` does for DP-FTRL's tree, means here applying R_t again.

The server knows R_t. TFF 0.87's rotation factories keep one seed in their
state, (timestamp in microseconds, counter), drawn once from the clock at
`initialize` (`_init_global_seed`); round t rotates with the seed the state
holds BEFORE the round (client and server transforms take the broadcast
state), and the state's counter then advances by the seeds the round used
(`num_repeats` per rotated tensor; the chain concatenates the value into one
tensor first, so the stride is `num_repeats`). `rotation_seed` reads the seed
from the state and `forward_rotation` repeats TFF's client transform with it:
for "hd", signs from `tf.random.stateless_uniform(shape, seed)` (x ->
sign(u - 1/2) x) and the normalized fast Walsh-Hadamard transform; for
"dft", the halves as real and imaginary parts, times exp(i pi u), u =
`tf.random.stateless_uniform(shape, seed, 0, 2)`, the FFT over sqrt(d / 2),
real parts then imaginary parts; each repeat with the seed plus the repeat's
index (both seed entries, as TFF's `seed += 1`). The random draws are the
same public TF calls with the same arguments as TFF's `sample_rademacher` and
`sample_cis` (rotation.py, not exported from `tff.aggregators`), so the same
numbers; the transforms are NumPy in float64.

The claim, per rotated coordinate. With zero client values each client's
scaled, rounded vector is exactly 0 (stochastic rounding of 0 is 0), so
y_t = s R_t r_t (r_t the released round, s the chain's scale from its state)
is S_t: in every coordinate, independently across coordinates and rounds, the
sum of the n clients' integer shares, reduced modulo 2^b to
[-2^(b-1), 2^(b-1)) (modular clipping; a sum wraps with probability about
`modclip_prob` or less):

  * distributed Skellam (Agarwal, Kairouz & Liu 2021, arXiv 2110.04995):
    each share is Sk(lam, lam), lam = (sigma_l s)^2 / 2, so the sum of n is
    Sk(n lam, n lam): integer, symmetric, variance n (sigma_l s)^2;
  * distributed discrete Gaussian (Kairouz, Liu & Steinke 2021, arXiv
    2102.06387): each share is N_Z(0, sigma^2), sigma = ceil(sigma_l s)
    (tensorflow_privacy's sampler rounds up), so the sum is integer,
    symmetric, variance n sigma^2 (less by < 3e-7 relative; close to, not
    exactly, a discrete Gaussian: the paper's Sec. 4).

The claimed std is `parameters.total_noise_std()` (`ddp_parameters`), for
the clients the factory expects; the check runs `num_clients` zero-valued
clients (default those), so a chain that computes its shares for more
clients than take part fails the variance test. `check_noise` tests y_t,
rounded to the integers, with the rotated vector's two halves as its two
tensors (for the DFT, the real and imaginary parts): the `prefix` test's
cosine between them is 1 when one half repeats the other, however the
rounding goes. The Gaussian-shape test compares with the continuous N(0, 1),
about 0.2 / sigma away from an integer sum of std sigma, so a claimed std
under `MIN_INTEGER_STD` is refused (rejection rates: docs/benchmarks.md).

Rounding resolves S_t only while the release's float32 error is under half
an integer unit; it grows with the scale (more for the DFT, TF's complex64
FFT; docs/benchmarks.md), so at TFF's 20 bits the DFT's release can be off
the lattice. `lattice_rms` reports it (1/sqrt(12) = 0.289 off the lattice):
under `LATTICE_RMS` the `reuse` test sees repeats at any offset; above, only
repeats that survive rounding, while the halves' cosine needs no lattice.
TFF's Hadamard sign(u - 1/2) is 0 with probability 2^-23 per coordinate (u
float32); TFF drops such a coordinate, which raises `lattice_rms` by about
sigma / sqrt(d) but not the tests' statistics. A pass says that the listed
defects are absent in the basis where the claim is i.i.d.; it cannot show
that the mechanism is private.
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
from collections.abc import Mapping
from typing import Any, Optional

import numpy as np
import tensorflow as tf
import tensorflow_federated as tff

from tff_canary.federated.audit import noise_check
from tff_canary.federated.runtime import worker_guard
from tff_canary.federated.structures import nested_search
from tff_canary.stats import validation
from tff_canary.stats.accounting import ddp_parameters
from tff_canary.stats.noise import noise_stats

worker_guard.install()

DEFAULT_ROUNDS = noise_check.DEFAULT_ROUNDS
# The smallest claimed std (integer units) whose sums pass the Gaussian-shape
# test against the continuous N(0, 1) (module docstring).
MIN_INTEGER_STD = 100.0
# rms distance to the integers under which the rotated noise counts as on
# the lattice; off it the distance is uniform, rms 1/sqrt(12) = 0.289, and the
# mean square's std over N values is 0.0745 / sqrt(N): at N >= 1000, 0.2^2 is
# 18 of them below 1/12.
LATTICE_RMS = 0.2
# The sizes each rotation takes without padding (`ddp_parameters.padded_dim`).
_SIZES = {"dft": "an even", "hd": "a power-of-2"}


@dataclasses.dataclass(frozen=True)
class DdpNoiseCheck:
  """The rotated-domain self-test's verdict.

  Attributes:
    passed: the rotated noise passed `noise_stats.check_noise`.
    check: that `noise_stats.NoiseCheck` (integer units; tensors: the halves
      of the rotated vector).
    rotation: "dft" or "hd", as the chain's measurements name it.
    num_repeats: rotations per round (the seed's stride).
    scale: the chain's scale factor (its state's `scale_factor`).
    integer_std: the claimed std of each rotated coordinate, integer units.
    num_clients: zero-valued clients per round.
    lattice_rms: rms distance of the rotated, scaled noise to the integers.
  """

  passed: bool
  check: noise_stats.NoiseCheck
  rotation: str
  num_repeats: int
  scale: float
  integer_std: float
  num_clients: int
  lattice_rms: float

  @property
  def on_lattice(self) -> bool:
    """The rounded noise is the integer sums (module docstring)."""
    return self.lattice_rms < LATTICE_RMS

  @property
  def verdict(self) -> str:
    return self.check.verdict

  def test(self, name: str) -> noise_stats.NoiseTest:
    """The check's test called `name` (`NoiseCheck.test`)."""
    return self.check.test(name)

  def __str__(self) -> str:
    where = ("on the integer lattice" if self.on_lattice else
             "OFF the integer lattice, so only repeats that survive "
             "rounding count as reuse")
    return (f"ddp {self.rotation}-rotated {self.check} (rotated noise {where}:"
            f" rms distance {self.lattice_rms:.3g})")

  def as_dict(self) -> dict[str, Any]:
    """noise_check.json: the check's `as_dict` with the rotation and the
    lattice, not the noise itself."""
    out = self.check.as_dict()
    out.update(summary=str(self), kind="ddp", rotation=self.rotation,
               num_repeats=self.num_repeats, scale=self.scale,
               integer_std=self.integer_std, num_clients=self.num_clients,
               lattice_rms=self.lattice_rms, on_lattice=self.on_lattice)
    return out


def hadamard(values: np.ndarray) -> np.ndarray:
  """The normalized Walsh-Hadamard transform (Sylvester order, TFF's
  `fast_walsh_hadamard_transform`) of a vector whose size is a power of 2."""
  x = np.array(values, dtype=np.float64).reshape(-1)
  size = x.size
  if size < 1 or size & (size - 1):
    raise ValueError(f"values must have a power-of-2 size, got {size}.")
  half = 1
  while half < size:
    blocks = x.reshape(-1, 2, half)
    x = np.stack([blocks[:, 0] + blocks[:, 1],
                  blocks[:, 0] - blocks[:, 1]], axis=1).reshape(-1)
    half *= 2
  return x / math.sqrt(size)


def _uniform(size, seed, maxval=1.0):
  # TFF's draws: the same public call, shape, seed, range and dtype (float32).
  return tf.random.stateless_uniform(
      [size], seed=tf.constant(seed, tf.int64), minval=0,
      maxval=maxval).numpy()


def forward_rotation(values: Any, seed: Any, rotation: str,
                     num_repeats: int = 1) -> np.ndarray:
  """TFF's client-side rotation of a flat vector with a round's seed
  (module docstring), in float64.

  Args:
    values: the vector (its size: even for "dft", a power of 2 for "hd").
    seed: the rotation state's seed before the round, two int64 values.
    rotation: "dft" or "hd".
    num_repeats: the rotation factory's `num_repeats`.
  """
  rotation = validation.as_choice(rotation, "rotation",
                                  ddp_parameters.ROTATIONS)
  num_repeats = validation.as_int(num_repeats, "num_repeats", minimum=1)
  x = np.array(values, dtype=np.float64).reshape(-1)
  if ddp_parameters.padded_dim(max(1, x.size), rotation) != x.size:
    raise ValueError(f"values must have {_SIZES[rotation]} size for "
                     f"rotation {rotation!r}, got {x.size}.")
  seed = np.asarray(seed)
  if seed.shape != (2,) or not np.issubdtype(seed.dtype, np.integer):
    raise ValueError(f"seed must be two integers, got {seed!r}.")
  seed = seed.astype(np.int64)
  for j in range(num_repeats):
    if rotation == "hd":
      signs = np.sign(_uniform(x.size, seed + j) - np.float32(0.5))
      x = hadamard(x * signs)
    else:
      half = x.size // 2
      angle = _uniform(half, seed + j, maxval=2.0) * np.float32(math.pi)
      z = (x[:half] + 1j * x[half:]) * np.exp(1j * angle.astype(np.float64))
      z = np.fft.fft(z) / math.sqrt(half)
      x = np.concatenate([z.real, z.imag])
  return x


def _is_seed(node: Any) -> bool:
  return (isinstance(node, tuple) and len(node) == 2
          and isinstance(node[1], np.ndarray) and node[1].shape == (2,)
          and node[1].dtype == np.int64)


def _find(tree: Any, predicate, what: str) -> Any:
  node = nested_search.find_first(tree, predicate)
  if node is None:
    raise ValueError(f"{what}: check_ddp_noise needs the DistributedDpSum"
                     "Factory chain (ddp_chain.ddp_sum_factory).")
  return node


def rotation_seed(state: Any) -> np.ndarray:
  """The seed a TFF rotation factory's state holds (module docstring): the
  first (inner state, int64[2]) pair in `state`, depth first."""
  node = _find(state, _is_seed, "the process state has no TFF rotation state "
               "(an (inner state, int64[2] seed) pair)")
  return np.array(node[1], dtype=np.int64)


def _scale(state: Any, parameters) -> float:
  node = _find(state, lambda n: isinstance(n, Mapping) and "scale_factor" in n,
               "the process state has no scale_factor (DiscretizationFactory's"
               " state)")
  scale = float(np.asarray(node["scale_factor"]))
  # float32 in the state, float64 in ddp_parameters: 1e-5 relative apart.
  if not math.isclose(scale, parameters.scale, rel_tol=1e-4):
    raise ValueError(f"the chain's scale_factor {scale:.7g} differs from "
                     f"parameters.scale {parameters.scale:.7g}: the "
                     "parameters are not the chain's.")
  return scale


def _rotation(measurements: Any, parameters) -> str:
  names = ddp_parameters.ROTATIONS
  node = _find(measurements, lambda n: isinstance(n, Mapping) and any(
      k in n for k in names), "the process's measurements name no TFF "
               f"rotation ({' or '.join(names)})")
  name = next(k for k in names if k in node)
  if name != parameters.rotation:
    raise ValueError(f"the chain rotates with {name!r} but "
                     f"parameters.rotation is {parameters.rotation!r}.")
  return name


def _flat_size(value_type, rotation: str) -> int:
  specs = tf.nest.flatten(tff.types.type_to_tf_tensor_specs(value_type))
  if not all(s.dtype.is_floating and s.shape.is_fully_defined()
             for s in specs):
    raise TypeError("value_type must hold float tensors of known shape, got "
                    f"{value_type}.")
  size = sum(int(s.shape.num_elements()) for s in specs)
  if size < 2 or ddp_parameters.padded_dim(size, rotation) != size:
    raise ValueError(
        f"value_type must have {_SIZES[rotation]} number of values (>= 2) "
        f"for rotation {rotation!r}, got {size} in "
        f"{value_type}: the rotation pads to that and the release drops the "
        "padding's noise, so the rotated noise could not be recovered; the "
        "default is a vector of parameters.padded_dim values.")
  return size


def check_ddp_noise(
    aggregator: Any,
    parameters: ddp_parameters.DdpParameters,
    *,
    value_type: Any = None,
    num_rounds: int = DEFAULT_ROUNDS,
    num_clients: Optional[int] = None,
    level: float = noise_stats.DEFAULT_LEVEL,
    seed: int = 0,
) -> DdpNoiseCheck:
  """Runs a fresh DDP sum chain on zero values and tests its noise in the
  rotated domain (module docstring).

  Args:
    aggregator: the unweighted distributed-DP SUM factory
      (`create(value_type)` is called) or its unweighted
      `tff.templates.AggregationProcess` (module docstring).
    parameters: the `ddp_parameters.DdpParameters` the chain was built from:
      the claim (mechanism, shares, expected clients, rotation, scale).
    value_type: the value's TFF type, float tensors with an even (dft) or
      power-of-2 (hd) number of values in all; default a float32 vector of
      `parameters.padded_dim`. Optional for a process (a given one must
      match its own).
    num_rounds: rounds to run (>= 1).
    num_clients: zero-valued clients per round; default
      `parameters.clients_per_round`.
    level: family-wise level of `noise_stats.check_noise`.
    seed: its subsample seed.

  Returns:
    A `DdpNoiseCheck`.

  Raises:
    TypeError, ValueError: for bad arguments, naming them, and for a process
      that is not the chain of `parameters` (no rotation seed or scale in its
      state, another rotation or scale).
  """
  if not isinstance(parameters, ddp_parameters.DdpParameters):
    raise TypeError("parameters must be a tff_canary.stats.accounting."
                    "ddp_parameters.DdpParameters, got "
                    f"{validation.show(parameters)}.")
  num_rounds = validation.as_int(num_rounds, "num_rounds", minimum=1)
  num_clients = (parameters.clients_per_round if num_clients is None else
                 validation.as_int(num_clients, "num_clients", minimum=1))
  integer_std = parameters.total_noise_std()
  if integer_std < MIN_INTEGER_STD:
    raise ValueError(
        f"the parameters claim a summed noise std of {integer_std:.4g} "
        f"integer units, below MIN_INTEGER_STD = {MIN_INTEGER_STD:g}: the "
        "integer sums are too coarse for the Gaussian-shape test; use "
        "noise_check.check_aggregation_noise (released domain) for "
        f"{parameters}.")
  if value_type is None and isinstance(
      aggregator, tff.aggregators.UnweightedAggregationFactory):
    value_type = tff.TensorType(np.float32, [parameters.padded_dim])
  rounds, squared, count, strides = [], 0.0, 0, set()
  scale = rotation = None
  with contextlib.closing(noise_check.zero_rounds(  # type checked, then built
      aggregator, value_type, num_rounds, num_clients,
      lambda t: _flat_size(t, parameters.rotation))) as zero:
    for before_state, output in zero:
      if rotation is None:
        scale = _scale(before_state, parameters)
        rotation = _rotation(output.measurements, parameters)
      before, after = rotation_seed(before_state), rotation_seed(output.state)
      if after[0] != before[0] or after[1] <= before[1]:
        raise ValueError(f"the rotation seed went from {before} to {after} in "
                         "one round: not TFF's (timestamp, counter) seed.")
      strides.add(int(after[1] - before[1]))
      rotated = scale * forward_rotation(
          np.concatenate(noise_check.flat_tensors(output.result)), before,
          rotation, int(after[1] - before[1]))
      integers = np.rint(rotated)
      squared += float(np.sum((rotated - integers) ** 2))
      count += rotated.size
      half = rotated.size // 2
      rounds.append([integers[:half], integers[half:]])
  if len(strides) != 1:
    raise ValueError(f"the rotation seed advanced by {sorted(strides)} in "
                     "different rounds: not one num_repeats.")
  repeats = strides.pop()
  lattice = math.sqrt(squared / count)
  names = (f"{rotation}[:{half}]", f"{rotation}[{half}:]")
  claim = (f"rotated domain ({rotation}, {repeats} repeat(s), seeds from the "
           f"rotation state): scale {scale:.6g} x the forward-rotated release"
           f" is, per coordinate, the sum of {num_clients} clients' "
           f"{parameters.mechanism} shares, integer, claimed std "
           f"sqrt({parameters.clients_per_round}) x {parameters.share_std:.6g}"
           f" = {integer_std:.6g}; rounded to the integers (rms distance "
           f"{lattice:.3g})")
  check = noise_stats.check_noise(rounds, integer_std, level=level, seed=seed,
                                  tensor_names=names, claim=claim)
  return DdpNoiseCheck(passed=check.passed, check=check, rotation=rotation,
                       num_repeats=repeats, scale=scale,
                       integer_std=integer_std, num_clients=num_clients,
                       lattice_rms=lattice)


__all__ = ["DEFAULT_ROUNDS", "DdpNoiseCheck", "LATTICE_RMS",
           "MIN_INTEGER_STD", "check_ddp_noise", "forward_rotation",
           "hadamard", "rotation_seed"]
