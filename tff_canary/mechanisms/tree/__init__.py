"""DP-FTRL's tree aggregation: its query, its NumPy and TFF halves and planted bugs.

`aggregation` (the query, `TreeAggregation`, and its canary aggregators,
`tree_aggregation` and `tree_adaptive`), `spec` (NumPy half), `tff` (TFF
half), `planted` and `planted_bugs`.
"""
