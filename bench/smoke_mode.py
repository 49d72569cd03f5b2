"""`--smoke` for the benches: the same command at tiny sizes, in seconds.

A bench measures for minutes or hours; `--smoke` runs its code at tiny sizes
so that a command the docs cite cannot rot (tests/project/test_smoke.py runs every
bench with it). The tiny sizes replace the defaults only, so flags given on
the command line still apply and `CMD --smoke` takes CMD's code path. The
numbers a smoke run prints mean nothing.
"""

from __future__ import annotations

import argparse
from typing import Any, Optional, Sequence


def parse_args(parser: argparse.ArgumentParser,
               argv: Optional[Sequence[str]], sizes: dict[str, Any],
               what: str) -> argparse.Namespace:
  """Adds `--smoke` to `parser` and parses `argv`, with `sizes` as the
  defaults under `--smoke`.

  Args:
    parser: the bench's parser, every other flag defined.
    argv: the command line (None: sys.argv[1:]).
    sizes: {flag's dest: its smoke default}.
    what: what the smoke run does, for `--help` (e.g. "one trial per
      setting, 100 candidates").
  """
  parser.add_argument("--smoke", action="store_true",
                      help=f"{what}, seconds: checks that the command runs "
                      "(flags given explicitly still apply); not the "
                      "benchmark")
  args = parser.parse_args(argv)
  if args.smoke:
    parser.set_defaults(**sizes)
    args = parser.parse_args(argv)
  return args
