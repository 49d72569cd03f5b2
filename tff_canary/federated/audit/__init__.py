"""Auditing a DP aggregation in TFF: the noise self-tests (Gaussian and DP-FTRL
tree), and planted DP bugs with the runs that judge them."""
