"""The individual tests of the noise self-test, on standardized pure noise.

`noise_stats.check_noise` runs them on R rounds of the output of a DP
aggregation on zero client values and combines them (Holm's procedure). With
z_{t,k} = x_{t,k} / s_t the standardized noise of tensor k in round t (n_k
values, s_t the claimed std), the tests and their null laws (each stated in
full in docs/method/noise-self-test.md, "The tests"):

  zero       a round claimed noise-free: p = 0 if any value is nonzero, else 1.
  variance   sum of z^2 over n values ~ chi^2(n), two-sided: per tensor, per
             round and overall.
  mean       sum of z / sqrt(n) ~ N(0, 1): per tensor and overall.
  prefix     cosine of the first m = min(n_j, n_k) values of tensors j, k,
             rounds stacked: the exact null law of docs/method/null-law.md in
             dimension R m (`null_law.CosineNull`); 1 for reused noise.
  reuse      D, the pairs of consecutive values whose float32 bit patterns
             (sign ignored) repeat, at any offset: about Poisson(C(M, 2) q^2)
             at most by chance, M pairs, q the largest round's collision rate.
  rounds     cosine of tensor k (of whole rounds) between rounds s and t:
             exact null law in dimension n_k (d); 1 for repeated noise.
  lag1       sum_i z_i z_{i+1} / sqrt(pairs) ~ N(0, 1) (central limit theorem,
             1-dependent), for at least `MIN_LAG_PAIRS` pairs.
  gaussian   Kolmogorov-Smirnov test of a seeded subsample against N(0, 1).

Each test returns rows (name, family, statistic, p-value, detail); `z` is a
list over the noisy rounds of lists of float64 arrays, one per tensor. NumPy
and SciPy only.
"""

from __future__ import annotations

import math
import typing
from typing import Literal, Sequence

import numpy as np
import numpy.typing as npt
from scipy import stats

from tff_canary.stats.estimators import null_law

# The families of tests, in the order `noise_stats.check_noise` runs them.
Family = Literal["zero", "variance", "mean", "prefix", "reuse", "rounds",
                 "lag1", "gaussian"]
FAMILIES = typing.get_args(Family)
MIN_LAG_PAIRS = 1000
_SIGNLESS = np.uint32(0x7FFFFFFF)

# (name, family, statistic, p-value, detail) of one test.
Row = tuple[str, Family, float, float, str]
# Rounds of tensors: round t, tensor k.
Rounds = Sequence[Sequence[np.ndarray]]


def zero_tests(raw_rounds: Rounds, stds: Sequence[float]) -> list[Row]:
  """zero[round t] for every round claimed noise-free (module docstring)."""
  rows = []
  for t, s in enumerate(stds):
    if s == 0.0:
      nonzero = sum(int(np.count_nonzero(x)) for x in raw_rounds[t])
      largest = max(float(np.max(np.abs(x))) for x in raw_rounds[t])
      rows.append((f"zero[round {t}]", "zero", float(nonzero),
                   0.0 if nonzero else 1.0,
                   f"zero[round {t}]: the claimed noise is zero but {nonzero} "
                   f"values are nonzero (largest |x| = {largest:.3g})"))
  return rows


def _dot(a: np.ndarray, b: np.ndarray) -> float:
  # einsum's own loop: BLAS dot threads, and on a busy machine was 20x slower.
  return float(np.einsum("i,i->", a, b))


def _cosine(a: np.ndarray, b: np.ndarray) -> float:
  na, nb = float(_dot(a, a)), float(_dot(b, b))
  if na == 0.0 or nb == 0.0:
    return 0.0
  return float(_dot(a, b) / math.sqrt(na * nb))


def _normal_rows(family: Family, totals: list[tuple[str, float, int]],
                 describe) -> list[Row]:
  """family[label] for each (label, s, n) of `totals`: the score s / sqrt(n),
  N(0, 1) under correct noise (two-sided p); describe(s, n, score) says what
  was measured."""
  rows = []
  for label, s, n in totals:
    score = s / math.sqrt(n)
    name = f"{family}[{label}]"
    rows.append((name, family, score, float(2.0 * stats.norm.sf(abs(score))),
                 f"{name}: {describe(s, n, score)}"))
  return rows


def _variance_test(name, sum_sq, count, what):
  ratio = sum_sq / count
  p = float(min(1.0, 2.0 * min(stats.chi2.cdf(sum_sq, count),
                               stats.chi2.sf(sum_sq, count))))
  return (name, "variance", ratio, p,
          f"{name}: empirical/claimed variance {ratio:.4g} (std ratio "
          f"{math.sqrt(ratio):.4g}) over {count} values of {what}")


def variance_tests(z: Rounds, names: Sequence[str],
                   sizes: Sequence[int]) -> list[Row]:
  """variance[tensor], variance[round t] and variance[all]."""
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


