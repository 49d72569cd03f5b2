"""The DP mechanisms a run can audit, each its own module, behind one registry.

The NumPy halves (`protocol.Mechanism`; no TensorFlow) behind
`registry.MECHANISMS` (docs/guide/mechanisms.md), and the claims they share:
`analytical_epsilons` (a DpEvent ledger's), `canary_claim` (which epsilon
the canaries face), `ddp_claim` (the DDP bound).
"""
