"""A test mechanism, a package as every mechanism is: `spec` (its NumPy
half) and `tff` (its TFF half), registered by one line in
`registry.MECHANISMS` (tests/mechanisms/test_registry.py)."""
