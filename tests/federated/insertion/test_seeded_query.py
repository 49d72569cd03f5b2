"""Tests of tff_canary.federated.insertion.seeded_query: seeded DP noise, independent per draw.

The bug these tests are built to catch: a seeded query that uses ONE
stateless key for every tensor of a draw makes each tensor's noise a prefix of
the largest tensor's (Philox draws of one key share their leading numbers
whatever the shape), so directions such as e(b1_i) - e(w1_i) get no noise.
`independence_problems` below looks for exactly that (a run of equal values at
any offset, and a nonzero prefix correlation) and `OneKeyQuery` plants it:
`test_the_checker_flags_one_key_for_every_tensor` shows the checker fails on
it, so a test that passes the checker on the real query can fail.

The checker and `OneKeyQuery` are also used by test_factory.py (through the
factory). TFF is imported only by the tests that run TFF computations.
"""

from __future__ import annotations

import itertools

import dp_accounting
import numpy as np
import pytest
from scipy import stats
import tensorflow as tf
import tensorflow_privacy as tfp

from tff_canary.federated.insertion import seeded_query

# An MLP's weights: w1, b1, w2, b2 (d = 101,125), tensors of four shapes.
MLP_SHAPES = ([784, 128], [128], [128, 5], [5])

# A run of this many consecutive equal float32 values between two noise
# vectors is a shared stream, not chance: two independent N(0, 1) float32
# draws are equal with probability of order 1e-7 (a few float32 spacings
# times the density), so even 1e11 position pairs give an expected number of
# chance runs of length 4 of order 1e11 * 1e-28.
MIN_RUN = 4
# |r| sqrt(m) for the cosine r of two independent isotropic vectors of length
# m: mean 0, variance exactly 1/m * m = 1, tails lighter than N(0, 1) ((1 + r)
# / 2 is Beta((m - 1) / 2, (m - 1) / 2)). P(|N(0, 1)| > 5) = 5.7e-7, so a
# correct implementation exceeds 5 in any of the <= 300 pairs compared here
# with probability < 2e-4. A shared stream gives r = 1 (|r| sqrt(m) >= 11 for
# m >= 128).
CORRELATION_BOUND = 5.0


# ------------------------------------------------------------------ checkers


def shared_runs(a, b, min_run=MIN_RUN, same=False):
  """(i, j) with a[i:i + min_run] == b[j:j + min_run] exactly (i != j if same).

  Vectorized: every position pair with a[i] == b[j] (by sorting b), then the
  next min_run - 1 values of both compared at once. Any offset, so a prefix,
  a shifted copy and a partial overlap are all found.
  """
  a, b = np.ravel(a), np.ravel(b)
  order = np.argsort(b, kind="stable")
  sorted_b = b[order]
  lo = np.searchsorted(sorted_b, a, "left")
  counts = np.searchsorted(sorted_b, a, "right") - lo
  if counts.sum() > 10 * (a.size + b.size):
    # Mostly equal values (e.g. zeros): not noise at all.
    return [(-1, -1)]
  i = np.repeat(np.arange(a.size), counts)
  within = np.arange(counts.sum()) - np.repeat(np.cumsum(counts) - counts,
                                               counts)
  j = order[np.repeat(lo, counts) + within]
  keep = (i + min_run <= a.size) & (j + min_run <= b.size)
  if same:
    keep &= i != j
  i, j = i[keep], j[keep]
  for k in range(1, min_run):
    equal = a[i + k] == b[j + k]
    i, j = i[equal], j[equal]
  return list(zip(i.tolist(), j.tolist()))


def prefix_correlation_score(a, b):
  """|r| sqrt(m): r the cosine of the first m = min(len) entries of a and b."""
  a, b = np.ravel(a).astype(np.float64), np.ravel(b).astype(np.float64)
  m = min(a.size, b.size)
  a, b = a[:m], b[:m]
  r = a @ b / np.sqrt((a @ a) * (b @ b))
  return abs(r) * np.sqrt(m)


