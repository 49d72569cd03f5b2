"""BLT DP-FTRL (a buffered linear Toeplitz matrix mechanism): its two halves.

`spec` and `tff`, over `tff_canary.mechanisms.matrix`.
"""