def mean_tests(z: Rounds, names: Sequence[str],
               sizes: Sequence[int]) -> list[Row]:
  """mean[tensor] and mean[all]."""
  totals = [(name, sum(float(r[k].sum()) for r in z), sizes[k] * len(z))
            for k, name in enumerate(names)]
  if len(names) > 1:
    totals.append(("all", sum(t[1] for t in totals), sum(sizes) * len(z)))
  return _normal_rows("mean", totals, lambda s, n, score: (
      f"mean of the standardized noise is {score:.3g} standard errors "
      "from 0"))


def prefix_tests(z: Rounds, names: Sequence[str],
                 sizes: Sequence[int]) -> list[Row]:
  """prefix[j,k] for every pair of tensors."""
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
      out.append((name, "prefix", cos, float(_two_sided_cosines(cos, dim)),
                  f"{name}: the first {m} values of {names[j]} and "
                  f"{names[k]} have cosine {cos:.4g} over {len(z)} rounds "
                  "(1 means one tensor's noise is a prefix of the other's)"))
  return out


def _pair_cosines(rows: list[np.ndarray]) -> np.ndarray:
  """[R, R] cosines between every pair of the R vectors (0 for a zero vector)."""
  stacked = np.stack(rows)
  gram = stacked @ stacked.T
  norms = np.sqrt(np.diag(gram))
  with np.errstate(divide="ignore", invalid="ignore"):
    cos = gram / np.outer(norms, norms)
  return np.where(np.outer(norms, norms) > 0.0, cos, 0.0)


def _two_sided_cosines(cosines: npt.ArrayLike, dim: int) -> np.ndarray:
  """P(|T| >= |cosine|) of each cosine under the exact null law of
  docs/method/null-law.md in dimension `dim`."""
  cosines = np.asarray(cosines, dtype=np.float64)
  tail = null_law.CosineNull(dim).sf(np.minimum(1.0, np.abs(cosines)))
  return np.minimum(1.0, 2.0 * np.asarray(tail, dtype=np.float64))


def rounds_tests(z: Rounds, names: Sequence[str],
                 sizes: Sequence[int]) -> list[Row]:
  """rounds[tensor:s,t] and rounds[all:s,t] for every pair of rounds.

  Each pair's cosine and its two-sided p-value under the exact null law; all
  pairs of a tensor come from one Gram matrix.
  """
  num_rounds = len(z)
  pairs = [(s, t) for s in range(num_rounds) for t in range(s + 1, num_rounds)]
  if not pairs:
    return []
  first, second = np.array(pairs).T
  # (label, dimension, one vector per round, what the cosine is between).
  series = [(name, sizes[k], [r[k] for r in z], f"{name}'s noise in")
            for k, name in enumerate(names) if sizes[k] >= 2]
  if len(names) > 1:
    series.append(("all", sum(sizes), [np.concatenate(r) for r in z],
                   "the whole noise of"))
  scored = []
  for label, dim, vectors, what in series:
    cos = _pair_cosines(vectors)[first, second]
    scored.append((label, what, cos, _two_sided_cosines(cos, dim)))
  out = []
  for i, (s, t) in enumerate(pairs):
    for label, what, cos, p in scored:
      test = f"rounds[{label}:{s},{t}]"
      out.append((test, "rounds", float(cos[i]), float(p[i]),
                  f"{test}: {what} rounds {s} and {t} has cosine "
                  f"{float(cos[i]):.4g} (1 means the same noise)"))
  return out


def lag1_tests(z: Rounds, names: Sequence[str],
               sizes: Sequence[int]) -> list[Row]:
  """lag1[tensor] and lag1[all], where there are enough pairs."""
  totals = [(name, sum(float(_dot(r[k][:-1], r[k][1:])) for r in z),
             (sizes[k] - 1) * len(z)) for k, name in enumerate(names)
            if sizes[k] > 1]
  all_pairs = sum(t[2] for t in totals)
  tested = [t for t in totals if t[2] >= MIN_LAG_PAIRS]
  if all_pairs >= MIN_LAG_PAIRS and len(names) > 1:
    tested.append(("all", sum(t[1] for t in totals), all_pairs))
  return _normal_rows("lag1", tested, lambda s, n, score: (
      f"neighbouring values correlate at {s / n:.3g} ({score:.3g} standard "
      "errors)"))


def reuse_test(raw_rounds: Rounds, names: Sequence[str],
               round_ids: Sequence[int]) -> Row | None:
  """Repeated (|x_i|, |x_{i+1}|) float32 bit patterns (module docstring).

  On the raw (unstandardized) noise of the noisy rounds, `round_ids` their
  indices among all rounds; None when no tensor has two values.
  """
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


def gaussian_test(z: Rounds, subsample: int, seed: int) -> Row:
  """gaussian: KS test of `subsample` values drawn with `seed`."""
  flat = np.concatenate([np.concatenate(r) for r in z])
  rng = np.random.default_rng([seed, 0x6A55])
  if flat.size > subsample:
    flat = flat[rng.choice(flat.size, size=subsample, replace=False)]
  result = stats.kstest(flat, "norm")
  return ("gaussian", "gaussian", float(result.statistic),
          float(result.pvalue),
          f"gaussian: Kolmogorov-Smirnov distance {result.statistic:.3g} of "
          f"{flat.size} standardized values from N(0, 1)")
