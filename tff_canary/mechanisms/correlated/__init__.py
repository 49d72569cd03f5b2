"""What the correlated-noise mechanisms share: their report section.

Per-round scores under a known linear map of independent noises (DP-FTRL's
tree, banded and BLT): `report`, the report section.
"""
