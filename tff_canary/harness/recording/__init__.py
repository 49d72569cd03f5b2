"""Recording a run: the run directory's files, their validated loading and saving (no TF).

`run_dir.RunDir`; what writes a run directory is in
`tff_canary.harness.writing` and `tff_canary.harness.runner`, what reports
it in `tff_canary.harness.reporting`.
"""
