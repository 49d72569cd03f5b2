"""The TFF half of tests/mechanism_example.py: DP-FedAvg's aggregators as they are."""

from tff_canary.harness.running import gaussian_tff

TFF_MECHANISM = gaussian_tff.GaussianTff()
