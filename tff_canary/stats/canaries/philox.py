"""TensorFlow's stateless Philox stream in NumPy, bit for bit.

Orthogonal canaries (`orthogonal_canaries`) flip signs with bits that
TensorFlow draws as `tf.random.stateless_uniform(shape, seed, dtype=uint32,
minval=None, maxval=None, alg="philox")`. A framework without TensorFlow
(Flower, JAX, PyTorch) gets the same canaries from the same seed only if it
draws the same bits, so this module computes that stream in NumPy:

  * Philox4x32-10 (Salmon, Moraes, Dror and Shaw, "Parallel Random Numbers:
    As Easy as 1, 2, 3", SC 2011, §3.2 and Figure 2): a 128-bit counter and
    a 64-bit key, ten rounds of two 32 x 32 -> 64-bit multiplications with
    M0 = 0xD2511F53 and M1 = 0xCD9E8D57, the key raised by the Weyl
    constants W0 = 0x9E3779B9 and W1 = 0xBB67AE85 between rounds;
    `philox4x32` reproduces the paper's Random123 known-answer vectors.
  * TensorFlow's seed scrambling for `alg="philox"`
    (`tensorflow/python/ops/random_ops_util.py`, `_philox_scramble_seed`,
    TF 2.14): the int64 seed pair, cast to uint64, is the counter of one
    Philox block under the fixed key 0x02461E293EC8F720; that block's four
    words are the stream's key (words 0, 1) and the high half of its
    starting counter (words 2, 3; the low half 0).
  * The stream: block i is Philox of the starting counter + i (a 128-bit
    little-endian increment), its four words in order.

tests/stats/canaries/test_philox.py checks the known-answer vectors; the
TFF environment's test of the orthogonal transform compares this stream with
TensorFlow's op itself.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

from tff_canary.stats import validation

_M0 = np.uint64(0xD2511F53)
_M1 = np.uint64(0xCD9E8D57)
_W0 = np.uint64(0x9E3779B9)
_W1 = np.uint64(0xBB67AE85)
_LOW = np.uint64(0xFFFFFFFF)
_ROUNDS = 10
# The key TensorFlow scrambles a stateless seed with (module docstring).
_SCRAMBLE_KEY = 0x02461E293EC8F720


def philox4x32(counters: np.ndarray, key: Sequence[int]) -> np.ndarray:
  """Philox4x32-10 of each counter under `key`.

  Args:
    counters: uint32 array [n, 4], each row a 128-bit counter (word 0 the
      lowest).
    key: two uint32 words (word 0 the lowest).

  Returns:
    uint32 array [n, 4]: the four output words of each counter.
  """
  counters = np.asarray(counters, dtype=np.uint32)
  if counters.ndim != 2 or counters.shape[1] != 4:
    raise ValueError(f"counters must have shape [n, 4], got "
                     f"{counters.shape}.")
  c = [counters[:, i].astype(np.uint64) for i in range(4)]
  k0, k1 = (np.uint64(int(k)) for k in key)
  for _ in range(_ROUNDS):
    p0 = _M0 * c[0]
    p1 = _M1 * c[2]
    c = [(p1 >> np.uint64(32)) ^ c[1] ^ k0, p1 & _LOW,
         (p0 >> np.uint64(32)) ^ c[3] ^ k1, p0 & _LOW]
    k0 = (k0 + _W0) & _LOW
    k1 = (k1 + _W1) & _LOW
  return np.stack(c, axis=1).astype(np.uint32)


def _words(value: int) -> list[int]:
  """A uint64 as its two uint32 words, the low one first."""
  return [value & 0xFFFFFFFF, value >> 32]


def stateless_uint32(seed: Sequence[int], size: int) -> np.ndarray:
  """`tf.random.stateless_uniform([size], seed, dtype=tf.uint32,
  minval=None, maxval=None, alg="philox")` for an int64 seed pair.

  Args:
    seed: two integers, each in [-2^63, 2^63) (TensorFlow's int64 seed).
    size: the number of words, >= 0.

  Returns:
    uint32 array [size].
  """
  if len(seed) != 2:
    raise ValueError(f"seed must be two integers, got {seed!r}.")
  s0, s1 = (validation.as_int(s, "seed", minimum=-2 ** 63) for s in seed)
  if max(s0, s1) >= 2 ** 63:
    raise ValueError(f"seed must be two int64 values, got {seed!r}.")
  s0, s1 = s0 % 2 ** 64, s1 % 2 ** 64  # TensorFlow's cast to uint64
  size = validation.as_int(size, "size", minimum=0)
  mix = philox4x32(np.array([_words(s0) + _words(s1)], np.uint32),
                   _words(_SCRAMBLE_KEY))[0]
  # Block i's counter is (i, mix[2], mix[3]) as a 128-bit number whose low
  # 64 bits start at 0: no carry reaches the high words before 2^64 blocks.
  index = np.arange((size + 3) // 4, dtype=np.uint64)
  counters = np.empty((index.size, 4), np.uint32)
  counters[:, 0] = (index & _LOW).astype(np.uint32)
  counters[:, 1] = (index >> np.uint64(32)).astype(np.uint32)
  counters[:, 2] = mix[2]
  counters[:, 3] = mix[3]
  return philox4x32(counters, mix[:2]).reshape(-1)[:size]
