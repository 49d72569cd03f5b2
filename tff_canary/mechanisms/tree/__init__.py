"""DP-FTRL's tree aggregation: its NumPy and TFF halves and planted bugs.

`spec` (NumPy half), `tff` (TFF half), `planted` and `planted_bugs`.
"""
