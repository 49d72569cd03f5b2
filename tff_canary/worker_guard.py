"""Keeps TFF's C++ `worker_binary` from outliving Python.

Every execution context of TFF 0.87 runs computations in a child process,
`tensorflow_federated/data/worker_binary`, started with `subprocess.Popen` at the
first computation call. TFF stops it only in a destructor that does not run at
interpreter exit, and the child inherits Python's stdout and stderr. Left alone,
the worker is orphaned after every script and keeps a pipe open, so
`python train.py | tail` hangs.

`install()` replaces the `subprocess` module seen by TFF's executor factory
(and nothing else) with a proxy whose `Popen` is `GuardedPopen`, a subclass
that:

  * sends the worker's stdout and stderr away from the parent's (to
    `os.devnull`, or to the file named by `$TFF_CANARY_WORKER_LOG`);
  * asks the kernel to SIGKILL the worker when the Python process dies
    (`prctl(PR_SET_PDEATHSIG)` via `setpriv --pdeathsig KILL`), which covers
    `os._exit` and `kill -9` of Python;
  * registers the worker so that `stop_workers()` (also run `atexit`) stops it:
    SIGINT as TFF itself does, then SIGKILL if it has not exited in 5 s.

It must be a `subprocess.Popen` subclass because TFF subscripts
`subprocess.Popen[bytes]`. Importing `tff_canary.factory` or
`tff_canary.hooks` installs the guard; scripts that use TFF without them call
`install()` before their first computation. This module imports neither
TensorFlow nor TFF until `install()` is called.
"""

from __future__ import annotations

import atexit
import os
import shutil
import signal
import subprocess
import threading
import types

_GRACE_SECONDS = 5.0
_LOG_ENV = "TFF_CANARY_WORKER_LOG"

_lock = threading.Lock()
_workers: list["GuardedPopen"] = []


class GuardedPopen(subprocess.Popen):
  """`subprocess.Popen` for TFF workers: quiet, tied to the parent, stoppable."""

  def __init__(self, args, stdout=None, stderr=None, **kwargs):
    del stdout, stderr  # TFF passes Python's own streams; never inherit them.
    args = list(args)
    setpriv = shutil.which("setpriv")
    if setpriv is not None:
      args = [setpriv, "--pdeathsig", "KILL", "--"] + args
    log_path = os.environ.get(_LOG_ENV)
    log = open(log_path, "ab") if log_path else subprocess.DEVNULL
    try:
      super().__init__(
          args,
          stdin=subprocess.DEVNULL,
          stdout=log,
          stderr=log,
          **kwargs,
      )
    finally:
      if log_path:
        log.close()
    with _lock:
      _workers.append(self)


class _SubprocessProxy(types.ModuleType):
  """The `subprocess` module with `Popen` replaced by `GuardedPopen`."""

  Popen = GuardedPopen

  def __getattr__(self, name):
    return getattr(subprocess, name)


def install() -> None:
  """Guards every TFF worker started from now on. Idempotent.

  Workers that TFF started before this call are not guarded, so call it before
  the first TFF computation.
  """
  from tensorflow_federated.python.core.impl.executor_stacks import (  # pylint: disable=g-import-not-at-top
      executor_factory,
  )

  if not isinstance(executor_factory.subprocess, _SubprocessProxy):
    executor_factory.subprocess = _SubprocessProxy("subprocess")


def live_workers() -> list[int]:
  """PIDs of guarded workers that are still running."""
  with _lock:
    return [w.pid for w in _workers if w.poll() is None]


def stop_workers() -> None:
  """Stops every guarded worker (SIGINT, then SIGKILL after 5 s) and reaps it.

  Safe to call more than once. TFF starts a new worker at its next computation
  if one is needed.
  """
  with _lock:
    workers = list(_workers)
    _workers.clear()
  for worker in workers:
    if worker.poll() is not None:
      continue
    try:
      worker.send_signal(signal.SIGINT)
      worker.wait(timeout=_GRACE_SECONDS)
    except subprocess.TimeoutExpired:
      worker.kill()
      worker.wait()
    except ProcessLookupError:
      pass


atexit.register(stop_workers)
