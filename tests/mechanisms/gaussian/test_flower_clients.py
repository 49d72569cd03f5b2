"""Canary clients through a Flower user's ClientApp and its mods (gaussian/flower_clients.py).

Flower's message API in-process (tests/flower_grid.py's Grid) whose nodes
run a user's `ClientApp` as Flower runs one: `app(message, context)`, the
public call that applies the app's mods around its registered train
function (`ClientApp(mods=[fixedclipping_mod])`, flwr/clientapp/
client_app.py composes them with `make_ffn`). The canary clients'
decorator sits under `@app.train()`, as a user writes it. Flower's noise is
seeded through NumPy's global RNG, as a user's script would, and put back.
"""

from __future__ import annotations

import math
import random
import subprocess
import sys

import numpy as np
import pytest
from flwr.app import Array, ArrayRecord, ConfigRecord, Context, Message
from flwr.app import RecordDict
from flwr.clientapp import ClientApp
from flwr.clientapp.mod import adaptiveclipping_mod, fixedclipping_mod
from flwr.serverapp.strategy import DifferentialPrivacyClientSideAdaptiveClipping
from flwr.serverapp.strategy import DifferentialPrivacyClientSideFixedClipping
from flwr.serverapp.strategy import DifferentialPrivacyServerSideAdaptiveClipping
from flwr.serverapp.strategy import DifferentialPrivacyServerSideFixedClipping
from flwr.serverapp.strategy import FedAvg
from flwr.supercore import privacy_accounting as pa
from flwr.supercore.privacy_accounting import rdp_accountant as rdp

import flower_grid
import repo_paths
from tff_canary.harness.writing import flower_run
from tff_canary.mechanisms.gaussian import flower_clients
from tff_canary.mechanisms.gaussian import flower_planted_bugs as planted
from tff_canary.stats.canaries import canary_config
from tff_canary.stats.canaries import orthogonal_canaries
from tff_canary.stats.canaries import schedules

SHAPES = {"kernel": (60, 50), "bias": (17,)}  # d = 3,017: no power of two
DIM = sum(math.prod(s) for s in SHAPES.values())
CLIP = 1.0


# Each test in a ServerApp process's identity, NumPy's global RNG put back
# after (tests/conftest.py).
pytestmark = pytest.mark.usefixtures("flower_server_process")


def client_app(mods, scale=0.03, metrics=None) -> ClientApp:
  """A user's ClientApp: `mods`, and a train function (the model plus
  `scale` N(0, I), drawn from node and round, weight 1) with canary
  clients (replying with `metrics`)."""
  app = ClientApp(mods=list(mods))
  trainer = flower_grid.noisy_trainer(scale)

  @app.train()
  @flower_clients.canary_train(metrics=metrics)
  def train(message, context):
    del context  # unused
    return Message(trainer(message), reply_to=message)

  return app


def app_grid(num_nodes, app) -> flower_grid.LocalGrid:
  """A Grid whose nodes answer with `app(message, context)` (Flower's call
  of a ClientApp, its mods included)."""

  def answer(message):
    context = Context(run_id=1, node_id=message.metadata.dst_node_id,
                      node_config={}, state=RecordDict(), run_config={})
    reply = app(message, context)
    return reply.error if reply.has_error() else reply.content

  return flower_grid.LocalGrid(num_nodes, answer)


def model(shapes=None) -> ArrayRecord:
  return ArrayRecord({k: Array(np.zeros(s, np.float32))
                      for k, s in (shapes or SHAPES).items()})


def inner(n, nodes):
  return FedAvg(fraction_train=n / nodes, fraction_evaluate=0.0,
                min_available_nodes=nodes)


STRATEGIES = {  # name -> (DP strategy of z, n, nodes; the ClientApp's mods)
    "client_fixed": (lambda z, n, nodes: DifferentialPrivacyClientSideFixedClipping(
        inner(n, nodes), z, CLIP, n), [fixedclipping_mod]),
    "client_adaptive": (lambda z, n, nodes: DifferentialPrivacyClientSideAdaptiveClipping(
        inner(n, nodes), z, n, initial_clipping_norm=CLIP), [adaptiveclipping_mod]),
    "server_fixed": (lambda z, n, nodes: DifferentialPrivacyServerSideFixedClipping(
        inner(n, nodes), z, CLIP, n), []),
    "server_adaptive": (lambda z, n, nodes: DifferentialPrivacyServerSideAdaptiveClipping(
        inner(n, nodes), z, n, initial_clipping_norm=CLIP), []),
}


