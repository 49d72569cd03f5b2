"""Orthogonal canaries' scores, taken inside each round (TF ops only).

docs/method/orthogonal-canaries.md ("Scores in the round"). One transform of
a round's noised aggregate a_r gives every s_j = <c_j, a_r>
(`orthogonal_transform`), and each canary's cosine is taken with the OTHER
inserted canaries of the round (I_r) removed, exactly:

    |a_r - sum_{i in I_r, i != j} s_i c_i|^2 = |a_r|^2 - sum_{i in I_r} s_i^2
                                               + [j in I_r] s_j^2,
    x_{j,r} = s_j / sqrt(that).

The process state keeps per canary (`CanaryScores`) the max of x_{j,r} and
its round (the all-iterates statistic of Andrew et al. 2024, Algorithm 3)
and the sum of x_{j,r} over its schedule, for T_j = sqrt(d / P_j)
sum_{r in S_j} x_{j,r} (`tff_canary.stats.estimators.scheduled_sums`). They
assume independent rounds: DP-FTRL's scores are `query_noise.QueryNoise.scores`.
Sums and norms are in float64; the transform in float32.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import numpy as np
import tensorflow as tf

from tff_canary.federated.insertion import orthogonal_transform
from tff_canary.federated.structures import flat_layout
from tff_canary.stats.canaries import canary_config

# Below every cosine: the max of no round.
NO_MAX = -2.0


class CanaryScores(NamedTuple):
  """Running statistics of every canary over the rounds scored so far.

  Attributes:
    max_cosine: float64 [m], max over the rounds of x_{j,r} (NO_MAX before
      the first round).
    max_round: int32 [m], the round of that max (-1 before the first).
    scheduled_sum: float64 [m], sum of x_{j,r} over the rounds of canary
      j's schedule scored so far.
    scheduled_rounds: int32 [m], how many of those rounds were scored.
    rounds_scored: int32, rounds scored.
  """
  max_cosine: Any
  max_round: Any
  scheduled_sum: Any
  scheduled_rounds: Any
  rounds_scored: Any


def initial(num_canaries: int) -> CanaryScores:
  """The scores before the first round (TF tensors)."""
  return CanaryScores(
      max_cosine=tf.fill([num_canaries], tf.constant(NO_MAX, tf.float64)),
      max_round=tf.fill([num_canaries], tf.constant(-1, tf.int32)),
      scheduled_sum=tf.zeros([num_canaries], tf.float64),
      scheduled_rounds=tf.zeros([num_canaries], tf.int32),
      rounds_scored=tf.constant(0, tf.int32))


def round_ids(events: tf.Tensor, round_num: tf.Tensor) -> tf.Tensor:
  """The canary ids of `events` ([n, 2] (round, id)) in round `round_num`."""
  return tf.boolean_mask(events[:, 1], tf.equal(events[:, 0], round_num))


def cosines(seed: Any, flat: tf.Tensor, dim: int, canary_rows: Any,
            removed_ids: tf.Tensor) -> tf.Tensor:
  """x_j = cos(c_j, flat without the canaries `removed_ids`), float64 [m].

  `removed_ids` are the inserted canaries whose projections are removed
  (module docstring); canary j's own projection is never removed.
  """
  s = tf.cast(orthogonal_transform.scores(seed, flat, dim, canary_rows),
              tf.float64)
  flat64 = tf.cast(flat, tf.float64)
  norm2 = tf.reduce_sum(flat64 * flat64)
  removed_ids = tf.reshape(tf.cast(removed_ids, tf.int32), [-1])
  removed = tf.scatter_nd(removed_ids[:, tf.newaxis],
                          tf.ones(tf.shape(removed_ids), tf.float64),
                          tf.shape(s))
  removed = tf.minimum(removed, 1.0)  # an id listed twice is removed once
  s2 = s * s
  residual2 = norm2 - tf.reduce_sum(removed * s2) + removed * s2
  # Float rounding can leave a tiny negative residual for an aggregate that
  # is exactly its canaries; no residual means no direction: cosine 0.
  safe = tf.where(residual2 > 0.0, residual2, tf.ones_like(residual2))
  return tf.where(residual2 > 0.0, s / tf.sqrt(safe), tf.zeros_like(s))


def update(scores: CanaryScores, seed: Any, flat: tf.Tensor, dim: int,
           canary_rows: Any, round_num: tf.Tensor, inserted_events: tf.Tensor,
           scheduled_events: tf.Tensor) -> CanaryScores:
  """The scores after round `round_num`, whose noised aggregate is `flat`.

  Args:
    scores: `CanaryScores` before the round.
    seed: The canary seed.
    flat: a_r as one float32 vector of length dim (`flat_layout`).
    dim: d.
    canary_rows: int32 [m], the canaries' rows (`orthogonal_transform.rows`).
    round_num: int32, r.
    inserted_events: int32 [n, 2] (round, id) events of the inserted canaries.
    scheduled_events: int32 [n', 2] every canary's schedule (inserted and
      held out, `CanaryConfig.scheduled_events`).
  """
  x = cosines(seed, flat, dim, canary_rows,
              round_ids(inserted_events, round_num))
  better = x > scores.max_cosine
  scheduled = round_ids(scheduled_events, round_num)[:, tf.newaxis]
  in_schedule = tf.scatter_nd(scheduled, tf.ones(tf.shape(scheduled)[:1],
                                                  tf.int32), tf.shape(x))
  return CanaryScores(
      max_cosine=tf.where(better, x, scores.max_cosine),
      max_round=tf.where(better, tf.fill(tf.shape(x), round_num),
                         scores.max_round),
      scheduled_sum=scores.scheduled_sum
      + tf.cast(in_schedule, tf.float64) * x,
      scheduled_rounds=scores.scheduled_rounds + in_schedule,
      rounds_scored=scores.rounds_scored + 1)


def initial_state(canaries: canary_config.CanaryConfig,
                  num_scored: int) -> tuple[Any, Any, Any, CanaryScores]:
  """(round 0, the seed, the inserted events, `initial(num_scored)`): the
  canary part of a scoring process's initial state, as TF tensors."""
  events = np.asarray(canaries.participation.events, np.int32)
  return (tf.constant(0, tf.int32), tf.constant(canaries.seed, tf.int64),
          tf.constant(events, tf.int32, shape=events.shape),
          initial(num_scored))


def scorer(canaries: canary_config.CanaryConfig, dim: int):
  """The round's `update` for orthogonal `canaries` in a model of `dim`.

  Returns f(scores, result, round_num, seed, schedule) -> CanaryScores, for
  the state's fields and the round's released `result` (a value structure,
  flattened by `flat_layout`); the canaries' rows and every canary's
  schedule are constants of the graph.
  """
  rows = orthogonal_transform.rows(canaries.seed, dim, canaries.num_canaries)
  scheduled = canaries.scheduled_events()

  def score(scores, result, round_num, seed, schedule):
    return update(CanaryScores(*scores), seed,
                  flat_layout.flatten_value(result), dim, tf.constant(rows),
                  round_num, schedule,
                  tf.constant(scheduled, tf.int32, shape=scheduled.shape))

  return score


def final_cosines(seed: int, delta: np.ndarray, dim: int,
                  canary_rows: np.ndarray,
                  inserted_ids: np.ndarray) -> np.ndarray:
  """cos(c_j, theta_0 - theta_T) with the other inserted canaries removed.

  Eager: one transform of the final model delta (float64 NumPy [m]).
  """
  flat = tf.constant(np.asarray(delta, np.float32).reshape(-1))
  return cosines(tf.constant(seed, tf.int64), flat, dim,
                 tf.constant(canary_rows, tf.int32),
                 tf.constant(np.asarray(inserted_ids, np.int32))).numpy()
