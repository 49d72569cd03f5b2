"""The experiment harness: what defines a run, running it, recording it, reporting it.

`config` (what defines a run, no TensorFlow), `running` (the experiment
runner, data, model, rounds), `recording` (the run directory and the writers
of a TFF loop) and `reporting` (every epsilon, the audit, the headline and
plots, no TensorFlow). Imports both other layers; the command-line flags
live in `experiments/`.
"""
