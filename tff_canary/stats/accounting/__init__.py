"""Analytical epsilon: the Gaussian mechanism, Poisson sampling, adaptive
clipping, distributed DP, and a run's ledger of DpEvents."""
