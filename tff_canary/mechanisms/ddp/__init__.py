"""TFF's distributed DP (discrete Gaussian or Skellam under SecAgg) as one package.

`spec` (NumPy half), `claim` (its bound), `tff` (TFF half), `chain` (TFF's
DDP chain from its parts), `noise_check`, `planted` and `planted_bugs`.
"""
