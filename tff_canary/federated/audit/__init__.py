"""Auditing a DP aggregation in TFF: the noise self-tests (Gaussian, DP-FTRL
tree and distributed DP), and planted DP bugs as a user would write them."""
