"""Reporting a run: every epsilon, the audit, the headline, the plots (no TF).

`report.build_report(run_dir)` and `report.write_report`; `python -m
tff_canary report RUN_DIR` does both.
"""
