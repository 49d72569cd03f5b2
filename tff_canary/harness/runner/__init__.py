"""The experiments' runner: training with canaries, its rounds, the planted-bug runs (TF).

`experiment.run_experiment` is the experiment scripts' runner: it loads the
data and the model (`tff_canary.harness.data`), builds the process
(`dp_fedavg`, canary clients through `client_insertion`) and trains
(`training`, resumable by `resume`), writing a run directory
(`tff_canary.harness.writing`). `planted_bug_runs.run` trains one run per
planted DP bug.
"""
