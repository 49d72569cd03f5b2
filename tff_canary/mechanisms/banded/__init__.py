"""Banded DP-FTRL (a banded matrix mechanism): its NumPy and TFF halves.

`spec` and `tff`, over `tff_canary.mechanisms.matrix`.
"""
