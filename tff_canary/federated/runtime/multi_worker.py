"""TFF's multi-worker runtime: start `worker_binary` servers, run on them.

docs/guide/scaling.md ("TFF's multi-worker runtime"): a mergeable context
splits the clients among C++ workers serving TFF's executor protocol over
gRPC (one subround per worker) and merges the partial aggregates. This
module starts workers on this machine (`local_workers`, at 127.0.0.1) and
connects to any `host:port` (`mergeable_context`); install the context for
a block with `tff.framework.get_context_stack().install(context)`.

It relies on TFF 0.87's public API only: the `worker_binary` shipped in the
package (the file TFF's local runtime starts) and its flags; the remote
executors, `tff.framework.AsyncExecutionContext` and
`tff.backends.native.create_mergeable_comp_execution_context`, built as
TFF's own local runtime builds them.

The workers started here are `worker_guard.GuardedPopen` processes;
`local_workers` also stops them itself (SIGTERM, then SIGKILL) and reaps them
when its block ends, normally, on an exception or on Ctrl-C. SIGTERM rather
than TFF's SIGINT: a process started in the background by a shell script
ignores SIGINT, and so do its children. A worker listens on every interface
of its machine (the binary has no flag to choose one) and serves anyone who
connects: keep its ports behind a firewall.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import socket
import subprocess
import time
from typing import Any, Iterator, Sequence

import grpc
import tensorflow_federated as tff

from tff_canary.federated.runtime import worker_guard
from tff_canary.stats import validation

# Messages of up to 2 GB each way, as TFF's own local runtime allows.
_MAX_MESSAGE_MEGABYTES = 2000
_CHANNEL_OPTIONS = [
    ("grpc.max_message_length", _MAX_MESSAGE_MEGABYTES * 2**20),
    ("grpc.max_receive_message_length", _MAX_MESSAGE_MEGABYTES * 2**20),
    ("grpc.max_send_message_length", _MAX_MESSAGE_MEGABYTES * 2**20),
]
_START_ATTEMPTS = 3  # a free port can be taken between picking and binding
_GRACE_SECONDS = 5.0
_HOST = "127.0.0.1"


def worker_binary_path() -> str:
  """The `worker_binary` shipped in the tensorflow_federated package."""
  path = os.path.join(os.path.dirname(tff.__file__), "data", "worker_binary")
  if not os.path.isfile(path):
    raise RuntimeError(f"no TFF worker_binary at {path}.")
  return path


@dataclasses.dataclass(frozen=True)
class Worker:
  """One running `worker_binary`: its process and where it listens."""

  process: subprocess.Popen
  port: int

  @property
  def pid(self) -> int:
    return self.process.pid

  @property
  def address(self) -> str:
    return f"{_HOST}:{self.port}"


def _free_port() -> int:
  with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
    s.bind((_HOST, 0))
    return s.getsockname()[1]


def _channel(address: str) -> grpc.Channel:
  return grpc.insecure_channel(address, _CHANNEL_OPTIONS)


def _wait_ready(process: subprocess.Popen, address: str,
                timeout: float) -> bool:
  """True once the worker serves gRPC; False if it exited first."""
  channel = _channel(address)
  ready = grpc.channel_ready_future(channel)
  deadline = time.monotonic() + timeout
  try:
    while True:
      try:
        ready.result(timeout=0.1)
        return True
      except grpc.FutureTimeoutError:
        if process.poll() is not None:
          return False
        if time.monotonic() >= deadline:
          raise TimeoutError(
              f"worker_binary pid {process.pid} did not serve {address} "
              f"within {timeout} s.") from None
  finally:
    ready.cancel()
    channel.close()


def start_worker(startup_timeout: float = 60.0) -> Worker:
  """Starts one `worker_binary` on a free port and returns its `Worker` once
  it serves, within `startup_timeout` seconds; stop it with `stop_workers`.

  Raises:
    RuntimeError: if the worker exits at start (three times, each on a new
      port).
    TimeoutError: if it does not serve within `startup_timeout`.
  """
  startup_timeout = validation.as_positive(startup_timeout, "startup_timeout")
  binary = worker_binary_path()
  for _ in range(_START_ATTEMPTS):
    port = _free_port()
    process = worker_guard.GuardedPopen([
        binary, f"--port={port}", "--max_concurrent_computation_calls=-1",
        f"--grpc_max_message_length_megabytes={_MAX_MESSAGE_MEGABYTES}"])
    worker = Worker(process, port)
    try:
      if _wait_ready(process, worker.address, startup_timeout):
        return worker
    except BaseException:
      stop_workers([worker])
      raise
    process.wait()
  raise RuntimeError(f"worker_binary exited at start {_START_ATTEMPTS} times "
                     f"(last exit code {process.returncode}); set "
                     "$TFF_CANARY_WORKER_LOG to a file to see its output.")


def stop_workers(workers: Sequence[Worker]) -> None:
  """Stops and reaps `workers`: SIGTERM, then SIGKILL after 5 s."""
  for worker in workers:
    process = worker.process
    if process.poll() is not None:
      continue
    try:
      process.terminate()
      process.wait(timeout=_GRACE_SECONDS)
    except subprocess.TimeoutExpired:
      process.kill()
      process.wait()


@contextlib.contextmanager
def local_workers(num_workers: int = 2, startup_timeout: float = 60.0
                  ) -> Iterator[list[Worker]]:
  """Yields `num_workers` (>= 1) running `Worker`s on this machine for the
  `with` block (`start_worker(startup_timeout)`); every worker started is
  stopped and reaped when the block ends (module docstring), also if
  starting a later worker fails."""
  num_workers = validation.as_int(num_workers, "num_workers", minimum=1)
  workers = []
  try:
    for _ in range(num_workers):
      workers.append(start_worker(startup_timeout))
    yield workers
  finally:
    stop_workers(workers)


def _remote_executor_factory(address: str):
  """Executors on the worker at `address`, one per cardinality (as TFF's)."""

  def stack_fn(cardinalities):
    # As TFF's local factory: without it, a computation with no client-placed
    # argument (`initialize`) fails, "No cardinality provided for clients".
    cardinalities.setdefault(tff.CLIENTS, 0)
    stub = tff.framework.RemoteExecutorGrpcStub(_channel(address))
    executor = tff.framework.RemoteExecutor(stub)
    executor.set_cardinalities(cardinalities)
    return executor

  return tff.framework.ResourceManagingExecutorFactory(stack_fn)


def async_remote_context(address: str) -> tff.framework.AsyncExecutionContext:
  """An async TFF context that runs computations on the worker at `address`
  (as `tff.backends.native.create_async_local_cpp_execution_context`)."""
  address = _check_address(address, "address")
  return tff.framework.AsyncExecutionContext(
      executor_fn=_remote_executor_factory(address),
      compiler_fn=tff.backends.native.desugar_and_transform_to_native,
      transform_args=tff.tensorflow.transform_args,
      transform_result=tff.tensorflow.transform_result)


def mergeable_context(
    addresses: Sequence[str]) -> tff.framework.MergeableCompExecutionContext:
  """A context that splits each computation's clients among the workers.

  Args:
    addresses: "host:port" of each running worker (at least one).

  Returns:
    The context; use it with `tff.framework.get_context_stack().install`.
  """
  if isinstance(addresses, str) or not isinstance(addresses, Sequence):
    raise TypeError(f"addresses must be a sequence of 'host:port' strings, "
                    f"got {validation.show(addresses)}.")
  if not addresses:
    raise ValueError("addresses must name at least one worker, got "
                     f"{validation.show(addresses)}.")
  addresses = [_check_address(a, f"addresses[{i}]")
               for i, a in enumerate(addresses)]
  return tff.backends.native.create_mergeable_comp_execution_context(
      [async_remote_context(a) for a in addresses])


def _check_address(address: Any, name: str) -> str:
  if not isinstance(address, str):
    raise TypeError(f"{name} must be a 'host:port' string, got "
                    f"{validation.show(address)}.")
  host, _, port = address.rpartition(":")
  if not host or not port.isdigit():
    raise ValueError(f"{name} must be 'host:port', got "
                     f"{validation.show(address)}.")
  return address


__all__ = [
    "Worker",
    "async_remote_context",
    "local_workers",
    "mergeable_context",
    "start_worker",
    "stop_workers",
    "worker_binary_path",
]
