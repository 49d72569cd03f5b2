"""Reporting a run: every epsilon, the audit, the headline, the plots (no TF).

`report.build_report(run_dir)` reads a run directory
(`tff_canary.harness.recording.run_dir`) and `report.write_report` writes
report.json, report.md and the plots; `python -m tff_canary report RUN_DIR`
does both without TensorFlow.
"""
