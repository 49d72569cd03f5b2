"""Data and tasks: the experiments' federated datasets and models (TF).

`datasets` (built-in synthetic data, TFF's own EMNIST and StackOverflow),
`synthetic` (the generative models of the synthetic data) and `tasks` (the
paper's two tasks, built with TFF's own baselines).
"""
