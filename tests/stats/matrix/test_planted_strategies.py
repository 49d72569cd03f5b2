"""A matrix mechanism's planted bugs release what the buggy generator streams.

`planted_strategies.planted_noise` writes each bug as the released B'; here
each B' is checked against the streaming generators (`streaming.BandedNoise`,
`streaming.BltNoise`) run with that bug written as a user would, by hand, on
the same fresh noise: a generator built anew every r rounds (its state not
carried), built with the scaled coefficients, or fed round t's noise again
at t + lag. Float64 throughout: the tolerance is rounding.
"""

import numpy as np
import pytest

from tff_canary.stats.matrix import (blt, planted_strategies, streaming,
                                     strategy_noise, toeplitz)

ROUNDS, EPOCH = 24, 8
BANDED = toeplitz.square_root_coefficients(3)
BLT = blt.blt([0.3, 0.2], [0.9, 0.5])


def _fresh(seed=0):
  return np.random.default_rng(seed).normal(size=(ROUNDS, 5))


def _generator(strategy, factor=1.0):
  """A fresh generator; `factor` on c_i, i >= 1 (a BLT's output scales)."""
  if strategy == "banded":
    return streaming.BandedNoise(
        np.concatenate([BANDED[:1], factor * BANDED[1:]]), (5,))
  return streaming.BltNoise(
      blt.blt(factor * BLT.output_scale, BLT.buf_decay), (5,))


def _coefficients(strategy):
  return BANDED if strategy == "banded" else BLT.coefficients(ROUNDS)


def _streamed(strategy, fresh, *, reset_every=EPOCH, factor=1.0, lag=None):
  """The generator restarted every epoch (and every reset_every rounds),
  possibly with scaled coefficients, fed fresh's rows (or rows t mod lag)."""
  out = []
  for t in range(ROUNDS):
    if t % EPOCH % reset_every == 0:  # counted from the epoch's start
      generator = _generator(strategy, factor)
    out.append(generator.next(fresh[t if lag is None else t % lag]))
  return np.stack(out)


@pytest.mark.parametrize("strategy", ["banded", "blt"])
def test_the_correct_generator_releases_the_claimed_noise(strategy):
  c = _coefficients(strategy)
  planted = planted_strategies.planted_noise(c, ROUNDS, restart_every=EPOCH,
                                             bug="none")
  claimed = strategy_noise.strategy_noise(c, ROUNDS, restart_every=EPOCH)
  np.testing.assert_array_equal(planted.released, claimed.released)
  fresh = _fresh()
  np.testing.assert_allclose(planted.released @ fresh,
                             _streamed(strategy, fresh), atol=1e-12)


@pytest.mark.parametrize("strategy", ["banded", "blt"])
@pytest.mark.parametrize("reset_every", [1, 3])
def test_buffers_reset_is_a_generator_built_anew(strategy, reset_every):
  c = _coefficients(strategy)
  planted = planted_strategies.planted_noise(
      c, ROUNDS, restart_every=EPOCH, bug="buffers_reset",
      reset_every=reset_every)
  fresh = _fresh(1)
  np.testing.assert_allclose(
      planted.released @ fresh,
      _streamed(strategy, fresh, reset_every=reset_every), atol=1e-12)
  if reset_every == 1:  # never carried: each round its own fresh noise / c_0
    np.testing.assert_allclose(planted.released, np.eye(ROUNDS) / c[0])


@pytest.mark.parametrize("strategy", ["banded", "blt"])
def test_coefficient_scale_is_a_generator_with_scaled_coefficients(strategy):
  c = _coefficients(strategy)
  planted = planted_strategies.planted_noise(
      c, ROUNDS, restart_every=EPOCH, bug="coefficient_scale", factor=0.5)
  fresh = _fresh(2)
  np.testing.assert_allclose(planted.released @ fresh,
                             _streamed(strategy, fresh, factor=0.5),
                             atol=1e-12)


@pytest.mark.parametrize("strategy", ["banded", "blt"])
def test_noise_reuse_feeds_round_t_noise_again_at_t_plus_lag(strategy):
  c = _coefficients(strategy)
  planted = planted_strategies.planted_noise(
      c, ROUNDS, restart_every=EPOCH, bug="noise_reuse", lag=5)
  fresh = _fresh(3)
  np.testing.assert_allclose(planted.released @ fresh,
                             _streamed(strategy, fresh, lag=5), atol=1e-12)
  # The default lag is half an epoch.
  default = planted_strategies.planted_noise(
      c, ROUNDS, restart_every=EPOCH, bug="noise_reuse")
  np.testing.assert_allclose(default.released @ fresh,
                             _streamed(strategy, fresh, lag=EPOCH // 2),
                             atol=1e-12)


@pytest.mark.parametrize("arguments, message", [
    (dict(bug="buffers_reset", reset_every=EPOCH),
     "reset_every must be below restart_every = 8, got 8"),
    (dict(bug="coefficient_scale", factor=1.0), "factor must differ from 1"),
    (dict(bug="coefficient_scale", factor=-2.0), "factor"),
    (dict(bug="noise_reuse", lag=ROUNDS), "lag must be below rounds = 24"),
    (dict(bug="reuse"), "bug"),
])
def test_bad_bug_arguments_are_named(arguments, message):
  with pytest.raises(ValueError, match=message):
    planted_strategies.planted_noise(BANDED, ROUNDS, restart_every=EPOCH,
                                     **arguments)
