"""Is this the Gaussian noise that was claimed? Tests on pure-noise outputs.

Run a DP aggregation on zero client values and each round's result is its
noise alone: claimed to be i.i.d. N(0, s_t^2) in every coordinate of round t,
independent across coordinates, tensors and rounds (the Gaussian mechanism of
DP-FedAvg, McMahan et al., ICLR 2018, arXiv 1710.06963, Algorithm 1:
s_t = z * C_t / clients_per_round). `check_noise` tests that claim on R rounds
of such output, given as flattened tensors (so that tensor boundaries are
known) and the claimed s_t per round. NumPy and SciPy only; the TFF side is
`tff_canary.federated.noise_check`.

With z_{t,k} = x_{t,k} / s_t the standardized noise of tensor k in round t
(n_k values), the tests are (each with an exact or stated-approximation
p-value):

  variance   sum of z^2 over n values ~ chi^2(n): per tensor (all rounds), per
             round (all tensors) and overall; two-sided (catches s/10 and 10 s).
  mean       sum of z / sqrt(n) ~ N(0, 1): per tensor and overall.
  prefix     tensors j, k of one round: the cosine of their first
             m = min(n_j, n_k) values, rounds stacked (R m values). For
             independent isotropic Gaussians it has the exact null law of
             METHOD §5 in dimension R m (`null_law.CosineNull`); reused noise
             (one tensor's noise a prefix of another's, scaled or not, e.g.
             one stateless seed for all tensors) gives |cosine| = 1.
  reuse      exact reuse at ANY offset: pairs of consecutive values within a
             tensor, as float32 bit patterns without the sign bit (so negated
             reuse counts too), compared across all tensors and rounds. D =
             number of pairs whose pattern was already seen. With q_t the
             probability that two values of round t share a pattern (estimated
             from the round's single-value collisions, plus one for a floor),
             two independent pairs collide with probability at most
             q = max_t q_t squared (Cauchy-Schwarz across rounds), so by chance
             D is about Poisson(lambda), lambda = C(M, 2) q^2 for M pairs,
             p = P[Poisson(lambda) >= D].
             A reused slice of L >= 2 values adds L - 1 repeats.
  rounds     tensor k in rounds s and t: cosine of z_{s,k} and z_{t,k}
             (exact null in dimension n_k), and of whole rounds (dimension d):
             the same noise every round, scaled or not, gives 1.
  lag1       sum_i z_i z_{i+1} within a tensor, all rounds, divided by the
             square root of the number of pairs: N(0, 1) by the central limit
             theorem for 1-dependent sequences (products of neighbours are
             uncorrelated with variance 1); only for at least
             `MIN_LAG_PAIRS` pairs, and pooled over all tensors.
  gaussian   Kolmogorov-Smirnov test of a seeded fixed-size subsample of the
             z against N(0, 1) (exact KS p-value).

The family is combined by Holm's step-down procedure (Holm 1979) at `level`:
the overall verdict equals Bonferroni's (fail iff the smallest p-value is at
most level / number of tests), so the probability of a false alarm on correct
noise is at most `level` when the p-values are valid; Holm only names more of
the failing tests. The default level 0.001 leaves a factor of ten below the
1% false-alarm budget for the two approximate p-values (lag1, reuse), while
the defects the check targets give p-values of essentially zero, far under
any threshold (bench/noise_check.py measures both rates).

Zero claimed noise (noise multiplier 0) is a degenerate end: there is no
distribution to test, and such a round passes only if its output is exactly
zero. A pass says the listed defects are absent to the resolution the summary
states; it does not show that the mechanism is private.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, Optional, Sequence

import numpy as np
from scipy import stats

from tff_canary.stats import null_law
from tff_canary.stats import validation
from tff_canary.stats.results import format_number

DEFAULT_LEVEL = 0.001
DEFAULT_SUBSAMPLE = 20_000
MIN_LAG_PAIRS = 1000
FAMILIES = ("zero", "variance", "mean", "prefix", "reuse", "rounds", "lag1",
            "gaussian")
_SIGNLESS = np.uint32(0x7FFFFFFF)


@dataclasses.dataclass(frozen=True)
class NoiseTest:
  """One test of the family.

  Attributes:
    name: e.g. "variance[w1]", "prefix[b1,w1]", "rounds[w1:0,1]".
    family: one of `FAMILIES`.
    statistic: the test's statistic (variance ratio, z-score, cosine, count).
    p_value: its p-value under correct noise.
    rejected: whether Holm's procedure rejects it at the check's level.
    detail: what was measured, in words (the failure reason when rejected).
  """

  name: str
  family: str
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
    passed: True when no test is rejected.
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
  """

  passed: bool
  level: float
  correction: str
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

  def test(self, name: str) -> NoiseTest:
    """The test called `name`; KeyError naming the known ones otherwise."""
    for t in self.tests:
      if t.name == name:
        return t
    raise KeyError(f"no test named {name!r}; tests are "
                   f"{[t.name for t in self.tests]}.")

  def rejected_families(self) -> tuple[str, ...]:
    return tuple(f for f in FAMILIES
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
    tensors = []
    for k, tensor in enumerate(round_noise):
      array = np.asarray(tensor)
      if array.dtype == bool or not (np.issubdtype(array.dtype, np.floating)
                                     or np.issubdtype(array.dtype, np.integer)):
        raise TypeError(f"{name}[{k}] must hold real numbers, got dtype "
                        f"{array.dtype}.")
      array = array.reshape(-1)
      if array.size == 0:
        raise ValueError(f"{name}[{k}] is empty.")
      bad = ~np.isfinite(array)
      if bad.any():
        i = int(np.flatnonzero(bad)[0])
        raise ValueError(f"{name}[{k}] must be finite, but {name}[{k}][{i}] "
                         f"= {array[i]}.")
      tensors.append(array)
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


def as_claimed_stds(claimed_std: Any, num_rounds: int) -> tuple[float, ...]:
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


# ------------------------------------------------------------------ tests


def _two_sided_cosine(cosine: float, dim: int) -> float:
  """P(|T| >= |cosine|) under the exact null law of METHOD §5."""
  if dim < 2:
    return 1.0
  cosine = min(1.0, abs(float(cosine)))
  return float(min(1.0, 2.0 * null_law.CosineNull(dim).sf(cosine)))


def _dot(a: np.ndarray, b: np.ndarray) -> float:
  # einsum's own loop: BLAS dot threads, and on a busy machine was 20x slower.
  return float(np.einsum("i,i->", a, b))


def _cosine(a: np.ndarray, b: np.ndarray) -> float:
  na, nb = float(_dot(a, a)), float(_dot(b, b))
  if na == 0.0 or nb == 0.0:
    return 0.0
  return float(_dot(a, b) / math.sqrt(na * nb))


def _normal_two_sided(z: float) -> float:
  return float(2.0 * stats.norm.sf(abs(z)))


def _variance_test(name, sum_sq, count, what):
  ratio = sum_sq / count
  p = float(min(1.0, 2.0 * min(stats.chi2.cdf(sum_sq, count),
                               stats.chi2.sf(sum_sq, count))))
  return (name, "variance", ratio, p,
          f"{name}: empirical/claimed variance {ratio:.4g} (std ratio "
          f"{math.sqrt(ratio):.4g}) over {count} values of {what}")


def _variance_tests(z, names, sizes):
  out = []
  for k, name in enumerate(names):
    s = sum(float(_dot(r[k], r[k])) for r in z)
    out.append(_variance_test(f"variance[{name}]", s, sizes[k] * len(z),
                              f"tensor {name}, all rounds"))
  per_round = [sum(float(_dot(x, x)) for x in r) for r in z]
  d = sum(sizes)
  if len(z) > 1:
    for t, s in enumerate(per_round):
      out.append(_variance_test(f"variance[round {t}]", s, d,
                                f"round {t}, all tensors"))
  if len(z) > 1 or len(sizes) > 1:
    out.append(_variance_test("variance[all]", sum(per_round), d * len(z),
                              "all tensors and rounds"))
  return out


def _mean_tests(z, names, sizes):
  out, total = [], 0.0
  for k, name in enumerate(names):
    s = sum(float(r[k].sum()) for r in z)
    total += s
    score = s / math.sqrt(sizes[k] * len(z))
    out.append((f"mean[{name}]", "mean", score, _normal_two_sided(score),
                f"mean[{name}]: mean of the standardized noise is {score:.3g} "
                "standard errors from 0"))
  if len(names) > 1:
    score = total / math.sqrt(sum(sizes) * len(z))
    out.append(("mean[all]", "mean", score, _normal_two_sided(score),
                f"mean[all]: mean of the standardized noise is {score:.3g} "
                "standard errors from 0"))
  return out


def _prefix_tests(z, names, sizes):
  out = []
  for j in range(len(names)):
    for k in range(j + 1, len(names)):
      m = min(sizes[j], sizes[k])
      dim = m * len(z)
      if dim < 2:
        continue
      a = np.concatenate([r[j][:m] for r in z])
      b = np.concatenate([r[k][:m] for r in z])
      cos = _cosine(a, b)
      name = f"prefix[{names[j]},{names[k]}]"
      out.append((name, "prefix", cos, _two_sided_cosine(cos, dim),
                  f"{name}: the first {m} values of {names[j]} and "
                  f"{names[k]} have cosine {cos:.4g} over {len(z)} rounds "
                  "(1 means one tensor's noise is a prefix of the other's)"))
  return out


def _rounds_tests(z, names, sizes):
  out = []
  num_rounds = len(z)
  for s in range(num_rounds):
    for t in range(s + 1, num_rounds):
      for k, name in enumerate(names):
        if sizes[k] < 2:
          continue
        cos = _cosine(z[s][k], z[t][k])
        test = f"rounds[{name}:{s},{t}]"
        out.append((test, "rounds", cos, _two_sided_cosine(cos, sizes[k]),
                    f"{test}: {name}'s noise in rounds {s} and {t} has cosine "
                    f"{cos:.4g} (1 means the same noise)"))
      if len(names) > 1:
        cos = _cosine(np.concatenate(z[s]), np.concatenate(z[t]))
        test = f"rounds[all:{s},{t}]"
        out.append((test, "rounds", cos, _two_sided_cosine(cos, sum(sizes)),
                    f"{test}: the whole noise of rounds {s} and {t} has "
                    f"cosine {cos:.4g} (1 means the same noise)"))
  return out


def _lag1_tests(z, names, sizes):
  out, total, total_pairs = [], 0.0, 0
  for k, name in enumerate(names):
    pairs = (sizes[k] - 1) * len(z)
    if pairs == 0:
      continue
    s = sum(float(_dot(r[k][:-1], r[k][1:])) for r in z)
    total += s
    total_pairs += pairs
    if pairs >= MIN_LAG_PAIRS:
      score = s / math.sqrt(pairs)
      out.append((f"lag1[{name}]", "lag1", score, _normal_two_sided(score),
                  f"lag1[{name}]: neighbouring values correlate at "
                  f"{s / pairs:.3g} ({score:.3g} standard errors)"))
  if total_pairs >= MIN_LAG_PAIRS and len(names) > 1:
    score = total / math.sqrt(total_pairs)
    out.append(("lag1[all]", "lag1", score, _normal_two_sided(score),
                f"lag1[all]: neighbouring values correlate at "
                f"{total / total_pairs:.3g} ({score:.3g} standard errors)"))
  return out


def _reuse_test(raw_rounds, names, round_ids):
  """Repeated (|x_i|, |x_{i+1}|) float32 bit patterns (module docstring)."""
  keys, locations, q_max = [], [], 0.0
  for t, tensors in enumerate(raw_rounds):
    bits = [np.ascontiguousarray(x, np.float32).view(np.uint32) & _SIGNLESS
            for x in tensors]
    flat = np.sort(np.concatenate(bits))
    n = flat.size
    if n >= 2:
      repeats = np.diff(np.flatnonzero(np.r_[True, flat[1:] != flat[:-1],
                                             True]))
      colliding = float(np.sum(repeats * (repeats - 1) / 2.0))
      q_max = max(q_max, (colliding + 1.0) / (n * (n - 1) / 2.0))
    for k, b in enumerate(bits):
      if b.size >= 2:
        keys.append((b[:-1].astype(np.uint64) << np.uint64(32))
                    | b[1:].astype(np.uint64))
        locations.append((t, k, b.size - 1))
  if not keys:
    return None
  all_keys = np.concatenate(keys)
  sorted_keys = np.sort(all_keys)
  count = int(np.count_nonzero(sorted_keys[1:] == sorted_keys[:-1]))
  pairs = all_keys.size
  lam = pairs * (pairs - 1) / 2.0 * q_max ** 2
  p = float(stats.poisson.sf(count - 1, lam)) if count else 1.0
  detail = (f"reuse: {count} pairs of consecutive values repeat an earlier "
            f"pair's float32 bit patterns (up to sign) among {pairs} pairs; "
            f"{lam:.2g} expected by chance")
  if count:  # an example, for the message
    order = np.argsort(all_keys, kind="stable")
    dup = np.flatnonzero(all_keys[order[1:]] == all_keys[order[:-1]])
    first, second = order[dup[0]], order[dup[0] + 1]
    starts = np.cumsum([0] + [n for _, _, n in locations])

    def where(i):
      g = int(np.searchsorted(starts, i, side="right") - 1)
      t, k, _ = locations[g]
      return round_ids[t], names[k], int(i - starts[g])

    detail += (" (e.g. round {}, {}[{}] and round {}, {}[{}]): noise is "
               "reused").format(*where(first),
                                                     *where(second))
  return ("reuse", "reuse", float(count), p, detail)


def _gaussian_test(z, subsample, seed):
  flat = np.concatenate([np.concatenate(r) for r in z])
  rng = np.random.default_rng([seed, 0x6A55])
  if flat.size > subsample:
    flat = flat[rng.choice(flat.size, size=subsample, replace=False)]
  result = stats.kstest(flat, "norm")
  return ("gaussian", "gaussian", float(result.statistic),
          float(result.pvalue),
          f"gaussian: Kolmogorov-Smirnov distance {result.statistic:.3g} of "
          f"{flat.size} standardized values from N(0, 1)")


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


def check_noise(noise: Sequence[Sequence[Any]], claimed_std: Any, *,
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

  Returns:
    A `NoiseCheck`.

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

  rows = []
  for t, s in enumerate(stds):
    if s == 0.0:
      nonzero = sum(int(np.count_nonzero(x)) for x in raw[t])
      largest = max(float(np.max(np.abs(x))) for x in raw[t])
      rows.append((f"zero[round {t}]", "zero", float(nonzero),
                   0.0 if nonzero else 1.0,
                   f"zero[round {t}]: the claimed noise is zero but {nonzero} "
                   f"values are nonzero (largest |x| = {largest:.3g})"))
  noisy = [t for t, s in enumerate(stds) if s > 0.0]
  degenerate = not noisy
  resolution = float("nan")
  if noisy:
    z = [[x.astype(np.float64) / stds[t] for x in raw[t]] for t in noisy]
    rows += _variance_tests(z, names, sizes)
    rows += _mean_tests(z, names, sizes)
    rows += _prefix_tests(z, names, sizes)
    reuse = _reuse_test([raw[t] for t in noisy], names, noisy)
    if reuse is not None:
      rows.append(reuse)
    rows += _rounds_tests(z, names, sizes)
    rows += _lag1_tests(z, names, sizes)
    rows.append(_gaussian_test(z, subsample, seed))
    # The overall variance test detects a variance ratio 1 + c sqrt(2/n), i.e.
    # a std ratio about 1 + c / sqrt(2 n), with probability 1/2 when c is its
    # Bonferroni critical value (chi^2 ~ normal at these n).
    critical = stats.norm.isf(level / (2 * len(rows)))
    resolution = float(critical / math.sqrt(2.0 * sum(sizes) * len(noisy)))

  rejected = _holm([r[3] for r in rows], level)
  tests = tuple(NoiseTest(name=n, family=f, statistic=float(s), p_value=p,
                          rejected=rej, detail=d)
                for (n, f, s, p, d), rej in zip(rows, rejected))
  failures = tuple(f"{t.detail}; p = {format_number(t.p_value)}"
                   for t in sorted(tests, key=lambda t: t.p_value)
                   if t.rejected)
  return NoiseCheck(
      passed=not failures, level=level, correction="holm",
      num_rounds=len(raw), tensor_names=names, tensor_sizes=tuple(sizes),
      dim=int(sum(sizes)), claimed_std=stds, claim=claim, seed=seed,
      subsample=subsample, degenerate=degenerate, std_resolution=resolution,
      tests=tests, failures=failures)


__all__ = ["NoiseCheck", "NoiseTest", "check_noise", "DEFAULT_LEVEL",
           "FAMILIES"]
