"""Server-side canaries around Flower's DP strategies (gaussian/flower.py).

Flower's message API driven in-process (tests/flower_grid.py: a Grid whose
clients are Python functions), with Flower's own FedAvg, DP strategies,
noise and accountant; one small run on Flower's simulation engine (Ray) is
in test_flower_simulation.py. Every run is seeded: the clients' updates
from their own generators, Flower's noise from NumPy's global RNG, seeded
here as a Flower user's script would (and put back after each test).
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from flwr.app import Array, ArrayRecord, ConfigRecord, Error
from flwr.serverapp.strategy import DifferentialPrivacyClientSideFixedClipping
from flwr.serverapp.strategy import DifferentialPrivacyServerSideAdaptiveClipping
from flwr.serverapp.strategy import DifferentialPrivacyServerSideFixedClipping
from flwr.serverapp.strategy import FedAdam
from flwr.serverapp.strategy import FedAvg
from flwr.server import strategy as legacy
from flwr.supercore import privacy_accounting as pa
from flwr.supercore.privacy_accounting import rdp_accountant as rdp

import flower_grid
from tff_canary.mechanisms.gaussian import flower
from tff_canary.stats.canaries import canary_config
from tff_canary.stats.canaries import orthogonal_canaries
from tff_canary.stats.canaries import schedules

SHAPES = {"kernel": (60, 50), "bias": (17,)}  # d = 3,017: no power of two
DIM = sum(math.prod(s) for s in SHAPES.values())
NODES = 4
CLIP = 1.0
ROUNDS = 3


# Each test in a ServerApp process's identity, NumPy's global RNG put back
# after (tests/conftest.py).
pytestmark = pytest.mark.usefixtures("flower_server_process")


def model(dtype=np.float64, shapes=None) -> ArrayRecord:
  return ArrayRecord({k: Array(np.zeros(s, dtype))
                      for k, s in (shapes or SHAPES).items()})


def canaries(num_rounds=ROUNDS, candidates=40, seed=11, presentations=2,
             **kwargs):
  """Coin-assigned orthogonal canaries (CanaryConfig's defaults), each
  inserted in `presentations` rounds."""
  return canary_config.CanaryConfig(
      seed=seed, num_inserted=candidates // 2,
      num_held_out=candidates - candidates // 2,
      schedule=schedules.FixedPresentations(num_rounds=num_rounds,
                                            presentations=presentations),
      **kwargs)


def fixed(z, *, inner=None, n=NODES, **kwargs):
  return DifferentialPrivacyServerSideFixedClipping(
      inner or FedAvg(fraction_evaluate=0.0), noise_multiplier=z,
      clipping_norm=CLIP, num_sampled_clients=n, **kwargs)


def run(strategy, grid, arrays=None, num_rounds=ROUNDS, noise_seed=0):
  """`strategy.start` with Flower's noise seeded (module docstring)."""
  np.random.seed(noise_seed)
  return strategy.start(grid, arrays or model(), num_rounds=num_rounds)


def canary_vectors(config) -> np.ndarray:
  """Every canary as a float64 row [m, d], built row by row
  (`canary_block`: R^T e_rho(j)), not by the wrapper's one transform."""
  return orthogonal_canaries.canary_block(
      config.seed, np.arange(config.num_canaries), DIM).astype(np.float64)


def mean_clipped_update(grid, server_round) -> np.ndarray:
  """The mean of a round's clipped updates, from the replies Flower
  clipped in place, minus the model sent (equal weights)."""
  sent = grid.sent[server_round]
  return np.mean([flower_grid.flat(r.content[flower_grid.ARRAYS_KEY]) - sent
                  for r in grid.replies[server_round]], axis=0)


class PreNoiseCanaries(FedAvg):
  """Design (a), the reference: FedAvg adding the round's canaries to its
  mean, so they enter BEFORE the DP strategy's noise (the same vector as
  the wrapper's: `canary_sum`; only the order of the additions differs)."""

  def __init__(self, config, clip, n):
    super().__init__(fraction_evaluate=0.0)
    self._config, self._scale = config, clip / n
    self._rows = orthogonal_canaries.rows(config.seed, DIM,
                                          config.num_canaries)

  def aggregate_train(self, server_round, replies):
    arrays, metrics = super().aggregate_train(server_round, replies)
    events = self._config.participation.events
    ids = events[events[:, 0] == server_round - 1, 1]
    total = orthogonal_canaries.canary_sum(self._config.seed, ids, DIM,
                                           self._rows)
    out, start = {}, 0
    for key, array in zip(arrays.keys(), arrays.to_numpy_ndarrays()):
      piece = total[start:start + array.size].reshape(array.shape)
      start += array.size
      out[key] = Array(array + (piece.astype(np.float64)
                                * self._scale).astype(array.dtype))
    return ArrayRecord(out), metrics


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
def test_the_release_equals_inserting_the_canaries_before_the_noise(dtype):
  # The same replies and the same noise draw (np.random seeded alike): the
  # wrapper's canaries added after Flower's noise against design (a)'s
  # added before it. Only float rounding may differ: a few units in the
  # last place of the model's values (|w| < 3 here: 3 rounds of updates of
  # norm <= 1 plus noise of std 0.25 and canaries of 0.25 each).
  config = canaries()
  trainer = flower_grid.noisy_trainer(0.3)
  after = flower.ServerSideCanaries(fixed(1.0), config)
  released = run(after, flower_grid.LocalGrid(NODES, trainer),
                 model(dtype)).arrays
  before = fixed(1.0, inner=PreNoiseCanaries(config, CLIP, NODES))
  reference = run(before, flower_grid.LocalGrid(NODES, trainer),
                  model(dtype)).arrays
  a, b = flower_grid.flat(released), flower_grid.flat(reference)
  ulp = np.spacing(np.abs(b).max().astype(dtype)).astype(np.float64)
  assert np.abs(b).max() > 0.5  # noise and canaries are there
  np.testing.assert_allclose(a, b, rtol=0, atol=8 * ulp)
  assert [r.inserted_ids.size for r in after.rounds] == list(
      config.participation.per_round())


def test_the_canaries_draw_nothing_from_numpys_global_rng():
  # Flower's noise is np.random's: one round with canaries leaves the
  # global RNG where the same round without them leaves it, and its
  # release minus the canaries is the release without them (the same
  # noise), to float rounding.
  config = canaries()
  trainer = flower_grid.noisy_trainer(0.3)
  wrapped = flower.ServerSideCanaries(fixed(1.0), config)
  plain = fixed(1.0)
  out = []
  for strategy in (wrapped, plain):
    grid = flower_grid.LocalGrid(NODES, trainer)
    np.random.seed(3)
    messages = strategy.configure_train(1, model(), ConfigRecord(), grid)
    arrays, _ = strategy.aggregate_train(1, grid.send_and_receive(messages))
    out.append((flower_grid.flat(arrays), np.random.get_state()[1].copy()))
  (with_canaries, state_with), (without, state_without) = out
  np.testing.assert_array_equal(state_with, state_without)
  ids = config.participation.events[config.participation.events[:, 0] == 0, 1]
  inserted = canary_vectors(config)[ids].sum(axis=0) * CLIP / NODES
  # float32 canaries (the transform's precision, 1e-7 of each entry).
  np.testing.assert_allclose(with_canaries - inserted, without, rtol=0,
                             atol=1e-6)
  assert np.abs(inserted).max() > 0.01


@pytest.fixture(scope="module")
def noiseless_run():
  """Three rounds at noise multiplier 0: (wrapper, grid, config, every
  round's release w_{t+1} by Flower's round t, flat)."""
  config = canaries()
  grid = flower_grid.LocalGrid(NODES, flower_grid.noisy_trainer(0.3))
  with flower_grid.server_identity():
    wrapper = flower.ServerSideCanaries(fixed(0.0), config)
    final = wrapper.start(grid, model(), num_rounds=ROUNDS).arrays
  released = {t: grid.sent[t + 1] for t in range(1, ROUNDS)}
  released[ROUNDS] = flower_grid.flat(final)
  return wrapper, grid, config, released


def test_without_noise_inserted_canaries_score_the_clip_over_n(noiseless_run):
  wrapper, grid, config, _ = noiseless_run
  vectors = canary_vectors(config)
  assert len(wrapper.rounds) == ROUNDS
  for r in wrapper.rounds:
    u = mean_clipped_update(grid, r.server_round)
    inserted = np.zeros(config.num_canaries, bool)
    inserted[r.inserted_ids] = True
    assert r.clip == CLIP and r.scale == CLIP / NODES and r.noise_std == 0.0
    # Exactly (the transform's float32 rounding, 1e-7 of |a_t| < 10):
    # s_j = C/n [j inserted] + <c_j, u_t>, u_t the clients' mean update.
    np.testing.assert_allclose(r.scores - vectors @ u,
                               np.where(inserted, CLIP / NODES, 0.0),
                               rtol=0, atol=1e-5)
    # And as an auditor sees it: <c_j, u_t> of a canary independent of
    # u_t (the clients' updates are noise drawn apart from the canaries)
    # has mean 0 and sd |u_t| / sqrt(d) exactly
    # (docs/method/orthogonal-canaries.md); 6 sd over 40 canaries x 3
    # rounds is passed by chance with probability ~1e-7.
    sd = np.linalg.norm(u) / math.sqrt(DIM)
    assert 0 < sd < 0.02
    assert np.all(np.abs(r.scores[inserted] - CLIP / NODES) < 6 * sd)
    assert np.all(np.abs(r.scores[~inserted]) < 6 * sd)


def test_the_canaries_are_the_tff_halfs_for_the_same_seed(noiseless_run):
  # Which canaries enter which round: the CanaryConfig's coin-assigned
  # schedule, Flower's round t being schedule round t - 1; and what
  # enters: C/n times the sum of their rows of the seeded orthogonal
  # matrix, the NumPy construction the TFF half takes its rows and
  # factors from (tests/federated/insertion/test_orthogonal_transform.py
  # compares it with TensorFlow's in the TFF environment), laid over the
  # model's arrays in the record's order.
  wrapper, grid, config, released = noiseless_run
  assert config.assignment == "coin" and config.directions == "orthogonal"
  vectors = canary_vectors(config)
  events = config.participation.events
  for r in wrapper.rounds:
    expected_ids = events[events[:, 0] == r.server_round - 1, 1]
    np.testing.assert_array_equal(r.inserted_ids, expected_ids)
    canary_part = (released[r.server_round] - grid.sent[r.server_round]
                   - mean_clipped_update(grid, r.server_round))
    np.testing.assert_allclose(canary_part, vectors[expected_ids].sum(axis=0)
                               * CLIP / NODES, rtol=0, atol=1e-6)



def adaptive(z, n=NODES, **kwargs):
  return DifferentialPrivacyServerSideAdaptiveClipping(
      FedAvg(fraction_evaluate=0.0), noise_multiplier=z,
      num_sampled_clients=n, **kwargs)


def test_adaptive_clipping_inserts_at_the_clip_the_replies_were_clipped_to():
  # No noise (noise multiplier 0: no count noise either). Every update
  # (norm about 0.3 sqrt(d) = 16) is far above the clip (0.1, then
  # smaller), so every reply is clipped to exactly C_t: the round's
  # recorded clip must be that norm, and the inserted canaries must score
  # C_t / n above <c_j, u_t>, both to float rounding.
  config = canaries()
  grid = flower_grid.LocalGrid(NODES, flower_grid.noisy_trainer(0.3))
  wrapper = flower.ServerSideCanaries(
      adaptive(0.0, initial_clipping_norm=0.1, target_clipped_quantile=0.5,
               clip_norm_lr=0.2), config)
  run(wrapper, grid)
  vectors = canary_vectors(config)
  clips = [r.clip for r in wrapper.rounds]
  for r in wrapper.rounds:
    norms = [np.linalg.norm(flower_grid.flat(reply.content["arrays"])
                            - grid.sent[r.server_round])
             for reply in grid.replies[r.server_round]]
    np.testing.assert_allclose(norms, r.clip, rtol=1e-12)
    inserted = np.isin(np.arange(config.num_canaries), r.inserted_ids)
    np.testing.assert_allclose(
        r.scores - vectors @ mean_clipped_update(grid, r.server_round),
        np.where(inserted, r.clip / NODES, 0.0), rtol=0, atol=1e-6)
  # What Flower 1.42 does with the clip (module docstring of flower.py):
  # with every reply clipped, C_{t+1} = C_t exp(-lr (1 - 0.5)): the clip
  # SHRINKS although every update is above it (Andrew et al. 2021 count
  # the unclipped fraction, and would grow it by exp(+0.1)).
  assert clips[0] == 0.1
  np.testing.assert_allclose(np.diff(np.log(clips)), -0.2 * 0.5, rtol=1e-12)
  assert wrapper.privacy_spent() is None  # no accountant for adaptive


def test_adaptive_clippings_noise_is_scaled_by_the_next_rounds_clip():
  # Flower adds the noise after updating the clip: the noise std is
  # z_value C_{t+1} / n while the replies (and the canaries) are at C_t.
  # Measured on one round of d = 40,000: the noise (the release minus the
  # clients' mean and the canaries) has sample std within 1.5% of the
  # recorded z C_{t+1} / n (its relative SE is 1 / sqrt(2 d) = 0.35%: 4.2
  # SE), and C_{t+1} / C_t = exp(-0.2 (clipped fraction - 0.5)) with a
  # clipped fraction of 1 + N(0, 0.2^2) (10 replies, count noise std 2)
  # is 0.90 +- 0.04: at least 4.5% from 1 except with probability ~1e-4
  # (this seed's is printed by the assertion).
  shapes = {"w": (200, 200)}
  n = 10
  config = canaries(num_rounds=1, presentations=1)
  grid = flower_grid.LocalGrid(n, flower_grid.noisy_trainer(0.3))
  dp = adaptive(1.0, n=n, initial_clipping_norm=0.5, clipped_count_stddev=2.0)
  wrapper = flower.ServerSideCanaries(dp, config)
  np.random.seed(8)
  messages = wrapper.configure_train(1, model(shapes=shapes), ConfigRecord(),
                                     grid)
  arrays, _ = wrapper.aggregate_train(1, grid.send_and_receive(messages))
  r = wrapper.rounds[0]
  assert r.clip == 0.5 and dp.clipping_norm != r.clip
  assert r.noise_std == pytest.approx(dp.noise_multiplier * dp.clipping_norm
                                      / n, rel=1e-12)
  assert dp.noise_multiplier == pytest.approx((1 - 4.0 ** -2) ** -0.5)
  vectors = orthogonal_canaries.canary_block(config.seed, r.inserted_ids,
                                             40000).astype(np.float64)
  noise = (flower_grid.flat(arrays) - grid.sent[1]
           - mean_clipped_update(grid, 1) - vectors.sum(axis=0) * r.scale)
  assert np.std(noise) == pytest.approx(r.noise_std, rel=0.015)
  ratio = dp.clipping_norm / r.clip
  assert abs(ratio - 1) > 0.045, ratio
  assert abs(np.std(noise) / (dp.noise_multiplier * r.clip / n) - 1) > 0.03


def rdp_accountant(population=NODES):
  return rdp.RdpAccountant(pa.PrivacyConfig(
      target_delta=1e-5, population_size=population,
      neighboring_relation=pa.NeighboringRelation.ADD_OR_REMOVE_ONE,
      sampling_method=pa.SamplingMethod.NO_AMPLIFICATION))


def test_flowers_accountant_still_accounts_when_wrapped():
  trainer = flower_grid.noisy_trainer(0.3)
  wrapped = flower.ServerSideCanaries(fixed(0.8, accountant=rdp_accountant()),
                                      canaries())
  plain = fixed(0.8, accountant=rdp_accountant())
  for strategy in (wrapped, plain):
    run(strategy, flower_grid.LocalGrid(NODES, trainer))
  spent, reference = wrapped.privacy_spent(), plain.privacy_spent()
  assert spent.num_releases == reference.num_releases == ROUNDS
  assert spent.epsilon == reference.epsilon
  # ... and it is the accountant's figure for three Gaussian releases.
  alone = rdp_accountant()
  alone.compose(pa.GaussianPrivacyEvent(0.8, NODES, NODES), count=ROUNDS)
  assert spent.epsilon == alone.get_privacy_spent().epsilon
  assert 1 < spent.epsilon < 100


def test_flowers_accountant_refuses_a_strategy_inside_that_is_not_fedavgs():
  # Why the canaries wrap the DP strategy from outside (design (c)): an
  # inner canary strategy overriding aggregate_train is refused by
  # Flower's accountant.
  class InnerCanaries(FedAvg):

    def aggregate_train(self, server_round, replies):
      return super().aggregate_train(server_round, replies)

  with pytest.raises(ValueError, match="FedAvg.aggregate_train"):
    fixed(1.0, inner=InnerCanaries(), accountant=rdp_accountant())


def test_a_round_without_a_release_inserts_and_scores_nothing():
  # A reply with an error: Flower's DP strategy releases nothing that
  # round; the model stays, no canary enters, the round is listed.
  good = flower_grid.noisy_trainer(0.3)

  def train(message):
    if (message.metadata.dst_node_id == 2
        and message.content["config"]["server-round"] == 2):
      return Error(code=0, reason="the client failed")
    return good(message)

  grid = flower_grid.LocalGrid(NODES, train)
  wrapper = flower.ServerSideCanaries(fixed(1.0), canaries())
  run(wrapper, grid)
  assert wrapper.skipped_rounds == (2,)
  assert [r.server_round for r in wrapper.rounds] == [1, 3]
  np.testing.assert_array_equal(grid.sent[2], grid.sent[3])
  assert wrapper.scores().shape == (2, 40) == wrapper.cosines().shape


def test_unequal_weights_are_recorded():
  # FedAvg weighs replies by num-examples: a reply's share of the mean
  # (here 4 of 10) is then above the 1/n the noise is calibrated to, and
  # canaries at C/n understate that client; the round records the share.
  def train(message):
    weight = float(message.metadata.dst_node_id)  # 1, 2, 3, 4
    content = flower_grid.noisy_trainer(0.3)(message)
    content["metrics"]["num-examples"] = weight
    return content

  wrapper = flower.ServerSideCanaries(fixed(1.0), canaries())
  run(wrapper, flower_grid.LocalGrid(NODES, train))
  assert [r.max_weight for r in wrapper.rounds] == [0.4] * ROUNDS
  assert [r.num_replies for r in wrapper.rounds] == [NODES] * ROUNDS


def _legacy_dp():
  return legacy.DifferentialPrivacyServerSideFixedClipping(
      legacy.FedAvg(), noise_multiplier=1.0, clipping_norm=1.0,
      num_sampled_clients=NODES)


@pytest.mark.parametrize("make, error, pattern", [
    (lambda: FedAvg(), TypeError,
     r"strategy must be one of Flower's server-side DP strategies .*FedAvg"
     r".*no release to audit"),
    (_legacy_dp, TypeError, r"strategy must be .*legacy API"),
    (lambda: DifferentialPrivacyClientSideFixedClipping(
        FedAvg(), noise_multiplier=1.0, clipping_norm=1.0,
        num_sampled_clients=NODES), ValueError,
     r"strategy must clip on the server, got .*Client-Side.* of type "
     r"DifferentialPrivacyClientSideFixedClipping"),
    (lambda: flower.ServerSideCanaries(fixed(1.0), canaries()), ValueError,
     r"strategy ServerSideCanaries\(.* already inserts canaries; wrap"),
    (lambda: fixed(1.0, inner=FedAdam()), ValueError,
     r"strategy's inner strategy must aggregate as FedAvg does .*FedAdam"),
    ("not a strategy", TypeError, r"strategy must be .*'not a strategy'"),
])
def test_a_strategy_it_cannot_audit_is_refused_by_name(make, error, pattern):
  strategy = make() if callable(make) else make
  with pytest.raises(error, match=pattern):
    flower.ServerSideCanaries(strategy, canaries())


def test_canaries_it_cannot_insert_are_refused_by_name():
  with pytest.raises(TypeError, match=r"canaries must be a .*CanaryConfig, "
                     r"got 7"):
    flower.ServerSideCanaries(fixed(1.0), 7)
  with pytest.raises(ValueError, match=r"canaries must have directions="
                     r"'orthogonal', got directions='gaussian'"):
    flower.ServerSideCanaries(fixed(1.0), canaries(directions="gaussian"))


def _one_round(wrapper, arrays, grid=None):
  grid = grid or flower_grid.LocalGrid(NODES, flower_grid.noisy_trainer(0.3))
  messages = wrapper.configure_train(1, arrays, ConfigRecord(), grid)
  return wrapper.aggregate_train(1, grid.send_and_receive(messages))


def test_a_model_it_cannot_audit_is_refused_by_name():
  wrapper = flower.ServerSideCanaries(fixed(1.0), canaries(candidates=40))
  with pytest.raises(ValueError, match=r"canaries: num_canaries must be at "
                     r"most dim = 30 .*got 40"):
    _one_round(wrapper, model(shapes={"w": (5, 6)}))
  counts = ArrayRecord({"w": Array(np.zeros(50)),
                        "steps": Array(np.zeros(1, np.int64))})
  with pytest.raises(ValueError, match=r"arrays\['steps'\] has dtype int64"):
    _one_round(flower.ServerSideCanaries(fixed(1.0), canaries()), counts)
  with pytest.raises(TypeError, match=r"arrays must be a flwr.app."
                     r"ArrayRecord, got \[1, 2\]"):
    flower.ServerSideCanaries(fixed(1.0), canaries()).configure_train(
        1, [1, 2], ConfigRecord(), None)


def test_a_model_that_changes_its_arrays_is_refused():
  wrapper = flower.ServerSideCanaries(fixed(1.0), canaries())
  _one_round(wrapper, model())
  grid = flower_grid.LocalGrid(NODES, flower_grid.noisy_trainer(0.3))
  with pytest.raises(ValueError, match=r"arrays has arrays \[\('kernel', "
                     r"\(60, 50\)\)\], but the model sent to the clients had"):
    wrapper.configure_train(2, model(shapes={"kernel": (60, 50)}),
                            ConfigRecord(), grid)


def test_rounds_out_of_order_and_short_runs_are_refused():
  wrapper = flower.ServerSideCanaries(fixed(1.0), canaries())
  with pytest.raises(ValueError, match=r"server_round 1 was not configured"):
    wrapper.aggregate_train(1, [])
  with pytest.raises(ValueError, match=r"server_round must be at least 1, "
                     r"got 0"):
    wrapper.configure_train(0, model(), ConfigRecord(), None)
  grid = flower_grid.LocalGrid(NODES, flower_grid.noisy_trainer(0.3))
  with pytest.raises(ValueError, match=r"num_rounds must be at least the "
                     r"canary schedule's 3 rounds, got 2"):
    wrapper.start(grid, model(), num_rounds=2)
  assert not grid.replies  # refused before any round
