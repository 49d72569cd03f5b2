"""Recording a run: the run directory's files, their validated loading and saving (no TF).

`run_dir.RunDir` is the run directory's format; what writes it (the
experiments' runner, a user loop's `RunWriter`, `CanaryReleaseManager`) is
in `tff_canary.harness.running`, and what reads it into a report in
`tff_canary.harness.reporting`.
"""