def independence_problems(arrays):
  """What makes the named noise arrays look dependent ([] when nothing).

  For every pair (and every array against itself at a nonzero offset): a run
  of MIN_RUN exactly equal values at any offset; for every pair a prefix
  correlation score above CORRELATION_BOUND.
  """
  problems = []
  names = list(arrays)
  for x in names:
    if shared_runs(arrays[x], arrays[x], same=True):
      problems.append(f"{x} repeats itself")
  for x, y in itertools.combinations(names, 2):
    runs = shared_runs(arrays[x], arrays[y])
    if runs:
      problems.append(f"{x} and {y} share {len(runs)} runs, e.g. {runs[0]}")
    score = prefix_correlation_score(arrays[x], arrays[y])
    if score > CORRELATION_BOUND:
      problems.append(f"{x} and {y}: |r| sqrt(m) = {score:.1f}")
  return problems


def variance_problems(arrays, stddev):
  """Arrays whose sum of squares is outside the chi-square range of stddev.

  With mean 0 known, sum(x^2) / stddev^2 ~ chi2(n) for n entries; the range
  is its [1e-7, 1 - 1e-7] quantiles, so a correct draw falls outside with
  probability 2e-7 per array.
  """
  problems = []
  for name, x in arrays.items():
    x = np.ravel(x).astype(np.float64)
    statistic = x @ x / stddev ** 2
    lo, hi = stats.chi2(x.size).ppf([1e-7, 1 - 1e-7])
    if not lo <= statistic <= hi:
      problems.append(f"{name}: sum x^2 / stddev^2 = {statistic:.1f} outside "
                      f"[{lo:.1f}, {hi:.1f}] (n = {x.size})")
  return problems


class OneKeyQuery(seeded_query.SeededGaussianSumQuery):
  """PLANTED BUG: one key [noise_seed, draw] for every tensor of a draw.

  The old `_SeededTf` scheme: one stateless seed per draw, shared by all
  tensors, so each tensor's noise is a prefix of the largest one's.
  """

  def get_noised_result(self, sample_state, global_state):
    key = tf.stack([tf.constant(self.noise_seed, tf.int64),
                    tf.cast(global_state.draw, tf.int64)])

    def add_noise(v):
      return v + tf.random.stateless_normal(
          tf.shape(v), seed=key, stddev=global_state.stddev, alg="philox")

    result = tf.nest.map_structure(add_noise, sample_state)
    event = dp_accounting.GaussianDpEvent(global_state.stddev /
                                          global_state.l2_norm_clip)
    return result, global_state._replace(draw=global_state.draw + 1), event


# ------------------------------------------------------------------- helpers


def _zeros(shapes=MLP_SHAPES):
  return [tf.zeros(s, tf.float32) for s in shapes]


def _draws(query, rounds, shapes=MLP_SHAPES, state=None):
  """`rounds` noisings of zero sums: {"r<t>/<i>": noise} and the last state."""
  state = query.initial_global_state() if state is None else state
  out = {}
  for t in range(rounds):
    result, state, _ = query.get_noised_result(_zeros(shapes), state)
    for i, v in enumerate(tf.nest.flatten(result)):
      out[f"r{t}/{i}"] = v.numpy()
  return out, state


def _documented_noise(noise_seed, stream, draw, index, shape, stddev,
                      dtype=tf.float32):
  """The noise of the module docstring, recomputed from its formula."""
  key = tf.constant([noise_seed, -0x6E6F697365], tf.int64)
  for data in (stream, draw, index):
    key = tf.random.experimental.stateless_fold_in(
        key, tf.constant(data, tf.int64), alg="philox")
  return tf.random.stateless_normal(shape, seed=key, stddev=stddev,
                                    dtype=dtype, alg="philox").numpy()


def _records(rng, n, shapes=MLP_SHAPES[2:]):
  """n records of the given shapes with global L2 norms spread over 0.2-3."""
  out = []
  for scale in np.geomspace(0.2, 3.0, n):
    parts = [rng.normal(size=s) for s in shapes]
    norm = np.sqrt(sum((p ** 2).sum() for p in parts))
    out.append([tf.constant(p * scale / norm, tf.float32) for p in parts])
  rng.shuffle(out)
  return out


