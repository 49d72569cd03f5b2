"""The TFF half of tests/mechanism_example: DP-FedAvg's aggregators as they are."""

from tff_canary.mechanisms.gaussian import tff as gaussian_tff

TFF_MECHANISM = gaussian_tff.GaussianTff()