def small_canaries(num_rounds=3):
  return canary_config.CanaryConfig(
      seed=11, num_inserted=12, num_held_out=12,
      schedule=schedules.FixedPresentations(num_rounds=num_rounds,
                                            presentations=1))


@pytest.mark.parametrize("name", sorted(STRATEGIES))
def test_without_noise_a_canary_clients_score_is_its_clip_over_n(name):
  # 20 nodes, FedAvg samples 10 (fraction_train 0.5), the round's
  # inserted canaries (coins: about 4) among them. At z = 0 the release is the mean of the clipped replies,
  # so s_j = <c_j, mean of the real clients' updates> + C_t / n for the
  # round's inserted canaries, exactly (float32 transform: 1e-5 of
  # |a_t| < 3), whoever clipped them: the mod or the server.
  make, mods = STRATEGIES[name]
  config = small_canaries()
  nodes, n = 20, 10
  grid = app_grid(nodes, client_app(mods))
  wrapper = flower_clients.CanaryClients(make(0.0, n, nodes), config)
  np.random.seed(0)
  wrapper.start(grid, model(), num_rounds=3)
  vectors = orthogonal_canaries.canary_block(
      config.seed, np.arange(config.num_canaries), DIM).astype(np.float64)
  assert len(wrapper.rounds) == 3
  assert len(wrapper.outcomes) == len(config.participation.events)
  for r in wrapper.rounds:
    canary_nodes = {o["node_id"] for o in wrapper.outcomes
                    if o["round_num"] == r.schedule_round}
    replies = grid.replies[r.server_round]
    assert len(replies) == n and canary_nodes <= {
        m.metadata.src_node_id for m in replies}  # among the sampled
    sent = grid.sent[r.server_round]
    real = sum(flower_grid.flat(m.content["arrays"]) - sent for m in replies
               if m.metadata.src_node_id not in canary_nodes) / n
    inserted = np.zeros(config.num_canaries, bool)
    inserted[r.inserted_ids] = True
    assert r.scale == r.clip / n and r.noise_std == 0.0
    np.testing.assert_allclose(r.scores - vectors @ real,
                               np.where(inserted, r.clip / n, 0.0),
                               rtol=0, atol=1e-5)
  if "adaptive" in name:  # every canary above the clip: it moved
    assert len({r.clip for r in wrapper.rounds}) == 3


def test_a_heavier_canary_weighs_its_share_and_is_logged(caplog):
  # A canary that reports num-examples 3 against the clients' 1 weighs
  # 3 / (3 k + n - k) of the mean, not 1/n: at z = 0 it scores C times
  # that share (to the transform's 1e-5), and the round logs the
  # unequal weights.
  make, mods = STRATEGIES["client_fixed"]
  config = small_canaries()
  grid = app_grid(20, client_app(mods, metrics={"num-examples": 3}))
  wrapper = flower_clients.CanaryClients(make(0.0, 10, 20), config)
  wrapper.start(grid, model(), num_rounds=3)
  vectors = orthogonal_canaries.canary_block(
      config.seed, np.arange(config.num_canaries), DIM).astype(np.float64)
  for r in wrapper.rounds:
    k = r.inserted_ids.size
    share = 3 / (3 * k + 10 - k)
    mine = [o for o in wrapper.outcomes if o["round_num"] == r.schedule_round]
    assert [o["weight"] for o in mine] == pytest.approx([share] * k)
    assert r.max_weight == pytest.approx(share)
    sent = grid.sent[r.server_round]
    nodes = {o["node_id"] for o in mine}
    real = sum(flower_grid.flat(m.content["arrays"]) - sent
               for m in grid.replies[r.server_round]
               if m.metadata.src_node_id not in nodes) / (3 * k + 10 - k)
    np.testing.assert_allclose(
        r.scores[r.inserted_ids] - vectors[r.inserted_ids] @ real,
        CLIP * share, rtol=0, atol=1e-5)
  assert "replies weigh unequally" in caplog.text


