"""tff-canary: how much privacy a DP-FedAvg run really leaks, from that run."""

__version__ = "0.1.0"
