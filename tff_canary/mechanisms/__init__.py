"""The DP mechanisms a run can audit: one package each, behind one registry.

A mechanism is a package (`gaussian`, `ddp`, `tree`, `banded`, `blt`), named
in `registry.MECHANISMS`: its NumPy half `spec.py` (a `protocol.Mechanism`:
settings, requirements, claim, report section; no TensorFlow), its framework
halves by framework (`tff.py`, a `protocol_tff.TffMechanism`), its
aggregation or query, its noise check and its planted bugs
(docs/guide/mechanisms.md). Beside them, what several share: the protocols
(`protocol`, `protocol_tff`), the run's loaded records (`records`), a report
section's words for the headline (`section`), the epsilons figure
(`epsilon_plot`), the planted runs' model (`planted_model`), and two
families: `cosine` (the final-model and all-iterates cosine audit of
DP-FedAvg and distributed DP) and `correlated` (per-round scores under a
known linear map of independent noises: DP-FTRL's tree, banded and BLT, the
last two through `matrix`).

Layer: above `tff_canary.stats` and `tff_canary.federated`, below
`tff_canary.harness` (tests/project/test_layers.py).
"""