def test_the_decorator_leaves_real_clients_and_the_rngs_alone():
  # A message without a canary id reaches the user's train function; the
  # wrapper's choice of canary nodes draws from neither NumPy's global
  # RNG (Flower's noise) nor Python's (Flower's node sampling).
  config = small_canaries()
  make, mods = STRATEGIES["client_fixed"]
  states = []
  for wrap in (True, False):
    grid = app_grid(20, client_app(mods))
    dp = make(1.0, 10, 20)
    strategy = flower_clients.CanaryClients(dp, config) if wrap else dp
    np.random.seed(4)
    random.seed(4)
    messages = list(strategy.configure_train(1, model(), ConfigRecord(),
                                             grid))
    states.append((np.random.get_state()[1].copy(), random.getstate(),
                   [m.metadata.dst_node_id for m in messages]))
    if wrap:
      marked = [m for m in messages
                if flower_clients.CANARY_ID_KEY in m.content["config"]]
      assert len(marked) == config.participation.per_round()[0] > 0
      plain = next(m for m in messages if m not in marked)
      expected = flower_grid.noisy_trainer(0.03)(plain)["arrays"]
      got = app_grid(20, client_app([]))._train(plain)["arrays"]
      np.testing.assert_array_equal(flower_grid.flat(got),
                                    flower_grid.flat(expected))
  np.testing.assert_array_equal(states[0][0], states[1][0])
  assert states[0][1:] == states[1][1:]


def test_flowers_accountant_accepts_canary_clients_and_counts_as_before():
  # Flower's accounted mode is strict: exactly n replies of equal weight
  # (it raises otherwise). Canary clients replace sampled clients with
  # the clients' weight, so it accepts them, and its figure is that of
  # the same strategy without canaries (3 releases at z = 0.8, n = 10).
  def accounted():
    return DifferentialPrivacyClientSideFixedClipping(
        inner(10, 20), 0.8, CLIP, 10, accountant=rdp.RdpAccountant(
            pa.PrivacyConfig(
                target_delta=1e-5, population_size=20,
                neighboring_relation=pa.NeighboringRelation.ADD_OR_REMOVE_ONE,
                sampling_method=pa.SamplingMethod.NO_AMPLIFICATION)))

  wrapper = flower_clients.CanaryClients(accounted(), small_canaries())
  plain = accounted()
  for strategy in (wrapper, plain):
    np.random.seed(1)
    strategy.start(app_grid(20, client_app([fixedclipping_mod])), model(),
                   num_rounds=3)
  spent, reference = wrapper.privacy_spent(), plain.privacy_spent()
  assert len(wrapper.rounds) == 3 and spent.num_releases == 3
  assert spent.epsilon == reference.epsilon and 1 < spent.epsilon < 100
  assert len(wrapper.outcomes) == len(wrapper.canaries.participation.events)


def test_more_canaries_than_sampled_nodes_is_refused():
  make, mods = STRATEGIES["client_fixed"]
  config = small_canaries()
  first = int(config.participation.per_round()[0])
  assert first > 2
  wrapper = flower_clients.CanaryClients(make(1.0, 2, 6), config)
  with pytest.raises(ValueError, match=rf"round 1 has {first} inserted "
                     r"canaries scheduled but the strategy sampled 2 nodes"):
    wrapper.start(app_grid(6, client_app(mods)), model(), num_rounds=3)
  with pytest.raises(TypeError, match=r"strategy must be one of Flower's DP"):
    flower_clients.CanaryClients(FedAvg(), small_canaries())
  with pytest.raises(TypeError, match=r"metrics must be a dict of the "
                     r"metrics the canary reports .* got 'loss'"):
    flower_clients.canary_train(metrics="loss")
  with pytest.raises(TypeError, match=r"got \{'loss': 'low'\}"):
    flower_clients.canary_train(metrics={"loss": "low"})


NODES, ROUNDS = 50, 10


def user_train(message, context):
  """The user's train function of `audited_run` (the model plus 0.01
  N(0, I), drawn from node and round)."""
  del context  # unused
  return Message(flower_grid.noisy_trainer(0.01)(message), reply_to=message)


