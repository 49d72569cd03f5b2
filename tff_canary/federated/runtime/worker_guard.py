"""Keeps TFF's C++ `worker_binary` from outliving Python.

Every execution context of TFF 0.87 runs computations in a child process,
`tensorflow_federated/data/worker_binary`, started with `subprocess.Popen` at
the first computation call, stopped only in a destructor that does not run at
interpreter exit, and inheriting Python's stdout and stderr: left alone, the
worker is orphaned after every script and keeps a pipe open, so
`python train.py | tail` hangs.

`install()` replaces the `subprocess` module seen by TFF's executor factory
(and nothing else) with a proxy whose `Popen` is `GuardedPopen` (a subclass,
because TFF subscripts `subprocess.Popen[bytes]`), which:

  * sends the worker's stdout and stderr to `os.devnull`, or to the file
    named by `$TFF_CANARY_WORKER_LOG`;
  * asks the kernel to SIGKILL the worker when the Python process dies
    (`prctl(PR_SET_PDEATHSIG)` via `setpriv --pdeathsig KILL`), which covers
    `os._exit` and `kill -9` of Python;
  * registers the worker so that `stop_workers()` (also run `atexit`) stops it:
    SIGINT as TFF itself does, then SIGKILL after 5 s. A stopped worker is
    left unreaped (a zombie): TFF still holds its `Popen` and will `os.kill`
    and `wait` it later, and a zombie's pid cannot be reused meanwhile.

At exit the guard also replaces TFF's default execution context, so that
TFF's `ServiceManager` is destroyed (and reaps the zombie) while the
interpreter is intact, not after its module's globals are cleared
("Exception ignored in ... ServiceManager.__del__"). Importing
`tff_canary.federated.insertion.factory`, `canary_process` or `cosine_pass`
installs the guard; scripts that use TFF without them call `install()` before
their first computation. This module imports neither TensorFlow nor TFF
until `install()` is called.
"""

from __future__ import annotations

import atexit
import gc
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
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

  def wait(self, timeout=None):
    """`Popen.wait`, but an unbounded wait on a live worker cannot hang.

    TFF's `ServiceManager.__del__` (run whenever an execution context is
    replaced) sends the worker SIGINT and then waits with no timeout; a
    worker of a process started with SIGINT ignored (any command a
    non-interactive shell runs with `&`) ignores it too. So an unbounded
    wait gives the worker the grace period and then SIGKILLs it.
    """
    if timeout is not None:
      return super().wait(timeout)
    try:
      return super().wait(_GRACE_SECONDS)
    except subprocess.TimeoutExpired:
      self.kill()
      return super().wait()


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


def _has_exited(worker: GuardedPopen) -> bool:
  """True if the worker has exited, without reaping it."""
  if worker.returncode is not None:
    return True
  try:
    info = os.waitid(os.P_PID, worker.pid,
                     os.WEXITED | os.WNOHANG | os.WNOWAIT)
  except ChildProcessError:  # already reaped (by TFF's own wait)
    return True
  return info is not None


def _wait_exit(worker: GuardedPopen, timeout: float) -> bool:
  deadline = time.monotonic() + timeout
  while not _has_exited(worker):
    if time.monotonic() >= deadline:
      return False
    time.sleep(0.02)
  return True


def live_workers() -> list[int]:
  """PIDs of guarded workers that are still running."""
  with _lock:
    return [w.pid for w in _workers if not _has_exited(w)]


def stop_workers() -> None:
  """Stops every guarded worker (SIGINT, then SIGKILL after 5 s), leaving it
  unreaped (module docstring). Safe to call more than once; TFF starts a new
  worker at its next computation if one is needed."""
  with _lock:
    workers = list(_workers)
  for worker in workers:
    if _has_exited(worker):
      continue
    try:
      worker.send_signal(signal.SIGINT)
      if not _wait_exit(worker, _GRACE_SECONDS):
        worker.send_signal(signal.SIGKILL)
        _wait_exit(worker, _GRACE_SECONDS)
    except ProcessLookupError:
      pass


def _release_tff_context() -> None:
  """Replaces TFF's default context so its ServiceManager dies now, not at teardown."""
  if "tensorflow_federated" not in sys.modules:
    return
  try:
    from tensorflow_federated.python.core.impl.context_stack import (  # pylint: disable=g-import-not-at-top
        context_stack_impl, runtime_error_context)
    context_stack_impl.context_stack.set_default_context(
        runtime_error_context.RuntimeErrorContext())
    gc.collect()
  except Exception:  # pylint: disable=broad-except
    pass  # best effort at exit; the workers are already stopped


@atexit.register
def _at_exit() -> None:
  stop_workers()
  _release_tff_context()
