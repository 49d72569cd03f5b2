"""Auditing a DP aggregation in TFF: the noise self-test of any aggregation process.

A canary aggregator's own self-test and the mechanisms' checks (the
correlated family's, distributed DP's) are in `tff_canary.mechanisms`."""
