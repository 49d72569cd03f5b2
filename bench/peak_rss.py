"""Peak resident memory of a set of processes, sampled from /proc (Linux).

round_overhead.py's and flower_overhead.py's `--rss_only` subprocesses: a
thread reads VmRSS of every process `pids()` names every `interval`
seconds and keeps the peak of their sum per phase; the subprocess prints
it as its last line (`print_peak`), which `alone` reads back.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import threading
import time
from typing import Callable, Iterable, Optional


def add_flags(parser: argparse.ArgumentParser, unit: str,
              choices: str) -> None:
  """A bench's `--rss_rounds` and `--rss_only` flags: the rounds each
  `unit` runs alone for its peak RSS, and the internal flag of the
  subprocess that runs one (`choices`: which ones it takes)."""
  parser.add_argument("--rss_rounds", type=int, default=4,
                      help=f"rounds of each {unit} alone for its peak RSS")
  parser.add_argument("--rss_only", default=None,
                      help=f"internal: run only this {unit} ({choices}) "
                      "and print its peak RSS")


LAST_LINE = "peak RSS bytes: "


def print_peak(peak: int) -> None:
  """The `--rss_only` subprocess's last line: its peak RSS in bytes."""
  print(f"{LAST_LINE}{peak}", flush=True)


def alone(script: str, name: str, args: argparse.Namespace,
          flags: Iterable[str]) -> int:
  """The peak RSS in bytes of `script --rss_only name` run alone in a
  subprocess, given `args`' `--rss_rounds` and its values of `flags`."""
  command = [sys.executable, script, "--rss_only", name]
  command += [f"--{flag}={getattr(args, flag)}"
              for flag in ("rss_rounds", *flags)]
  out = subprocess.run(command, capture_output=True, text=True, check=True)
  last = out.stdout.strip().splitlines()[-1]
  if not last.startswith(LAST_LINE):
    raise RuntimeError(f"{script} --rss_only {name}: its last line is "
                       f"{last!r}, not {LAST_LINE!r}N")
  return int(last[len(LAST_LINE):])


def rss_bytes(pid: int) -> int:
  """VmRSS of process `pid` in bytes (0 if it is gone)."""
  try:
    with open(f"/proc/{pid}/status", encoding="ascii") as f:
      for line in f:
        if line.startswith("VmRSS:"):
          return int(line.split()[1]) * 1024
  except (FileNotFoundError, ProcessLookupError):
    pass
  return 0


class PeakSampler:
  """Samples the summed RSS of `pids()`; keeps the peak per phase (none is
  sampled while the phase is None)."""

  def __init__(self, pids: Callable[[], Iterable[int]],
               interval: float = 0.02):
    self._pids, self._interval = pids, interval
    self._phase: Optional[str] = None
    self.peaks: dict[str, int] = {}
    self._stop = threading.Event()
    self._thread = threading.Thread(target=self._run, daemon=True)

  def start(self) -> "PeakSampler":
    self._thread.start()
    return self

  def phase(self, name: Optional[str]) -> None:
    self._phase = name

  def _run(self) -> None:
    while not self._stop.is_set():
      phase = self._phase
      if phase is not None:
        total = sum(rss_bytes(pid) for pid in self._pids())
        self.peaks[phase] = max(self.peaks.get(phase, 0), total)
      time.sleep(self._interval)

  def stop(self) -> None:
    self._stop.set()
    self._thread.join()
