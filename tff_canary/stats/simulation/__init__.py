"""NumPy simulators of the Gaussian mechanism and of DP round pipelines with
canaries (for validity and power studies)."""
