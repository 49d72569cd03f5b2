"""Running training with canaries: the experiments' runner and your own loop's writer (TF).

`experiment.run_experiment` is the experiment scripts' runner: it loads the
data (`datasets`, `synthetic`) and the model (`tasks`), builds the process
(`dp_fedavg`, canary clients through `client_insertion`), trains
(`training`, resumable by `resume`). `run_writer.RunWriter` and
`release_manager.CanaryReleaseManager` record a user's own TFF loop. Both
write a run directory (`tff_canary.harness.recording`) and end with its
report (`tff_canary.harness.reporting`).
"""
