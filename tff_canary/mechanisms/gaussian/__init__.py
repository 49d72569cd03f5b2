"""DP-FedAvg's Gaussian mechanism, the default: its NumPy and TFF halves and planted bugs.

`spec` (NumPy half), `tff` (TFF half), `planted` (its planted-bug runs) and
`planted_bugs` (the bugs, as a user would write them).
"""
