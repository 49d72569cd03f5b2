"""Is this the Gaussian noise that was claimed? `check_noise` and its result.

Run a DP aggregation on zero client values and each round's result is its
noise alone: claimed to be i.i.d. N(0, s_t^2) in every coordinate of round t,
independent across coordinates, tensors and rounds (the Gaussian mechanism of
DP-FedAvg, McMahan et al., ICLR 2018, arXiv 1710.06963, Algorithm 1:
s_t = z * C_t / clients_per_round). `check_noise` tests that claim on R rounds
of such output with the family of tests of `noise_tests`, combined by Holm's
step-down procedure (Holm 1979) at `level`: the verdict equals Bonferroni's,
so a false alarm on correct noise has probability at most `level` when the
p-values are valid. The default 0.001 leaves a factor of ten below the 1%
false-alarm budget for the two approximate p-values (lag1, reuse);
bench/noise_check.py measures the rates. The TFF side is
`tff_canary.federated.audit.noise_check`; docs/method/noise-self-test.md.

Zero claimed noise (noise multiplier 0) is a degenerate end: such a round
passes only if its output is exactly zero. A pass says the listed defects are
absent to the resolution the summary states; it does not show that the
mechanism is private.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, Literal, Optional, Sequence

import numpy as np
import numpy.typing as npt
from scipy import stats

from tff_canary.stats.noise import noise_tests
from tff_canary.stats import validation
from tff_canary.stats.results import format_number

DEFAULT_LEVEL = 0.001
DEFAULT_SUBSAMPLE = 20_000


@dataclasses.dataclass(frozen=True)
class NoiseTest:
  """One test of the family.

  Attributes:
    name: e.g. "variance[w1]", "prefix[b1,w1]", "rounds[w1:0,1]".
    family: one of `noise_tests.FAMILIES`.
    statistic: the test's statistic (variance ratio, z-score, cosine, count).
    p_value: its p-value under correct noise.
    rejected: whether Holm's procedure rejects it at the check's level.
    detail: what was measured, in words (the failure reason when rejected).
  """

  name: str
  family: noise_tests.Family
  statistic: float
  p_value: float
  rejected: bool
  detail: str

  def as_dict(self) -> dict[str, Any]:
    return dataclasses.asdict(self)


@dataclasses.dataclass(frozen=True)
class NoiseCheck:
  """The verdict of `check_noise`, with every test.

  Attributes:
    passed: True when no test is rejected, but for a variance significantly
      above the claim: more noise than claimed is not a privacy failure, so
      it is a note instead.
    level: family-wise level (probability of a false alarm on correct noise).
    correction: "holm".
    num_rounds: R.
    tensor_names, tensor_sizes: the tensors, in the order given.
    dim: total values per round.
    claimed_std: s_t per round.
    claim: where s_t came from (e.g. "DpEvent x l2_norm_clip / denominator").
    seed, subsample: the Gaussianity test's subsample (seed and size).
    degenerate: True when every claimed std is zero (nothing to test but
      exact zeros).
    std_resolution: relative std error this check detects with probability
      about 1/2 (smaller is finer); NaN when degenerate.
    tests: every test, in the order computed.
    failures: the rejected tests' reasons, smallest p-value first.
    notes: rejected variance tests whose variance is above the claim.
  """

  passed: bool
  level: float
  correction: Literal["holm"]
  num_rounds: int
  tensor_names: tuple[str, ...]
  tensor_sizes: tuple[int, ...]
  dim: int
  claimed_std: tuple[float, ...]
  claim: str
  seed: int
  subsample: int
  degenerate: bool
  std_resolution: float
  tests: tuple[NoiseTest, ...]
  failures: tuple[str, ...]
  notes: tuple[str, ...] = ()

  @property
  def verdict(self) -> str:
    """"passed" or "failed" (the report's vocabulary)."""
    return "passed" if self.passed else "failed"

  def test(self, name: str) -> NoiseTest:
    """The test called `name`; KeyError naming the known ones otherwise."""
    for t in self.tests:
      if t.name == name:
        return t
    raise KeyError(f"no test named {name!r}; tests are "
                   f"{[t.name for t in self.tests]}.")

  def rejected_families(self) -> tuple[str, ...]:
    return tuple(f for f in noise_tests.FAMILIES
                 if any(t.rejected and t.family == f for t in self.tests))

  def __str__(self) -> str:
    shape = (f"{self.num_rounds} rounds x {len(self.tensor_sizes)} tensors "
             f"(d={self.dim})")
    if self.degenerate:
      state = "passed" if self.passed else "FAILED"
      text = (f"noise check {state}: degenerate, the claimed noise is zero; "
              f"{shape} {'are' if self.passed else 'are not'} exactly zero, "
              "which is all a check of zero noise can say")
      return text + ("" if self.passed else f" ({self.failures[0]})")
    if self.passed and self.notes:
      return (f"noise check passed, with more noise than claimed: {shape}, "
              f"{len(self.tests)} tests at family level {self.level:g} "
              f"({self.correction}); {self.notes[0]}")
    if self.passed:
      return (f"noise check passed: {shape}, {len(self.tests)} tests at "
              f"family level {self.level:g} ({self.correction}); resolves the "
              f"std to ±{self.std_resolution:.2%}; no exact reuse of 2+ "
              "consecutive values at any offset, no aligned correlation "
              "between tensors or rounds, none between neighbours; this "
              "cannot show the mechanism is private")
    more = len(self.failures) - 1
    return (f"noise check FAILED: {len(self.failures)} of {len(self.tests)} "
            f"tests at family level {self.level:g} ({self.correction}) on "
            f"{shape}: {self.failures[0]}"
            + (f" (and {more} more)" if more else ""))

  def as_dict(self) -> dict[str, Any]:
    out = dataclasses.asdict(self)
    out["tests"] = [t.as_dict() for t in self.tests]
    if math.isnan(self.std_resolution):
      out["std_resolution"] = None  # strict JSON has no NaN
    out["verdict"] = self.verdict
    out["summary"] = str(self)
    return out


# ----------------------------------------------------------------- inputs


def _as_rounds(noise: Any, tensor_names: Optional[Sequence[str]]):
  """(list over rounds of lists of 1-D float arrays, names)."""
  if isinstance(noise, (str, bytes, np.ndarray)) or not isinstance(
      noise, Sequence):
    raise TypeError("noise must be a sequence of rounds, each a sequence of "
                    f"tensors, got {validation.show(noise)}.")
  if not noise:
    raise ValueError("noise must hold at least one round, got [].")
  rounds, sizes = [], None
  for t, round_noise in enumerate(noise):
    name = f"noise[{t}]"
    if isinstance(round_noise, (str, bytes, np.ndarray)) or not isinstance(
        round_noise, Sequence) or not round_noise:
      raise TypeError(f"{name} must be a non-empty sequence of tensors, got "
                      f"{validation.show(round_noise)}.")
    tensors = [np.asarray(tensor).reshape(-1) for tensor in round_noise]
    for k, array in enumerate(tensors):   # real, finite, not empty
      validation.as_sample(array, f"{name}[{k}]", min_size=1)
    these = tuple(a.size for a in tensors)
    if sizes is None:
      sizes = these
    elif these != sizes:
      raise ValueError(f"every round must have the same tensors: noise[0] "
                       f"has sizes {sizes}, {name} has {these}.")
    rounds.append(tensors)
  if tensor_names is None:
    names = tuple(f"tensor{k}" for k in range(len(sizes)))
  else:
    names = tuple(tensor_names)
    if len(names) != len(sizes) or not all(isinstance(n, str) for n in names):
      raise ValueError(f"tensor_names must be {len(sizes)} strings, got "
                       f"{validation.show(tensor_names)}.")
    if len(set(names)) != len(names):
      raise ValueError(f"tensor_names must be distinct, got {names!r}.")
  return rounds, names, sizes


def as_claimed_stds(claimed_std: npt.ArrayLike,
                    num_rounds: int) -> tuple[float, ...]:
  """One claimed std per round from one number or `num_rounds` numbers."""
  if isinstance(claimed_std, (str, bytes)):
    raise TypeError(f"claimed_std must be a number or {num_rounds} numbers, "
                    f"got {claimed_std!r}.")
  values = np.asarray(claimed_std, dtype=object).reshape(-1).tolist()
  if np.ndim(claimed_std) == 0:
    values = values * num_rounds
  if len(values) != num_rounds:
    raise ValueError(f"claimed_std must have one value per round "
                     f"({num_rounds}), got {len(values)}: "
                     f"{validation.show(claimed_std)}.")
  return tuple(validation.as_nonnegative(v, f"claimed_std[{t}]")
               for t, v in enumerate(values))


# -------------------------------------------------------------- the check


def _holm(p_values: list[float], level: float) -> list[bool]:
  order = np.argsort(p_values, kind="stable")
  rejected = [False] * len(p_values)
  total = len(p_values)
  for i, index in enumerate(order):
    if p_values[index] <= level / (total - i):
      rejected[index] = True
    else:
      break
  return rejected


def check_noise(noise: Sequence[Sequence[npt.ArrayLike]],
                claimed_std: npt.ArrayLike, *,
                level: float = DEFAULT_LEVEL, seed: int = 0,
                subsample: int = DEFAULT_SUBSAMPLE,
                tensor_names: Optional[Sequence[str]] = None,
                claim: str = "given") -> NoiseCheck:
  """Tests R rounds of pure noise against the claimed N(0, s_t^2) (module doc).

  Args:
    noise: R rounds, each a sequence of K tensors (any shape, flattened; the
      same sizes every round): the outputs of an aggregation on zero values.
    claimed_std: s_t per round (a number for all rounds, or R numbers); zero
      for a round claimed noise-free.
    level: family-wise level in (0, 1): the probability of a false alarm on
      correct noise is at most this (Holm).
    seed: seeds the Gaussianity test's subsample.
    subsample: size of that subsample (at least 100).
    tensor_names: K distinct names for the messages (default tensor0, ...).
    claim: where `claimed_std` came from, kept in the result.

  Raises:
    TypeError, ValueError: for bad arguments, naming them.
  """
  raw, names, sizes = _as_rounds(noise, tensor_names)
  stds = as_claimed_stds(claimed_std, len(raw))
  level = validation.as_open_unit(level, "level")
  seed = validation.as_int(seed, "seed", minimum=0)
  subsample = validation.as_int(subsample, "subsample", minimum=100)
  if not isinstance(claim, str):
    raise TypeError(f"claim must be a string, got {claim!r}.")

  rows = noise_tests.zero_tests(raw, stds)
  noisy = [t for t, s in enumerate(stds) if s > 0.0]
  degenerate = not noisy
  resolution = float("nan")
  if noisy:
    z = [[x.astype(np.float64) / stds[t] for x in raw[t]] for t in noisy]
    rows += noise_tests.variance_tests(z, names, sizes)
    # The structure tests assume unit variance. Noise above the claim (a
    # variance note, not a failure) is rescaled to its pooled std first, so
    # that more noise is not read as a wrong mean, shape or correlation.
    pooled = (sum(float(np.dot(x, x)) for r in z for x in r)
              / (sum(sizes) * len(z)))
    if pooled > 1.0:
      z = [[x / math.sqrt(pooled) for x in r] for r in z]
    rows += noise_tests.mean_tests(z, names, sizes)
    rows += noise_tests.prefix_tests(z, names, sizes)
    reuse = noise_tests.reuse_test([raw[t] for t in noisy], names, noisy)
    if reuse is not None:
      rows.append(reuse)
    rows += noise_tests.rounds_tests(z, names, sizes)
    rows += noise_tests.lag1_tests(z, names, sizes)
    rows.append(noise_tests.gaussian_test(z, subsample, seed))
    # The overall variance test detects a variance ratio 1 + c sqrt(2/n), i.e.
    # a std ratio about 1 + c / sqrt(2 n), with probability 1/2 when c is its
    # Bonferroni critical value (chi^2 ~ normal at these n).
    critical = stats.norm.isf(level / (2 * len(rows)))
    resolution = float(critical / math.sqrt(2.0 * sum(sizes) * len(noisy)))

  rejected = _holm([r[3] for r in rows], level)
  tests = tuple(NoiseTest(name=n, family=f, statistic=float(s), p_value=p,
                          rejected=rej, detail=d)
                for (n, f, s, p, d), rej in zip(rows, rejected))
  # More noise than claimed costs utility, not privacy (e.g. the rounding of
  # distributed DP): a variance significantly above the claim is a note.
  more_noise = [t for t in sorted(tests, key=lambda t: t.p_value)
                if t.rejected and t.family == "variance" and t.statistic > 1.0]
  notes = tuple(f"more noise than claimed: {t.detail}; p = "
                f"{format_number(t.p_value)}; this costs utility, not privacy"
                for t in more_noise)
  failures = tuple(f"{t.detail}; p = {format_number(t.p_value)}"
                   for t in sorted(tests, key=lambda t: t.p_value)
                   if t.rejected and t not in more_noise)
  return NoiseCheck(
      passed=not failures, level=level, correction="holm",
      num_rounds=len(raw), tensor_names=names, tensor_sizes=tuple(sizes),
      dim=int(sum(sizes)), claimed_std=stds, claim=claim, seed=seed,
      subsample=subsample, degenerate=degenerate, std_resolution=resolution,
      tests=tests, failures=failures, notes=notes)


__all__ = ["NoiseCheck", "NoiseTest", "check_noise", "DEFAULT_LEVEL"]
