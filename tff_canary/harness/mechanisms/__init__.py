"""The DP mechanisms a run can audit, each its own module, behind one registry.

`registry.MECHANISMS` names them ("gaussian": DP-FedAvg's Gaussian noise,
"ddp": TFF's distributed DP, "tree": DP-FTRL) and is the only place their
names are spelled. Each is a `protocol.Mechanism` (its NumPy half: its
settings, requirements and claim; no TensorFlow) with a TFF half in
`tff_canary.harness.running` (`mechanism_tff.TffMechanism`). The claims
they share: `analytical_epsilons` (a DpEvent ledger's), `canary_claim`
(which epsilon the canaries face), `ddp_claim` (the DDP bound).
"""
