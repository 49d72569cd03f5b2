"""What defines an experiment run, checked before TensorFlow loads (no TF).

`experiment_config.ExperimentConfig` (one field per flag of the experiment
scripts), `preflight` (every refusal that needs no TensorFlow) and
`model_sizes` (the tasks' parameter counts, without building a model).
"""
