"""The claim of a Flower run beside Flower's accountant (gaussian/flower_claim.py).

In-process runs of Flower's server-side DP strategies (tests/flower_grid.py)
wrapped by `ServerSideCanaries`: each round's DpEvent as it was, and
`accountant_record`'s comparison with Flower's own `RdpAccountant`.
"""

from __future__ import annotations

import math

import dp_accounting
import numpy as np
import pytest
from dp_accounting import rdp
from flwr.app import Array, ArrayRecord
from flwr.serverapp.strategy import DifferentialPrivacyServerSideAdaptiveClipping
from flwr.serverapp.strategy import DifferentialPrivacyServerSideFixedClipping
from flwr.serverapp.strategy import FedAvg
from flwr.supercore import privacy_accounting as pa
from flwr.supercore.privacy_accounting import rdp_accountant
from scipy import stats

import flower_grid
from tff_canary.mechanisms import protocol_flower
from tff_canary.mechanisms.gaussian import flower
from tff_canary.mechanisms.gaussian import flower_claim
from tff_canary.stats.accounting import ledger as ledger_lib
from tff_canary.stats.canaries import canary_config
from tff_canary.stats.canaries import schedules

NODES, ROUNDS, DELTA = 4, 6, 1e-5


# Each test in a ServerApp process's identity, NumPy's global RNG put back
# after (tests/conftest.py).
pytestmark = pytest.mark.usefixtures("flower_server_process")


def accountant():
  return rdp_accountant.RdpAccountant(pa.PrivacyConfig(
      target_delta=DELTA, population_size=NODES,
      neighboring_relation=pa.NeighboringRelation.ADD_OR_REMOVE_ONE,
      sampling_method=pa.SamplingMethod.NO_AMPLIFICATION))


def run(dp, train=None, nodes=NODES):
  """The wrapper of `dp` after ROUNDS seeded rounds on NODES clients."""
  config = canary_config.CanaryConfig(
      seed=3, num_inserted=10, num_held_out=10,
      schedule=schedules.FixedPresentations(num_rounds=ROUNDS,
                                            presentations=2))
  wrapper = flower.ServerSideCanaries(dp, config)
  np.random.seed(4)
  wrapper.start(flower_grid.LocalGrid(
      nodes, train or flower_grid.noisy_trainer(0.2)),
      ArrayRecord({"w": Array(np.zeros((30, 20)))}), num_rounds=ROUNDS)
  return wrapper


def fixed(z, **kwargs):
  return DifferentialPrivacyServerSideFixedClipping(
      FedAvg(fraction_evaluate=0.0), noise_multiplier=z, clipping_norm=1.0,
      num_sampled_clients=NODES, **kwargs)


def claim(wrapper):
  """(the ledger of the rounds as released, accountant_record)."""
  ledger = ledger_lib.Ledger([wrapper.release_event(r)
                              for r in wrapper.rounds])
  return ledger, flower_claim.accountant_record(
      wrapper.strategy, wrapper.rounds, DELTA,
      ledger.epsilon_for_rounds(range(len(ledger)), DELTA))


def exact_delta(epsilon, mu):
  """delta(epsilon) of a mu-GDP Gaussian (Balle & Wang 2018, Theorem 8;
  Dong, Roth & Su 2022, Corollary 2.13), written out here."""
  return (stats.norm.cdf(-epsilon / mu + mu / 2)
          - math.exp(epsilon) * stats.norm.cdf(-epsilon / mu - mu / 2))


def test_flowers_accountant_beside_the_exact_epsilon_of_the_same_releases():
  z = 0.8
  wrapper = run(fixed(z, accountant=accountant()))
  ledger, record = claim(wrapper)
  # Fixed clipping, n equal replies: each round is Flower's Gaussian(z).
  assert ledger.noise_multipliers == (z,) * ROUNDS
  assert record["applies"] and record["reasons"] == []
  assert record["num_releases"] == ROUNDS
  assert record["accounting_method"] == "rdp"
  # Flower's figure is dp_accounting's RDP accountant on the same events,
  # to float rounding (the same library, its default orders; 1e-12 leaves
  # room for the order of a sum, nothing else).
  reference = rdp.RdpAccountant()
  reference.compose(dp_accounting.GaussianDpEvent(z), ROUNDS)
  assert record["epsilon"] == pytest.approx(reference.get_epsilon(DELTA),
                                            rel=1e-12)
  assert record["privacy_spent"]["delta"] == DELTA
  assert record["privacy_spent"]["epsilon"] == pytest.approx(
      record["epsilon"], rel=1e-12)
  # The documented relation: R Gaussians of z are one Gaussian of mu =
  # sqrt(R) / z (Dong, Roth & Su 2022, Corollary 3.3), whose RDP curve,
  # alpha mu^2 / 2, is the composition's exactly, so RDP of the single
  # Gaussian gives Flower's figure again (rel 1e-12: rounding of R alpha /
  # (2 z^2) against alpha / (2 (z / sqrt R)^2)) ...
  mu = math.sqrt(ROUNDS) / z
  single = rdp.RdpAccountant()
  single.compose(dp_accounting.GaussianDpEvent(1.0 / mu))
  assert record["epsilon"] == pytest.approx(single.get_epsilon(DELTA),
                                            rel=1e-12)
  # ... and our analytical epsilon is that Gaussian's exact one: its delta
  # is DELTA (to 1e-6 relative: the epsilon is solved by bisection) ...
  ours = record["epsilon_all_rounds"]
  assert exact_delta(ours, mu) == pytest.approx(DELTA, rel=1e-6)
  # ... below Flower's, which is the RDP curve alpha mu^2 / 2 converted to
  # (epsilon, delta) by Canonne, Kamath & Steinke 2020 (arXiv 2004.00010,
  # Proposition 12), min over the accountant's orders alpha > 1.01 of
  # alpha mu^2 / 2 + log(1 - 1/alpha) - log(delta alpha) / (alpha - 1):
  # an upper bound on the exact epsilon, written out here (rel 1e-12:
  # float rounding of the same formula). Here 6.7% above ours (z = 0.8,
  # 6 rounds, delta 1e-5).
  orders = np.asarray(single.orders, np.float64)
  orders = orders[orders > 1.01]
  converted = np.min(orders * mu**2 / 2 + np.log1p(-1 / orders)
                     - np.log(DELTA * orders) / (orders - 1))
  assert record["epsilon"] == pytest.approx(converted, rel=1e-12)
  assert ours < record["epsilon"]


