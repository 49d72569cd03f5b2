"""The BLT fit: its objective against dense matrices, its result against known optima.

For one participation the full square root is the optimal Toeplitz strategy
for the max error (Dvijotham et al. 2024, arXiv 2404.16706), so a fitted BLT
can only approach its loss from above; a few buffers get within a fraction
of a percent (measured 0.004% with 3 buffers at n = 64). Under several
participations the square root is no longer optimal and the fit beats it.
"""

import numpy as np
import pytest

from tff_canary.stats.matrix import blt, blt_fit, toeplitz


@pytest.mark.parametrize("coefficients", [
    toeplitz.square_root_coefficients(3),
    blt.blt([0.3, 0.1], [0.5, 0.95]).coefficients(12),
])
def test_max_error_is_the_largest_row_of_the_dense_prefix_sum_noise(
    coefficients):
  n = 12
  prefix_noise = np.tril(np.ones((n, n))) @ toeplitz.noise_matrix(
      coefficients, n)
  assert blt_fit.max_error(coefficients, n) == pytest.approx(
      np.max(np.sum(prefix_noise**2, axis=1)), rel=1e-12)


def test_one_participation_fit_approaches_the_square_root():
  n = 64
  optimum = blt_fit.max_loss(toeplitz.square_root_coefficients(n), rounds=n,
                             participations=1, separation=n)
  fit = blt_fit.fit_blt(rounds=n, participations=1, separation=n,
                        num_buffers=3, starts=1)
  # Never below the optimum (up to rounding); 0.5% is >100x the measured gap.
  assert optimum * (1 - 1e-9) <= fit.loss <= 1.005 * optimum
  assert fit.loss == pytest.approx(
      blt_fit.max_loss(fit.strategy.coefficients(n), rounds=n,
                       participations=1, separation=n), rel=1e-12)


def test_multi_participation_fit_beats_the_square_roots():
  n, k, b = 256, 4, 64
  fit = blt_fit.fit_blt(rounds=n, participations=k, separation=b,
                        num_buffers=2, starts=1)
  assert fit.sensitivity.method == "structure"  # positive, non-increasing
  assert np.flatnonzero(fit.sensitivity.pattern).tolist() == [0, 64, 128, 192]
  for bands in (16, n):
    square_root = blt_fit.max_loss(toeplitz.square_root_coefficients(bands),
                                   rounds=n, participations=k, separation=b)
    assert fit.loss < 0.97 * square_root, bands  # measured 46.7 vs 49.5, 109


def test_a_two_round_fit_of_three_buffers_is_the_optimum():
  # Two rounds, one participation: only c_1 matters, and the loss (1 + (1 -
  # c_1)^2) (1 + c_1^2) is least at c_1 = 1/2 (symmetric about it). The
  # start's decays were once all 0.5 (1 - 1/n at n = 2), which the flat
  # loss left equal: a degenerate BLT, refused, on some machines.
  fit = blt_fit.fit_blt(rounds=2, participations=1, separation=2,
                        num_buffers=3)
  assert len(set(fit.strategy.buf_decay)) == 3
  assert fit.strategy.coefficients(2)[1] == pytest.approx(0.5, abs=1e-6)


def test_bad_fit_arguments_are_refused_by_name():
  with pytest.raises(ValueError, match="num_buffers must be at least 1"):
    blt_fit.fit_blt(rounds=8, participations=1, separation=8, num_buffers=0)
