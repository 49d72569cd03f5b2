"""Runs TFF computations to plain values in any context a user's loop uses.

The noise self-tests call a fresh aggregation process a few times and read
its state and results as numbers (docs/guide/drop-in.md). That works in TFF's
default synchronous context and in the mergeable (multi-worker) one, but not
in `tff.program.NativeFederatedContext` (value references materialized
asynchronously: `RuntimeError: no running event loop` outside an event loop,
references where numbers are expected inside one) nor in an asynchronous
execution context (coroutines). `synchronous()` keeps a synchronous,
non-program context, and otherwise installs a private synchronous local
context (`tff.backends.native.create_sync_local_cpp_execution_context`) for
its block only: the context stack's `install` restores the user's context,
TFF's globals are never replaced, and the private context's guarded
`worker_binary` is stopped when the block ends. It runs its computations on
its own event loop, so the block also works inside a running asyncio loop.
"""

from __future__ import annotations

import contextlib
import gc
from typing import Any, Iterator

import tensorflow_federated as tff

from tff_canary.federated.runtime import worker_guard

worker_guard.install()


def needs_private_context(context: Any) -> bool:
  """True unless `context` is synchronous and not a program context."""
  return (not isinstance(context, tff.framework.SyncContext)
          or isinstance(context, tff.program.FederatedContext))


@contextlib.contextmanager
def synchronous() -> Iterator[Any]:
  """A block whose TFF computation calls return plain values (module doc).

  Yields:
    The context the block's calls run in.
  """
  stack = tff.framework.get_context_stack()
  if not needs_private_context(stack.current):
    yield stack.current
    return
  context = tff.backends.native.create_sync_local_cpp_execution_context()
  try:
    with stack.install(context):
      yield context
  finally:
    # Unreferenced, the context's executor stops its worker now rather than
    # at interpreter teardown.
    del context
    gc.collect()


__all__ = ["needs_private_context", "synchronous"]
