"""The statistics layer: cosines in, epsilons out. NumPy, SciPy, dp-accounting.

Nothing here imports TensorFlow, TFF or anything from `tff_canary.federated` /
`tff_canary.harness` (tests/project/test_layers.py checks it), so this layer installs
with a plain `pip install .` and serves cosines or scores from any framework.
"""
