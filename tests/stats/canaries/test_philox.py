"""TensorFlow's stateless Philox stream in NumPy (stats/canaries/philox.py).

The block function against the known-answer vectors of Random123 (the
authors' library of Salmon et al. 2011, kat_vectors, philox4x32_10), and the
stream against words TensorFlow 2.14 drew for the same seeds
(`tf.random.stateless_uniform([6], seed, dtype=tf.uint32, minval=None,
maxval=None, alg="philox")`, recorded here so that this test needs no
TensorFlow; tests/federated/insertion/test_orthogonal_transform.py compares
with the op itself).
"""

import numpy as np
import pytest

from tff_canary.stats.canaries import philox

# (counter words, key words) -> output words, Random123's philox4x32_10 KATs.
KNOWN_ANSWERS = [
    ([0, 0, 0, 0], [0, 0],
     [0x6627E8D5, 0xE169C58D, 0xBC57AC4C, 0x9B00DBD8]),
    ([0xFFFFFFFF] * 4, [0xFFFFFFFF] * 2,
     [0x408F276D, 0x41C83B0E, 0xA20BC7C6, 0x6D5451FD]),
    ([0x243F6A88, 0x85A308D3, 0x13198A2E, 0x03707344],
     [0xA4093822, 0x299F31D0],
     [0xD16CFE09, 0x94FDCCEB, 0x5001E420, 0x24126EA1]),
]

# seed -> TensorFlow's first words (TF 2.14.1, CPU).
TENSORFLOW_WORDS = {
    (5, -1): [4004956684, 3835482553, 248651796, 13601467],
    (123456789, -3): [3787249536, 3230729683, 3203937546, 294893231],
    (2 ** 62 + 7, -2): [3073340997, 381933699, 2203278501, 4263176980],
}


@pytest.mark.parametrize("counter, key, expected", KNOWN_ANSWERS)
def test_philox_block_matches_random123(counter, key, expected):
  out = philox.philox4x32(np.array([counter], np.uint32), key)
  np.testing.assert_array_equal(out[0], np.array(expected, np.uint32))


@pytest.mark.parametrize("seed", sorted(TENSORFLOW_WORDS))
def test_stream_matches_tensorflow(seed):
  np.testing.assert_array_equal(philox.stateless_uint32(seed, 4),
                                np.array(TENSORFLOW_WORDS[seed], np.uint32))


def test_stream_is_prefix_consistent_across_blocks():
  # Words of block i come from counter i: asking for more words keeps the
  # first ones, including a size that is not a multiple of 4.
  long = philox.stateless_uint32((7, -5), 4099)
  for size in (0, 1, 3, 4, 5, 4098):
    np.testing.assert_array_equal(philox.stateless_uint32((7, -5), size),
                                  long[:size])
  # 4099 words of a good generator: about half the bits set (sd 0.0028).
  bits = np.unpackbits(long.view(np.uint8))
  assert abs(bits.mean() - 0.5) < 0.012


@pytest.mark.parametrize("seed, error, match", [
    ((1,), ValueError, "seed must be two integers"),
    ((1.5, 2), TypeError, "seed must be an integer"),
    ((2 ** 63, 0), ValueError, "int64"),
    ((-2 ** 63 - 1, 0), ValueError, "seed must be at least"),
])
def test_bad_seeds_are_refused_by_name(seed, error, match):
  with pytest.raises(error, match=match):
    philox.stateless_uint32(seed, 3)


def test_bad_size_and_counters_are_refused():
  with pytest.raises(ValueError, match="size must be at least 0"):
    philox.stateless_uint32((1, 2), -1)
  with pytest.raises(ValueError, match=r"counters must have shape \[n, 4\]"):
    philox.philox4x32(np.zeros((2, 3), np.uint32), [0, 0])
