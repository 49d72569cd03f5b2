"""Auditing a DP aggregation in TFF: the noise self-test, and planted DP bugs
with the runs that judge them."""
