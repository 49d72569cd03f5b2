"""Runs TFF computations to plain values in any context a user's loop uses.

The noise self-tests (`tff_canary.federated.audit.noise_check`,
`tree_noise_check`, `ddp_noise_check`) call a fresh aggregation process a
few times and read its state and results as numbers. That works in TFF's
default synchronous context and in the mergeable (multi-worker) one, but
not in the contexts of TFF's program loops:

  * `tff.program.NativeFederatedContext` (what `tff.learning.programs.
    train_model` is run under) returns value references that are
    materialized asynchronously; called outside a running event loop it
    fails with `RuntimeError: no running event loop`, and inside one it
    hands back references where numbers are expected;
  * an asynchronous execution context (`tff.backends.native.
    create_async_local_cpp_execution_context`, installed directly) returns
    coroutines.

`synchronous()` keeps a synchronous context that is not a program context
(TFF's default, the mergeable one), and otherwise installs a private
synchronous local context (`tff.backends.native.
create_sync_local_cpp_execution_context`) for its block only: the context
stack's `install` restores the user's context when the block ends, and TFF's
globals are never replaced. The private context's `worker_binary` is
guarded (`worker_guard`) and stopped when the block ends. A synchronous
context runs its computations on its own event loop, so the block also works
when called from a coroutine inside a running asyncio loop.
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
