"""The experiment harness: what defines a run, its mechanism, running, recording and reporting it.

`config` (what defines a run, no TensorFlow), `mechanisms` (the DP
mechanisms, one module each behind one registry; no TensorFlow), `running`
(the experiment runner, data, model, rounds, a user loop's writer and the
mechanisms' TFF halves), `recording` (the run directory, no TensorFlow) and
`reporting` (every epsilon, the audit, the headline and plots, no
TensorFlow). Imports both other layers; the command-line flags live in
`experiments/`.
"""
