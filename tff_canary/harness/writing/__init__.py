"""Writing a run: any TFF loop's `RunWriter`, its release manager, the run's results (TF).

`run_writer.RunWriter` and `release_manager.CanaryReleaseManager` record a
user's own TFF loop (what the loop is: `loop_settings`; what a round
reports: `round_metrics`); `run_results` turns a finished run into its
cosine table and report. They write the run directory's files
(`tff_canary.harness.recording`) and end with its report
(`tff_canary.harness.reporting`).
"""
