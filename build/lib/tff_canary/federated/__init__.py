"""The TFF integration: the canary aggregator, canary directions, recording,
cosines after training, the noise self-test and the worker guard.

Imports `tff_canary.stats`, never `tff_canary.harness`. Needs the `tff` extra
(`pip install .[tff]`, or `./install.sh`).
"""
