"""The machine's live processes, and those a test started (its leftovers).

`started_since(before, session)` is what a test that starts Ray or a
Flower SuperLink checks at its end: the processes not in `before` that are
its own (tests/mechanisms/gaussian/test_flower_simulation.py shows the
check can fail). Read from /proc (Linux).
"""

from __future__ import annotations

import os
import time


def processes() -> dict[int, tuple[str, int, str, int]]:
  """pid -> (name, session id, command line, parent pid) of every live
  process, from /proc (zombies left out: they are gone, only not yet
  reaped)."""
  found = {}
  for entry in os.listdir("/proc"):
    if not entry.isdigit():
      continue
    try:
      with open(f"/proc/{entry}/stat", encoding="utf-8") as f:
        stat = f.read()
      with open(f"/proc/{entry}/cmdline", "rb") as f:
        cmdline = f.read().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
      continue
    fields = stat[stat.rindex(")") + 2:].split()
    if fields[0] != "Z":
      found[int(entry)] = (stat[stat.index("(") + 1:stat.rindex(")")],
                           int(fields[3]), cmdline, int(fields[1]))
  return found


def started_since(before, session: int) -> list[tuple[int, str]]:
  """The live processes that were not in `before` and are this test's:
  this process's descendants, and orphans (parent init) of its session or
  of Ray (whose actors outlive their raylet for a moment, orphaned to init,
  and may leave the session). Not the other xdist worker's children, which
  share the session (a `python -m tff_canary report` of
  test_install_without_tf was once taken for this test's)."""
  live = processes()

  def ours(pid):
    while pid > 1 and pid in live:
      if pid == os.getpid():
        return True
      pid = live[pid][3]
    return False

  def ray(name, cmdline):
    return ("ray" in name.lower() or "ray::" in cmdline or "raylet" in cmdline
            or "gcs_server" in cmdline)

  return [(pid, cmdline[:80]) for pid, (name, sid, cmdline, parent)
          in live.items()
          if pid not in before and pid != os.getpid()
          and (ours(pid) or (parent == 1 and (sid == session
                                              or ray(name, cmdline))))]


def left_after(before, session: int, seconds: float = 30.0
               ) -> list[tuple[int, str]]:
  """`started_since(before, session)` once it is empty or `seconds` have
  passed: Ray's actors outlive ray.shutdown() by a few seconds, orphaned,
  so a Ray test waits for them before it counts its leftovers."""
  deadline = time.monotonic() + seconds
  while (left := started_since(before, session)) and (
      time.monotonic() < deadline):
    time.sleep(0.5)
  return left


__all__ = ["left_after", "processes", "started_since"]
