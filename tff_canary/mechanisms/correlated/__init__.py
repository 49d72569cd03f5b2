"""What the correlated-noise mechanisms share: both halves, noise check, planted runs, report section.

Per-round scores under a known linear map of independent noises (DP-FTRL's
tree, banded and BLT): `spec` (`CorrelatedMechanism`: requirements, round
records, reach), `tff` (`CorrelatedTff`: a round's scores, the noise
check's period), `noise_check` (the self-test of their noise), `planted`
(their planted-bug runs) and `report`, the report section. The tree and the matrix
mechanisms compose it; neither subclasses the other's halves.
"""
