"""What defines an experiment run, checked before TensorFlow loads (no TF).

`experiment_config.ExperimentConfig` (one field per flag of the experiment
scripts), `preflight` (every refusal that needs no TensorFlow),
`model_sizes` (the tasks' parameter counts, without building a model) and
`run_settings` (the parts of a checked config that a run's steps take).
"""
