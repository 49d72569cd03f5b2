"""Command line of tff-canary (no TensorFlow needed).

  python -m tff_canary report RUN_DIR [--delta D] [--confidence C]
                                      [--claimed_epsilon E] [--no_plots]
                                      [--details] [--output_dir DIR]

recomputes every estimate of a finished run and rewrites its report
(docs/guide/report.md, "Recompute it"). A plain `pip install .` (no
TensorFlow, no matplotlib) runs it with --no_plots; the plots come with
the `plots` extra. The package's warnings are printed as one line each,
`warning: <message>` (`call_site.line_showwarning`).
"""

from __future__ import annotations

import argparse
import importlib.util
import sys
import warnings

from tff_canary.federated.runtime import quiet_start
from tff_canary.harness.reporting import report as report_lib
from tff_canary.harness.recording import run_dir as run_dir_lib
from tff_canary.stats import call_site


def _parser() -> argparse.ArgumentParser:
  parser = argparse.ArgumentParser(
      prog="python -m tff_canary",
      description="tff-canary: empirical privacy of a DP-FedAvg run.")
  commands = parser.add_subparsers(dest="command", required=True)
  rep = commands.add_parser(
      "report", help="recompute every estimate of a run and rewrite its report")
  rep.add_argument("run_dir", help="a run directory (experiments/ or a RunWriter)")
  rep.add_argument("--delta", type=float, default=None,
                   help="delta of every epsilon (default: the run's)")
  rep.add_argument("--confidence", type=float, default=0.95,
                   help="confidence of intervals, bounds and the audit")
  rep.add_argument("--claimed_epsilon", type=float, default=None,
                   help="epsilon to audit (default: the run's analytical one)")
  rep.add_argument("--no_plots", action="store_true",
                   help="draw no plots (and remove the report's old ones)")
  rep.add_argument("--details", action="store_true",
                   help="print every epsilon, bound and note after the "
                   "headline")
  rep.add_argument("--output_dir", default=None,
                   help="write the report here instead of into RUN_DIR")
  return parser


def main(argv=None) -> int:
  show = warnings.showwarning
  warnings.showwarning = call_site.line_showwarning(show)
  try:
    return _report(argv)
  finally:  # main() called in a test's process: its hook back
    warnings.showwarning = show


def _report(argv) -> int:
  quiet_start.quiet_tensorflow()  # should a report path ever load TensorFlow
  args = _parser().parse_args(argv)
  if not args.no_plots and importlib.util.find_spec("matplotlib") is None:
    # A plain `pip install .` has no matplotlib: say how to get the plots
    # before any work is done, and write nothing.
    print("error: the plots need matplotlib, which is not installed: "
          "pip install 'tff-canary[plots]', or pass --no_plots",
          file=sys.stderr)
    return 2
  try:
    report = report_lib.build_report(
        args.run_dir, delta=args.delta, confidence=args.confidence,
        claimed_epsilon=args.claimed_epsilon)
    written = report_lib.write_report(report, plots=not args.no_plots,
                                      output_dir=args.output_dir)
  except (run_dir_lib.RunDirError, ValueError, TypeError) as e:
    print(f"error: {e}", file=sys.stderr)
    return 2
  print(report.terminal_text(details=args.details))
  print(f"wrote {', '.join(written)}")
  return 0


if __name__ == "__main__":
  sys.exit(main())