def _run_records(query, records, rounds):
  """Each round: clip and sum `records`, noise; returns results and states."""
  state = query.initial_global_state()
  results, states, events = [], [state], []
  for _ in range(rounds):
    params = query.derive_sample_params(state)
    sample = query.initial_sample_state(records[0])
    for record in records:
      sample = query.accumulate_record(params, sample, record)
    result, state, event = query.get_noised_result(sample, state)
    results.append(tf.nest.map_structure(lambda t: t.numpy(), result))
    states.append(state)
    events.append(event)
  return results, states, events


def _numpy(structure):
  return tf.nest.map_structure(np.asarray, structure)


def _values_without_draws(state):
  """A query state's values, flat, without the seeded queries' counters."""
  if hasattr(state, "_fields"):
    return [v for f in state._fields if f != "draw"
            for v in _values_without_draws(getattr(state, f))]
  return [np.asarray(state)]


def _assert_same_states(ours, theirs):
  for a, b in zip(ours, theirs, strict=True):
    a, b = _values_without_draws(a), _values_without_draws(b)
    assert len(a) == len(b)
    for x, y in zip(a, b):
      np.testing.assert_array_equal(x, y)


def _event_values(event):
  """A DpEvent as nested (type name, noise multiplier) values."""
  if isinstance(event, dp_accounting.ComposedDpEvent):
    return ("composed", [_event_values(e) for e in event.events])
  return (type(event).__name__, float(event.noise_multiplier))


# ---------------------------------------------------------- the checker


def test_the_checker_flags_one_key_for_every_tensor():
  """The planted bug reproduces the old failure and the checker sees it."""
  draws, _ = _draws(OneKeyQuery(1.0, 1.0, noise_seed=5), rounds=2)
  w1, b1, w2 = draws["r0/0"].ravel(), draws["r0/1"], draws["r0/2"].ravel()
  np.testing.assert_array_equal(b1, w1[:128])
  np.testing.assert_array_equal(w2, w1[:640])
  problems = independence_problems(draws)
  assert any("r0/0 and r0/1 share" in p for p in problems), problems
  assert any("r0/0 and r0/1: |r| sqrt(m)" in p for p in problems), problems
  # A shifted copy (not a prefix) is found too.
  x = np.random.default_rng(0).normal(size=1000).astype(np.float32)
  runs = shared_runs(x[300:420], x)
  assert runs == [(i, i + 300) for i in range(120 - MIN_RUN + 1)]
  assert independence_problems({"a": x[:500], "b": x[500:]}) == []


def test_noise_is_independent_across_tensors_and_draws():
  query = seeded_query.SeededGaussianSumQuery(1.0, 2.0, noise_seed=5)
  draws, state = _draws(query, rounds=3)
  assert independence_problems(draws) == []
  assert variance_problems(draws, 2.0) == []
  assert int(state.draw) == 3


# ------------------------------------------------ the documented streams


def test_noise_tag_is_fixed_and_apart_from_canary_ids():
  # Seeded runs are regenerated from the tag; canary keys are [seed, j >= 0].
  assert seeded_query.NOISE_TAG == -0x6E6F697365 < 0


@pytest.mark.parametrize("stream", [0, 3])
def test_fixed_noise_is_the_documented_draw(stream):
  query = seeded_query.SeededGaussianSumQuery(0.5, 1.25, noise_seed=9,
                                              stream=stream)
  shapes = ([7, 3], [3], [2, 2, 2])
  draws, _ = _draws(query, rounds=2, shapes=shapes)
  for t in range(2):
    for i, shape in enumerate(shapes):
      np.testing.assert_array_equal(
          draws[f"r{t}/{i}"],
          _documented_noise(9, stream, t, i, shape, 1.25))


def test_float64_records_get_float64_noise():
  query = seeded_query.SeededGaussianSumQuery(1.0, 1.0, noise_seed=2)
  result, _, _ = query.get_noised_result(
      [tf.zeros([50], tf.float64)], query.initial_global_state())
  assert result[0].dtype == tf.float64
  np.testing.assert_array_equal(
      result[0].numpy(), _documented_noise(2, 0, 0, 0, [50], 1.0, tf.float64))