def audited_run(tmp_path, app, z=1.0):
  """A run of 10 rounds of client-side fixed clipping over 50 nodes
  running the ClientApp `app` (all sampled), d = 10,000, 200 coin candidates each inserted in 2
  rounds (20 canary clients a round), written as a run directory."""
  config = canary_config.CanaryConfig(
      seed=2, num_inserted=100, num_held_out=100,
      schedule=schedules.ShuffledEpochs(num_rounds=ROUNDS,
                                        rounds_per_epoch=5))
  initial = ArrayRecord({"w": Array(np.zeros((100, 100), np.float32))})
  wrapper = flower_clients.CanaryClients(
      DifferentialPrivacyClientSideFixedClipping(
          FedAvg(fraction_evaluate=0.0, min_train_nodes=NODES,
                 min_available_nodes=NODES), z, CLIP, NODES), config)
  np.random.seed(0)
  result = wrapper.start(app_grid(NODES, app),
                         initial, num_rounds=ROUNDS)
  report = flower_run.write_run(tmp_path, wrapper, initial, result.arrays,
                                delta=1e-5, plots=False)
  return wrapper, report, tmp_path


@pytest.fixture(scope="module")
def correct_run(tmp_path_factory):
  with flower_grid.server_identity():
    state = np.random.get_state()
    out = audited_run(tmp_path_factory.mktemp("clients") / "run",
                      client_app([fixedclipping_mod], scale=0.01))
    np.random.set_state(state)
  return out


def test_with_noise_scores_are_normal_in_units_of_the_noise(correct_run):
  # z C / n = 0.02. Held-out canaries: s_j / (z C / n) ~ N(0, 1) (the
  # clients' own projection adds |u|^2 / d ~ 1e-6 against 4e-4: 0.3%),
  # 100 x 10 = 1,000 draws: mean SE 0.032, sd SE 0.022; 0.13 and 0.09
  # are 4 SE. Inserted canaries in their rounds: mean C/n, i.e. 1/z = 1
  # in those units, ~200 draws, SE 0.07; 0.3 is 4 SE.
  wrapper, _, _ = correct_run
  held_out = ~wrapper.canaries.inserted
  units = np.stack([r.scores / r.noise_std for r in wrapper.rounds])
  assert all(r.noise_std == pytest.approx(CLIP / NODES, rel=1e-12)
             for r in wrapper.rounds)
  assert abs(units[:, held_out].mean()) < 0.13
  assert abs(units[:, held_out].std() - 1.0) < 0.09
  inserted = np.concatenate([units[i, r.inserted_ids]
                             for i, r in enumerate(wrapper.rounds)])
  assert inserted.size == len(wrapper.canaries.participation.events)
  assert abs(inserted.mean() - 1.0) < 0.3


def test_the_report_reads_a_canary_clients_run(correct_run):
  wrapper, report, path = correct_run
  events = len(wrapper.canaries.participation.events)
  proc = subprocess.run(
      [sys.executable, "-m", "tff_canary", "report", str(path),
       "--no_plots"], capture_output=True, text=True, timeout=300,
      cwd=repo_paths.REPO, check=False)
  assert proc.returncode == 0, proc.stderr[-3000:]
  assert "audit: consistent" in proc.stdout
  written = (path / "report.md").read_text()
  assert (f"canary clients of norm 10 through the ClientApp's mods and "
          f"Flower's DP strategy; {events} canary-client participations: "
          f"{events} above the round's clip; canary clients replace sampled "
          f"clients") in written
  assert report.headline().analytical_epsilon == pytest.approx(6.573,
                                                               abs=1e-3)
  assert {o["weight"] for o in wrapper.outcomes} == {1 / NODES}


def test_a_clientapp_without_its_clipping_mod_is_refuted(correct_run,
                                                         tmp_path):
  # The planted user bug: client-side clipping, but the ClientApp has no
  # fixedclipping_mod. Canary clients enter at their norm 10, not C = 1:
  # scores 10 C / n, ten noise sds, where the correct run's are one. The
  # claim (z = 1, 6.57) is refuted; the seeded runs' bounds, measured:
  # correct 1.62, bug 29.9 (the 95% bound's ceiling at 200 candidates).
  _, correct, _ = correct_run
  assert correct.headline().audit_verdict == "consistent"
  wrapper, buggy, _ = audited_run(
      tmp_path, planted.client_app_without_clipping_mod(user_train))
  inserted = np.concatenate([r.scores[r.inserted_ids] / r.noise_std
                             for r in wrapper.rounds])
  assert inserted.mean() > 8  # 10 expected, SE 0.07
  headline = buggy.headline()
  assert headline.audit_verdict == "refuted"
  assert headline.strongest_bound > 2 * headline.analytical_epsilon
