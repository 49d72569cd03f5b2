"""What banded and BLT DP-FTRL share: the matrix mechanisms' halves and bugs.

`spec` (NumPy half), `aggregation` and `query` (TFF), `tff` (TFF half),
`planted` and `planted_bugs`.
"""
