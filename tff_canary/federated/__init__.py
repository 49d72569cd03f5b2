"""The TFF integration: the canary aggregator, canary directions, recording,
cosines after training, the noise self-test, the worker guard and TFF's
multi-worker runtime.

Imports `tff_canary.stats`, never `tff_canary.harness`. Needs the `tff` extra
(`pip install .[tff]`, or `./install.sh`).
"""
