"""Reporting a run: the report around its mechanism's section, and the headline (no TF).

`report.build_report(run_dir)` and `report.write_report`; `python -m
tff_canary report RUN_DIR` does both.
"""
