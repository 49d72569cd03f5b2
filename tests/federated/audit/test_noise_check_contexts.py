"""The noise self-tests run in every context a user's training loop uses.

TFF's program loops (`tff.learning.programs.train_model`,
`tff.simulation.run_training_process` under a program) run under
`tff.program.NativeFederatedContext` over an asynchronous execution context,
where a computation call returns a value reference (outside a running event
loop: `RuntimeError: no running event loop`); a program's own coroutine
calls the self-test inside a running asyncio loop; a bare asynchronous
context returns coroutines. `tff_canary.federated.runtime.sync_context`
runs the self-tests' computations in a private synchronous context there.
With seeded noise each check must give exactly the statistics it gives in
TFF's default context, and leave the user's context installed and no worker
of its own behind.
"""

import asyncio

import numpy as np
import pytest
import tensorflow_federated as tff

from tff_canary.federated.audit import noise_check
from tff_canary.federated.insertion import factory
from tff_canary.federated.runtime import sync_context
from tff_canary.federated.runtime import worker_guard
from tff_canary.mechanisms.correlated import noise_check as correlated_check
from tff_canary.mechanisms.ddp import chain as ddp_chain
from tff_canary.mechanisms.ddp import noise_check as ddp_noise_check
from tff_canary.mechanisms.tree import aggregation
from tff_canary.stats.accounting import ddp_parameters
from tff_canary.stats.canaries import canary_config
from tff_canary.stats.canaries import schedules

pytestmark = pytest.mark.tff

VALUE = tff.types.to_type([(np.float32, [40]), (np.float32, [8])])
_NO_CANARIES = canary_config.CanaryConfig(
    seed=1, num_inserted=0, num_held_out=0,
    schedule=schedules.FixedPresentations(16, 0))


def _gaussian():
  return noise_check.check_aggregation_noise(
      factory.CanaryDPFactory.gaussian_fixed(1.0, 4, 0.5,
                                             canaries=_NO_CANARIES,
                                             noise_seed=3), VALUE)


def _tree():
  return correlated_check.check_correlated_noise(
      aggregation.tree_aggregation(1.0, 4, 0.5, canaries=_NO_CANARIES,
                                   noise_seed=3), VALUE,
      num_rounds=8).check


def _ddp():
  # TFF's distributed-DP noise is unseeded: only that the check runs here.
  params = ddp_parameters.ddp_parameters(4.0, 20, 16, 1.0, 250)
  return ddp_noise_check.check_ddp_noise(ddp_chain.ddp_sum_factory(params),
                                         params, num_rounds=2).check


def _program_context():
  """As a tff.program / tff.learning.programs loop sets it up."""
  return tff.program.NativeFederatedContext(
      tff.backends.native.create_async_local_cpp_execution_context())


def _statistics(check):
  return [(t.name, t.statistic) for t in check.tests]


@pytest.fixture(scope="module")
def reference():
  """The seeded Gaussian check in TFF's default (synchronous) context."""
  assert not sync_context.needs_private_context(
      tff.framework.get_context_stack().current)
  return _statistics(_gaussian())


def _run_in(context, checks, in_running_loop):
  """`checks` under `context`, from a program's coroutine if asked."""
  stack = tff.framework.get_context_stack()
  assert sync_context.needs_private_context(context)
  workers = set(worker_guard.live_workers())

  def run_all():
    return [check() for check in checks]

  async def program():  # a program's coroutine calls the self-test itself
    return run_all()

  with stack.install(context):
    results = asyncio.run(program()) if in_running_loop else run_all()
    assert stack.current is context  # the user's context is back
  # The private contexts' workers were stopped at the end of each check.
  assert set(worker_guard.live_workers()) <= workers
  return results


def test_all_three_self_tests_run_in_a_program_context(reference):
  gaussian, tree, ddp = _run_in(_program_context(), [_gaussian, _tree, _ddp],
                                in_running_loop=False)
  assert _statistics(gaussian) == reference
  assert tree.passed, tree.failures  # seeded: a fixed outcome
  assert tree.num_rounds == 8 and tree.tensor_sizes == (40, 8)
  assert ddp.num_rounds == 2 and ddp.tensor_sizes == (125, 125)


@pytest.mark.parametrize("program, in_running_loop", [
    (True, True), (False, False), (False, True)])
def test_the_self_test_runs_in_a_running_loop_and_async_contexts(
    reference, program, in_running_loop):
  context = (_program_context() if program else
             tff.backends.native.create_async_local_cpp_execution_context())
  (gaussian,) = _run_in(context, [_gaussian], in_running_loop)
  assert _statistics(gaussian) == reference


def test_a_check_that_fails_mid_run_gives_the_users_context_back():
  # TFF's plain sum has no DP state: the check refuses it after the first
  # round (`noise_check.zero_rounds`). While the error (with its traceback,
  # which holds the check's frame) is held, the private context must be gone
  # already.
  stack = tff.framework.get_context_stack()
  context = _program_context()
  workers = set(worker_guard.live_workers())
  with stack.install(context):
    try:
      noise_check.check_aggregation_noise(tff.aggregators.SumFactory(), VALUE)
      held = None
    except noise_check.NoClaimError as error:
      held = error
    assert "no DP aggregator" in str(held)
    assert stack.current is context
  assert set(worker_guard.live_workers()) <= workers
