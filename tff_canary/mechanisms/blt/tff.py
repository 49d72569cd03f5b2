"""BLT DP-FTRL's TFF half: the matrix mechanisms' (`tff_canary.mechanisms.matrix.tff`)."""

from tff_canary.mechanisms.matrix import tff as matrix_tff

TFF_MECHANISM = matrix_tff.TFF_MECHANISM