def test_without_an_accountant_it_says_why_flowers_does_not_apply():
  record = claim(run(fixed(1.0)))[1]
  assert not record["applies"] and record["epsilon"] is None
  assert record["reasons"] == [
      "no accountant: the DP strategy was built without one "
      "(accountant=None)"]


def test_unequal_weights_count_the_heaviest_client():
  # FedAvg weighs by num-examples (1, 2, 3, 4 of 10): the heaviest
  # client's share 0.4 weighs 1.6 x the 1/n the noise is calibrated to, so
  # its update is released with multiplier z / 1.6; Flower's accountant
  # (absent here: it refuses unequal weights) does not apply.
  def train(message):
    content = flower_grid.noisy_trainer(0.2)(message)
    content["metrics"]["num-examples"] = float(message.metadata.dst_node_id)
    return content

  ledger, record = claim(run(fixed(1.0), train))
  np.testing.assert_allclose(ledger.noise_multipliers, 1.0 / 1.6, rtol=1e-12)
  assert record["reasons"][1].startswith(
      "weighted aggregation: FedAvg weighed the replies by num-examples, "
      "one reply's share reached 0.4 > 1/n = 0.25 (round 1; 6 of 6 rounds")


def test_a_short_cohort_weighs_each_reply_more():
  # 3 replies where the noise is calibrated to n = 4: each weighs 1/3 in
  # FedAvg's mean, so the release's multiplier is z / (4/3); the weights
  # are equal, so only the replies are named.
  ledger, record = claim(run(fixed(1.0), nodes=3))
  np.testing.assert_allclose(ledger.noise_multipliers, 0.75, rtol=1e-12)
  assert [r.split(":")[0] for r in record["reasons"]] == ["no accountant",
                                                          "replies"]


def test_adaptive_clipping_has_no_accountant_and_its_own_events():
  dp = DifferentialPrivacyServerSideAdaptiveClipping(
      FedAvg(fraction_evaluate=0.0), noise_multiplier=1.0,
      num_sampled_clients=NODES, initial_clipping_norm=1.0,
      clipped_count_stddev=3.0)
  wrapper = run(dp)
  ledger, record = claim(wrapper)
  assert not record["applies"] and record["epsilon"] is None
  assert record["reasons"][0].startswith("adaptive clipping: ")
  for r, event in zip(wrapper.rounds, ledger.events):
    # z_v C_{t+1} / C_t, composed with the count's 3 (sensitivity 1).
    value, count = event.events
    assert count == dp_accounting.GaussianDpEvent(3.0)
    assert value.noise_multiplier == pytest.approx(
        r.noise_std * NODES / r.clip, rel=1e-12)
    assert r.noise_clip != r.clip  # the clip moved before the noise
  # Flower's parameters claim the z given, 1 (its split's effective
  # multiplier): the epsilon the user would be told, beside the real one.
  nominal = ledger_lib.Ledger([wrapper.dp_event()] * ROUNDS)
  assert nominal.noise_multipliers == pytest.approx((1.0,) * ROUNDS,
                                                    rel=1e-12)
  # (rel 1e-9: the same mu by two sums of precisions, to rounding)
  assert record["epsilon_nominal"] == pytest.approx(
      nominal.epsilon_for_rounds(range(ROUNDS), DELTA), rel=1e-9)
  assert record["epsilon_nominal"] != pytest.approx(
      record["epsilon_all_rounds"], rel=0.01)


def test_no_noise_is_no_privacy_and_unrecorded_noise_is_refused():
  dp = fixed(1.0)
  base = dict(server_round=1, schedule_round=0, clip=1.0, scale=0.25,
              noise_std=0.0, inserted_ids=np.zeros(0, np.int64),
              num_replies=NODES, max_weight=0.25, scores=np.zeros(2),
              cosines=np.zeros(2))
  none = protocol_flower.RoundScores(**base, noise_multiplier=0.0,
                                     noise_clip=1.0)
  assert flower_claim.release_event(dp, none) == dp_accounting.GaussianDpEvent(
      0.0)
  with pytest.raises(ValueError, match=r"round 1 have noise_multiplier=nan "
                     r"and noise_clip=nan: the noise Flower added was not "
                     r"recorded"):
    flower_claim.release_event(dp, protocol_flower.RoundScores(**base))
