"""The experiment harness: the experiment runner, tasks, data, the run
directory, reports and plots.

Imports both other layers; the command-line flags live in `experiments/`.
"""