def test_adaptive_noise_is_the_documented_draw():
  """Sum noise from stream 0, clipped-count noise from stream 1, per draw.

  No records: the below-estimate count is its noise alone, so the new clip is
  C exp(-lr (clamp(nu / n + 1/2, 0, 1) - target)) (Andrew et al. 2021,
  geometric update) with nu the stream-1 draw; recomputed here in float32
  (rtol 1e-6: a few float32 roundings of exp and the products).
  """
  z, n, clip, lr, target, count_stddev = 0.8, 10.0, 0.4, 0.2, 0.5, 3.0
  query = seeded_query.SeededQuantileAdaptiveClipSumQuery(
      clip, z, target, lr, count_stddev, n, noise_seed=4)
  state = query.initial_global_state()
  for t in range(3):
    stddev = state.sum_state.stddev.numpy()
    np.testing.assert_allclose(stddev, z * clip, rtol=1e-6)
    sample = query.initial_sample_state(_zeros(MLP_SHAPES[2:]))
    result, state, _ = query.get_noised_result(sample, state)
    for i, shape in enumerate(MLP_SHAPES[2:]):
      np.testing.assert_array_equal(
          result[i], _documented_noise(4, 0, t, i, shape, stddev))
    nu = _documented_noise(4, 1, t, 0, [], count_stddev)
    below = np.clip(np.float32(nu) / np.float32(n) + np.float32(0.5), 0, 1)
    clip = np.float32(clip) * np.exp(np.float32(-lr) * (below - target),
                                     dtype=np.float32)
    np.testing.assert_allclose(state.sum_state.l2_norm_clip, clip, rtol=1e-6)
    clip = float(state.sum_state.l2_norm_clip)
    assert int(state.sum_state.draw) == t + 1
    assert int(state.quantile_estimator_state.below_estimate_state
               .numerator_state.draw) == t + 1


def test_adaptive_noise_is_independent_across_tensors_and_draws():
  query = seeded_query.SeededQuantileAdaptiveClipSumQuery(
      1.0, 2.0, 0.5, 0.0, 1.0, 10, noise_seed=5)  # lr 0: the clip stays 1.
  state = query.initial_global_state()
  draws = {}
  for t in range(3):
    result, state, _ = query.get_noised_result(
        query.initial_sample_state(_zeros()), state)
    draws.update({f"r{t}/{i}": v.numpy() for i, v in enumerate(result)})
  assert independence_problems(draws) == []
  assert variance_problems(draws, 2.0) == []


# ----------------------------------------- exactly the parents' behavior


def test_fixed_query_behaves_like_tfp_at_zero_noise():
  records = _records(np.random.default_rng(1), 12)
  ours = _run_records(seeded_query.SeededGaussianSumQuery(1.0, 0.0, 3),
                      records, 2)
  theirs = _run_records(tfp.GaussianSumQuery(1.0, 0.0), records, 2)
  for a, b in zip(ours[0], theirs[0]):
    tf.nest.map_structure(np.testing.assert_array_equal, a, b)
  _assert_same_states(ours[1], theirs[1])
  assert [int(s.draw) for s in ours[1]] == [0, 1, 2]
  # Not vacuous: clipping acted (the result is not the unclipped sum).
  unclipped = sum(np.asarray(r[1], np.float64) for r in records)
  assert np.abs(ours[0][0][1] - unclipped).max() > 0.1
  assert [_event_values(e) for e in ours[2]] == [
      _event_values(e) for e in theirs[2]]
  # With noise the DpEvent is still the parent's: stddev / clip.
  noisy = seeded_query.SeededGaussianSumQuery(0.5, 1.5, 3)
  event = noisy.get_noised_result(_zeros(), noisy.initial_global_state())[2]
  parent = tfp.GaussianSumQuery(0.5, 1.5)
  assert _event_values(event) == _event_values(
      parent.get_noised_result(_zeros(), parent.initial_global_state())[2])
  assert _event_values(event) == ("GaussianDpEvent", 3.0)


