"""Flower's planted DP bugs, each caught once (gaussian/flower_planted_bugs.py).

Each bug run as a user runs a Flower app: the DP strategy (or the planted
one) wrapped in ServerSideCanaries or CanaryClients, `start` on an
in-process Grid whose nodes answer with the user's ClientApp (Flower's
`app(message, context)`, its mods included), `flower_run.write_run` (the
noise self-test) and the report's headline; beside each, the correct
strategy's run at the same seed passes, so each assertion fails without
the bug. Small: 10 nodes all sampled, 4 rounds, d = 200, 20 coin
candidates, z = 1 (seconds). The rates: bench/flower_audit.py.
"""

from __future__ import annotations

import numpy as np
import pytest
from flwr.app import Array, ArrayRecord, Context, Message, RecordDict
from flwr.clientapp import ClientApp
from flwr.clientapp.mod import fixedclipping_mod
from flwr.serverapp.strategy import DifferentialPrivacyClientSideFixedClipping
from flwr.serverapp.strategy import DifferentialPrivacyServerSideAdaptiveClipping
from flwr.serverapp.strategy import DifferentialPrivacyServerSideFixedClipping
from flwr.serverapp.strategy import FedAvg

import flower_grid
from tff_canary.harness.writing import flower_run
from tff_canary.mechanisms.gaussian import flower
from tff_canary.mechanisms.gaussian import flower_clients
from tff_canary.mechanisms.gaussian import flower_planted_bugs as planted
from tff_canary.stats.canaries import canary_config
from tff_canary.stats.canaries import schedules

NODES, ROUNDS, CLIP = 10, 4, 1.0


# Each test in a ServerApp process's identity, NumPy's global RNG put back
# after (tests/conftest.py).
pytestmark = pytest.mark.usefixtures("flower_server_process")


def train(message, context):
  """The user's train function: the model plus 0.01 N(0, I)."""
  del context  # unused
  return Message(flower_grid.noisy_trainer(0.01)(message), reply_to=message)


def app_grid(app: ClientApp) -> flower_grid.LocalGrid:
  def answer(message):
    context = Context(run_id=1, node_id=message.metadata.dst_node_id,
                      node_config={}, state=RecordDict(), run_config={})
    reply = app(message, context)
    return reply.error if reply.has_error() else reply.content

  return flower_grid.LocalGrid(NODES, answer)


def strategy(cls):
  inner = FedAvg(fraction_evaluate=0.0, min_train_nodes=NODES,
                 min_available_nodes=NODES)
  if issubclass(cls, DifferentialPrivacyServerSideAdaptiveClipping):
    # sigma_b = 2.5: Flower refuses 2 sigma_b <= z (its default n / 20 = 0.5).
    return cls(inner, 1.0, NODES, initial_clipping_norm=CLIP,
               clipped_count_stddev=2.5)
  return cls(inner, 1.0, CLIP, NODES)


def headline(tmp_path, cls, app=None):
  """The headline of one seeded run (module docstring): server-side
  canaries when `app` is None, canary clients through `app` otherwise."""
  config = canary_config.CanaryConfig(
      seed=3, num_inserted=10, num_held_out=10,
      schedule=schedules.ShuffledEpochs(num_rounds=ROUNDS,
                                        rounds_per_epoch=2))
  if app is None:
    wrapper = flower.ServerSideCanaries(strategy(cls), config)
    grid = flower_grid.LocalGrid(NODES, flower_grid.noisy_trainer(0.01))
  else:
    wrapper = flower_clients.CanaryClients(strategy(cls), config)
    grid = app_grid(app)
  initial = ArrayRecord({"w": Array(np.zeros(200, np.float32))})
  np.random.seed(3)  # Flower's noise
  result = wrapper.start(grid, initial, num_rounds=ROUNDS)
  return flower_run.write_run(tmp_path, wrapper, initial, result.arrays,
                              delta=1e-5, plots=False).headline()


@pytest.mark.parametrize("bug, correct", [
    (planted.NoiseOverNSquared, DifferentialPrivacyServerSideFixedClipping),
    (planted.SeedEveryRound, DifferentialPrivacyServerSideFixedClipping),
    (planted.CountWithoutNoise, DifferentialPrivacyServerSideAdaptiveClipping),
], ids=["n2", "seed", "count"])
def test_the_noise_bugs_fail_the_noise_self_test(tmp_path, bug, correct):
  # The self-test's family level is 0.001 (noise_stats): seed 3 fixes the
  # correct run's pass.
  assert headline(tmp_path / "correct", correct).noise_check_verdict == (
      "passed")
  buggy = headline(tmp_path / "bug", bug)
  assert buggy.noise_check_verdict == "failed", buggy.noise_check_text


def test_n2_noise_is_refuted_by_the_audit_too(tmp_path):
  # Canaries at C / n under noise z C / n^2: n = 10 noise sds, every one.
  buggy = headline(tmp_path, planted.NoiseOverNSquared)
  assert buggy.audit_verdict == "refuted"
  assert buggy.strongest_bound > 2 * buggy.analytical_epsilon


def test_a_clientapp_without_its_clipping_mod_is_refuted(tmp_path):
  # Canary clients of norm 10 C enter unclipped: ten noise sds where the
  # correct run's are one; Flower's strategy and the noise self-test see
  # nothing wrong (the noise is right), the audit refutes the claim.
  correct = ClientApp(mods=[fixedclipping_mod])
  correct.train()(flower_clients.canary_train()(train))
  client_side = DifferentialPrivacyClientSideFixedClipping
  fine = headline(tmp_path / "correct", client_side, correct)
  assert fine.audit_verdict == "consistent"
  buggy = headline(tmp_path / "bug", client_side,
                   planted.client_app_without_clipping_mod(train))
  assert buggy.noise_check_verdict == "passed"
  assert buggy.audit_verdict == "refuted"
  assert buggy.strongest_bound > 2 * buggy.analytical_epsilon


def test_the_seed_reset_is_the_named_seed():
  # pylint: disable=protected-access
  dp = strategy(planted.SeedEveryRound)
  record = ArrayRecord({"w": Array(np.zeros(5, np.float32))})
  np.random.seed(0)
  first = dp._add_noise_to_aggregated_arrays(record)
  second = dp._add_noise_to_aggregated_arrays(record)
  np.random.seed(planted.RESET_SEED)
  expected = np.random.normal(0, 1.0 * CLIP / NODES, 5)
  for got in (first, second):
    np.testing.assert_allclose(got["w"].numpy(), expected, rtol=1e-6)


def test_a_train_function_is_required():
  with pytest.raises(TypeError, match=r"train must be a train function, "
                     r"got 3 of type int"):
    planted.client_app_without_clipping_mod(3)
