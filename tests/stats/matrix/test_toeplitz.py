"""Toeplitz strategies (banded square root, BLT): coefficients, inverses, dense C and B.

Every closed form is checked against an independent computation: the square
root's coefficients against exact binomials and C C = A (the prefix-sum
matrix); the inverse's coefficients by C C^-1 = I; a BLT's coefficients by
its definition summed term by term, and its inverse BLT (McMahan & Pillutla
2025) against the series inverse of its coefficients.
"""

import numpy as np
import pytest
from scipy import special

from tff_canary.stats.matrix import blt, toeplitz


def test_square_root_coefficients_are_binomials_squaring_to_prefix_sums():
  c = toeplitz.square_root_coefficients(60)
  exact = np.array([special.comb(2 * i, i, exact=True) / 4**i
                    for i in range(60)], dtype=float)
  np.testing.assert_allclose(c, exact, rtol=1e-13)
  strategy = toeplitz.strategy_matrix(c, 12)
  np.testing.assert_allclose(strategy @ strategy, np.tril(np.ones((12, 12))),
                             atol=1e-13)
  # Banded: the first b coefficients, zeros after.
  banded = toeplitz.strategy_matrix(toeplitz.square_root_coefficients(3), 6)
  assert banded[5, 5] == c[0] and banded[5, 3] == c[2]
  assert banded[5, 2] == 0.0 and banded[3, 0] == 0.0


@pytest.mark.parametrize("coefficients", [
    toeplitz.square_root_coefficients(4),  # banded square root
    toeplitz.square_root_coefficients(20),  # full square root
    [2.0, -0.7, 0.3],  # any invertible C
])
def test_noise_matrix_inverts_the_strategy(coefficients):
  n = 20
  product = (toeplitz.strategy_matrix(coefficients, n)
             @ toeplitz.noise_matrix(coefficients, n))
  np.testing.assert_allclose(product, np.eye(n), atol=1e-12)


def test_square_root_inverse_is_the_differenced_square_root():
  # (1 - x)^(1/2) = (1 - x) (1 - x)^(-1/2): d_i = c_i - c_{i-1}.
  c = toeplitz.square_root_coefficients(30)
  d = toeplitz.inverse_coefficients(c, 30)
  np.testing.assert_allclose(d, c - np.concatenate([[0.0], c[:-1]]),
                             atol=1e-14)


def test_column_norms_are_the_dense_columns():
  c = toeplitz.square_root_coefficients(5)
  np.testing.assert_allclose(
      toeplitz.column_norms(c, 9),
      np.linalg.norm(toeplitz.strategy_matrix(c, 9), axis=0), rtol=1e-14)


def test_nonincreasing_violation_names_the_coefficient():
  assert toeplitz.nonincreasing_violation(
      toeplitz.square_root_coefficients(50)) is None
  assert "c_1 = -0.1" in toeplitz.nonincreasing_violation([1.0, -0.1])
  assert "c_1 = 0.5 to c_2 = 0.6" in toeplitz.nonincreasing_violation(
      [1.0, 0.5, 0.6])


def test_bad_coefficients_are_refused_by_name():
  with pytest.raises(ValueError, match=r"coefficients\[0\] must be nonzero"):
    toeplitz.inverse_coefficients([0.0, 1.0], 4)
  with pytest.raises(TypeError, match="coefficients must be a 1-D array"):
    toeplitz.strategy_matrix("1, 0.5", 4)
  with pytest.raises(ValueError, match="rounds must be at least 1, got 0"):
    toeplitz.noise_matrix([1.0], 0)


def test_blt_coefficients_follow_the_definition():
  strategy = blt.blt(output_scale=[0.3, 0.1], buf_decay=[0.5, 0.95])
  c = strategy.coefficients(8)
  expected = [1.0] + [0.1 * 0.95**(t - 1) + 0.3 * 0.5**(t - 1)
                      for t in range(1, 8)]
  np.testing.assert_allclose(c, expected, rtol=1e-14)
  assert strategy.buf_decay.tolist() == [0.95, 0.5]  # sorted, pairs kept
  assert strategy.output_scale.tolist() == [0.1, 0.3]


@pytest.mark.parametrize("scales,decays", [
    ([0.3, 0.1], [0.5, 0.95]),
    ([0.2, 0.15, 0.05], [0.3, 0.8, 0.99]),
    ([0.5], [0.9]),
])
def test_blt_inverse_is_the_blt_of_the_inverse_coefficients(scales, decays):
  strategy = blt.blt(output_scale=scales, buf_decay=decays)
  inverse = strategy.inverse()
  n = 200
  assert inverse.num_buffers == strategy.num_buffers
  np.testing.assert_allclose(
      inverse.coefficients(n),
      toeplitz.inverse_coefficients(strategy.coefficients(n), n), atol=1e-12)
  # The inverse of the inverse is the strategy again.
  np.testing.assert_allclose(inverse.inverse().coefficients(n),
                             strategy.coefficients(n), atol=1e-11)


def test_bad_blt_parameters_are_refused_by_name():
  with pytest.raises(ValueError, match="one value per buffer each, got 2 "
                     "and 1"):
    blt.blt(output_scale=[0.1, 0.2], buf_decay=[0.5])
  with pytest.raises(ValueError, match=r"buf_decay\[1\] = 1.0"):
    blt.blt(output_scale=[0.1, 0.2], buf_decay=[0.5, 1.0])
  with pytest.raises(ValueError, match="buf_decay must hold distinct"):
    blt.blt(output_scale=[0.1, 0.2], buf_decay=[0.5, 0.5])
  with pytest.raises(ValueError, match="output_scale must be finite"):
    blt.blt(output_scale=[np.nan], buf_decay=[0.5])
