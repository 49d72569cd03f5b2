"""Peak resident memory of a set of processes, sampled from /proc (Linux).

round_overhead.py's and flower_overhead.py's `--rss_only` subprocesses: a
thread reads VmRSS of every process `pids()` names every `interval`
seconds and keeps the peak of their sum per phase.
"""

from __future__ import annotations

import argparse
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