def test_adaptive_query_behaves_like_tfp_at_zero_noise():
  """Clips, results, states, metrics and DpEvents equal tfp's, bitwise."""
  records = _records(np.random.default_rng(2), 15)
  args = dict(initial_l2_norm_clip=0.3, noise_multiplier=0.0,
              target_unclipped_quantile=0.6, learning_rate=0.3,
              clipped_count_stddev=0.0, expected_num_records=15)
  ours_query = seeded_query.SeededQuantileAdaptiveClipSumQuery(
      **args, noise_seed=8)
  theirs_query = tfp.QuantileAdaptiveClipSumQuery(**args)
  ours = _run_records(ours_query, records, 5)
  theirs = _run_records(theirs_query, records, 5)
  for a, b in zip(ours[0], theirs[0]):
    tf.nest.map_structure(np.testing.assert_array_equal, a, b)
  _assert_same_states(ours[1], theirs[1])
  for a, b in zip(ours[1], theirs[1]):
    assert (ours_query.derive_metrics(a)["clip"].numpy()
            == theirs_query.derive_metrics(b)["clip"].numpy())
  clips = [float(s.sum_state.l2_norm_clip) for s in ours[1]]
  # Not vacuous: the clip moved every round.
  assert len(set(clips)) == len(clips)
  assert [_event_values(e) for e in ours[2]] == [
      _event_values(e) for e in theirs[2]]
  # With noise: the same composed event as tfp's.
  noisy_args = dict(args, noise_multiplier=1.3, clipped_count_stddev=2.0)
  noisy = seeded_query.SeededQuantileAdaptiveClipSumQuery(**noisy_args,
                                                          noise_seed=8)
  parent = tfp.QuantileAdaptiveClipSumQuery(**noisy_args)
  sample = [tf.zeros([3])]

  def event(q):
    return _event_values(q.get_noised_result(
        q.initial_sample_state(sample), q.initial_global_state())[2])

  assert event(noisy) == event(parent) == (
      "composed", [("GaussianDpEvent", pytest.approx(1.3)),
                   ("GaussianDpEvent", 4.0)])


# ------------------------------------------------------- seeds and state


@pytest.mark.parametrize("adaptive", [False, True])
def test_same_seed_same_noise_and_a_state_resumes_the_stream(adaptive):
  def new_query(noise_seed=6):
    if adaptive:
      return seeded_query.SeededQuantileAdaptiveClipSumQuery(
          0.5, 1.0, 0.5, 0.2, 2.0, 10, noise_seed=noise_seed)
    return seeded_query.SeededGaussianSumQuery(0.5, 0.5, noise_seed)

  def rounds(query, state, count):
    out = []
    for _ in range(count):
      result, state, _ = query.get_noised_result(
          query.initial_sample_state(_zeros(MLP_SHAPES[1:])), state)
      out.append(np.concatenate([np.ravel(v) for v in result]))
    return out, state

  query = new_query()
  straight, _ = rounds(query, query.initial_global_state(), 3)
  again, _ = rounds(new_query(), new_query().initial_global_state(), 3)
  np.testing.assert_array_equal(straight, again)
  _, state = rounds(query, query.initial_global_state(), 1)
  # A checkpoint holds values, not tensors: resume from NumPy copies.
  state = tf.nest.map_structure(tf.constant, _numpy(state))
  resumed, _ = rounds(new_query(), state, 2)
  np.testing.assert_array_equal(straight[1:], resumed)
  other, _ = rounds(new_query(noise_seed=7), new_query().initial_global_state(),
                    1)
  assert not np.any(other[0] == straight[0])
  assert not np.array_equal(straight[0], straight[1])


