"""The experiment harness: what defines a run, its data, training, writing, recording and reporting it.

`config` (what defines a run, no TensorFlow), `data` (datasets and tasks),
`runner` (the experiments' runner and its rounds, the planted-bug runs),
`writing` (a TFF loop's `RunWriter`, the release manager, a run's results),
`recording` (the run directory's files, no TensorFlow) and `reporting` (the
report around the mechanism's section, the headline; no TensorFlow). The
DP mechanisms are `tff_canary.mechanisms`, a layer below. Imports the other
layers; the command-line flags live in `experiments/`.
"""