def test_canaries_and_noise_never_coincide_with_one_seed():
  """noise_seed == canary_seed: no noise draw shares a stream with a canary.

  Canary j's Gaussian is stateless_normal([d], seed=[s, j]) (tff_canary.
  canaries). The planted one-key query at draw 0 uses key [s, 0], canary 0's,
  so the same check fails on it.
  """
  s, d = 17, 20000
  canary_gaussians = {
      f"canary{j}": tf.random.stateless_normal(
          [d], seed=[s, j], dtype=tf.float32, alg="philox").numpy()
      for j in range(6)}
  for stream in (0, 1):
    query = seeded_query.SeededGaussianSumQuery(1.0, 1.0, s, stream=stream)
    draws, _ = _draws(query, rounds=3, shapes=([d], [d // 2]))
    assert independence_problems({**canary_gaussians, **draws}) == []
  planted, _ = _draws(OneKeyQuery(1.0, 1.0, s), rounds=1, shapes=([d],))
  np.testing.assert_array_equal(planted["r0/0"], canary_gaussians["canary0"])
  assert independence_problems({**canary_gaussians, **planted})


# ----------------------------------------------------------- bad input


@pytest.mark.parametrize("build, error, match", [
    (lambda: seeded_query.SeededGaussianSumQuery(1.0, 1.0, -3),
     ValueError, "noise_seed must be at least 0, got -3"),
    (lambda: seeded_query.SeededGaussianSumQuery(1.0, 1.0, 1.5),
     TypeError, "noise_seed must be an integer, got 1.5"),
    (lambda: seeded_query.SeededGaussianSumQuery(1.0, 1.0, 2 ** 63),
     ValueError, "noise_seed must be at most 2\\*\\*63 - 1"),
    (lambda: seeded_query.SeededGaussianSumQuery(1.0, 1.0, 1, stream=-1),
     ValueError, "stream must be at least 0, got -1"),
    (lambda: seeded_query.SeededQuantileAdaptiveClipSumQuery(
        0.1, 1.0, 0.5, 0.2, 1.0, 10, noise_seed=None),
     TypeError, "noise_seed must be an integer, got None"),
])
def test_bad_arguments_are_named(build, error, match):
  with pytest.raises(error, match=match):
    build()


def test_seed_and_stream_are_kept():
  query = seeded_query.SeededGaussianSumQuery(1.0, 1.0, 12, stream=2)
  assert (query.noise_seed, query.stream) == (12, 2)
  adaptive = seeded_query.SeededQuantileAdaptiveClipSumQuery(
      0.1, 1.0, 0.5, 0.2, 1.0, 10, noise_seed=12)
  assert adaptive.noise_seed == 12


# ------------------------------------------- inside TFF's own DP factory


@pytest.mark.tff
@pytest.mark.parametrize("adaptive", [False, True])
def test_runs_and_reproduces_in_tffs_differentially_private_factory(adaptive):
  import tensorflow_federated as tff  # pylint: disable=g-import-not-at-top
  from tff_canary.federated.runtime import worker_guard  # pylint: disable=g-import-not-at-top
  worker_guard.install()

  def new_factory():
    if adaptive:
      query = seeded_query.SeededQuantileAdaptiveClipSumQuery(
          0.5, 1.0, 0.5, 0.2, 1.0, 4, noise_seed=21)
    else:
      query = seeded_query.SeededGaussianSumQuery(0.5, 0.5, noise_seed=21)
    return tff.aggregators.DifferentiallyPrivateFactory(
        tfp.NormalizedQuery(query, denominator=4))

  value_type = tff.types.to_type([tff.TensorType(np.float32, [30, 8]),
                                  tff.TensorType(np.float32, [8])])
  clients = [[np.full([30, 8], 0.01 * k, np.float32),
              np.full([8], -0.01 * k, np.float32)] for k in range(3)]

  def run(process, state, rounds):
    out = []
    for _ in range(rounds):
      output = process.next(state, clients)
      state = output.state
      out.append(np.concatenate([np.ravel(v) for v in output.result]))
    return out, state

  process = new_factory().create(value_type)
  first, state = run(process, process.initialize(), 3)
  second, _ = run(new_factory().create(value_type),
                  new_factory().create(value_type).initialize(), 3)
  np.testing.assert_array_equal(first, second)
  assert not np.array_equal(first[0], first[1])
  event = tff.aggregators.differential_privacy.extract_dp_event_from_state(
      state)
  assert type(event).__name__ == (
      "ComposedDpEvent" if adaptive else "GaussianDpEvent")
  numerator = state.query_state.numerator_state
  draw = numerator.sum_state.draw if adaptive else numerator.draw
  assert draw == 3
