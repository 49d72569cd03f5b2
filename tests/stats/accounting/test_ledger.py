"""Tests of tff_canary.stats.accounting.ledger: a run's DpEvents and their epsilons.

References: the exact Gaussian epsilon (`gaussian_accounting`), the Poisson
accounting (`poisson_accounting`), dp_accounting's PLD accountant convolving
the rounds' own events (`pld_reference`), and TFF itself (one test, marked
`tff`, which also checks the adaptive-clipping split against TFF's).
"""

from __future__ import annotations

import json
import math
import warnings

import dp_accounting
import numpy as np
import pytest

import pld_reference
from tff_canary.stats.accounting import adaptive_split
from tff_canary.stats.accounting import gaussian_accounting
from tff_canary.stats.accounting import ledger as ledger_lib
from tff_canary.stats.accounting import poisson_accounting


def adaptive_ledger(rounds=20, z=0.7, clients=100.0):
  return ledger_lib.Ledger(
      [adaptive_split.adaptive_clipping_event(z, clients)] * rounds)


def test_ledger_epsilons_of_constant_adaptive_run():
  ledger = adaptive_ledger()
  assert len(ledger) == 20
  assert all(z == pytest.approx(0.7, rel=1e-12)
             for z in ledger.noise_multipliers)
  z = ledger.noise_multipliers[0]
  assert ledger.epsilon_one_participation(1e-6) == (
      gaussian_accounting.gaussian_epsilon(z, 1e-6))
  assert ledger.epsilon_for_rounds([2, 5, 11], 1e-6) == pytest.approx(
      gaussian_accounting.repeated_epsilon(0.7, 3, 1e-6), rel=1e-10)
  assert ledger.epsilon_for_rounds([], 1e-6) == 0.0
  assert ledger.epsilon_for_rounds(np.arange(20), 1e-6) == pytest.approx(
      gaussian_accounting.repeated_epsilon(0.7, 20, 1e-6), rel=1e-10)
  pld = ledger.epsilon_poisson(0.05, 1e-6)
  assert pld == pytest.approx(
      poisson_accounting.poisson_epsilon(0.7, 0.05, 20, 1e-6), rel=1e-3)
  assert pld <= ledger.epsilon_poisson(0.05, 1e-6, accountant="rdp")


def test_ledger_with_varying_rounds_matches_pld_composition():
  # Rounds with different multipliers: the worst round sets the analytical
  # epsilon; a set of rounds composes exactly (checked against the PLD
  # accountant convolving the rounds' own events, tolerance as above).
  events = [dp_accounting.GaussianDpEvent(z) for z in (2.0, 1.0, 3.0, 1.5)]
  ledger = ledger_lib.Ledger(events)
  assert ledger.epsilon_one_participation(1e-6) == (
      gaussian_accounting.gaussian_epsilon(1.0, 1e-6))
  exact = ledger.epsilon_for_rounds([0, 2, 3], 1e-6)
  pld = pld_reference.pld_epsilon(dp_accounting.ComposedDpEvent(
      [events[0], events[2], events[3]]), 1e-6, 1e-4)
  assert exact - 1e-9 <= pld <= exact + 1e-3
  # Poisson over mixed rounds: PLD below RDP, above every single round's
  # amplified value.
  pld_all = ledger.epsilon_poisson(0.2, 1e-6)
  assert pld_all <= ledger.epsilon_poisson(0.2, 1e-6, accountant="rdp")
  assert pld_all > poisson_accounting.poisson_epsilon(1.0, 0.2, 1, 1e-6)


def test_ledger_no_op_and_non_private_rounds():
  quiet = ledger_lib.Ledger([dp_accounting.NoOpDpEvent()] * 3)
  assert quiet.epsilon_one_participation(1e-6) == 0.0
  assert quiet.epsilon_poisson(0.5, 1e-6) == 0.0
  leaky = ledger_lib.Ledger([dp_accounting.GaussianDpEvent(1.0),
                             dp_accounting.GaussianDpEvent(0.0)])
  assert leaky.epsilon_one_participation(1e-6) == math.inf
  assert leaky.epsilon_for_rounds([0], 1e-6) == (
      gaussian_accounting.gaussian_epsilon(1.0, 1e-6))
  assert leaky.epsilon_poisson(0.5, 1e-6) == math.inf


def test_ledger_json_round_trip_is_exact():
  z32 = np.float32(1.0050378)  # What TFF's float32 state holds.
  events = [
      dp_accounting.ComposedDpEvent([dp_accounting.GaussianDpEvent(z32),
                                     dp_accounting.GaussianDpEvent(10.0)]),
      dp_accounting.GaussianDpEvent(0.1 + 0.2),
      dp_accounting.SelfComposedDpEvent(dp_accounting.GaussianDpEvent(3.0), 4),
      dp_accounting.NoOpDpEvent(),
  ]
  ledger = ledger_lib.Ledger(events)
  text = ledger.to_json()
  again = ledger_lib.Ledger.from_json(text)
  assert again == ledger
  assert again.noise_multipliers == ledger.noise_multipliers
  assert again.events[1].noise_multiplier == 0.1 + 0.2
  assert again.events[0].events[0].noise_multiplier == float(z32)
  assert ledger_lib.Ledger.from_json(again.to_json(indent=2)) == ledger
  assert json.loads(text)["events"][2] == {
      "class_name": "SelfComposedDpEvent", "count": 4,
      "event": {"class_name": "GaussianDpEvent", "noise_multiplier": 3.0}}


def test_ledger_accepts_named_tuples_like_tff_state():
  # TFF's state.dp_event is DpEvent.to_named_tuple() after a round trip
  # through TF: bytes names and numpy float32 values (see the tff test).
  event = adaptive_split.adaptive_clipping_event(1.0, 100.0)
  ledger = ledger_lib.Ledger([event.to_named_tuple(), event])
  assert ledger.events[0] == ledger.events[1] == event
  assert ledger.noise_multipliers[0] == pytest.approx(1.0, rel=1e-12)


@pytest.mark.parametrize("text, fragment", [
    ("not json", "not valid JSON"),
    ('{"events": []}', "not a tff_canary.Ledger"),
    ('{"format": "tff_canary.Ledger", "version": 9, "events": []}',
     "version 9"),
    ('{"format": "tff_canary.Ledger", "version": 1, "events": '
     '[{"class_name": "Popen", "args": "ls"}]}', "'Popen' is not a DpEvent"),
    ('{"format": "tff_canary.Ledger", "version": 1, "events": '
     '[{"class_name": "GaussianDpEvent"}]}',
     "needs fields ['noise_multiplier']"),
    ('{"format": "tff_canary.Ledger", "version": 1, "events": []}',
     "at least one round"),
])
def test_ledger_from_json_refuses_bad_documents(text, fragment):
  with pytest.raises(ValueError) as info:
    ledger_lib.Ledger.from_json(text)
  assert fragment in str(info.value)


def test_ledger_refuses_bad_events_and_rounds():
  with pytest.raises(ValueError, match=r"events\[1\].*LaplaceDpEvent"):
    ledger_lib.Ledger([dp_accounting.GaussianDpEvent(1.0),
                       dp_accounting.LaplaceDpEvent(1.0)])
  with pytest.raises(TypeError, match="sequence of DpEvents"):
    ledger_lib.Ledger(dp_accounting.GaussianDpEvent(1.0))
  with pytest.raises(TypeError, match=r"events\[0\]"):
    ledger_lib.Ledger(["GaussianDpEvent"])
  ledger = adaptive_ledger(rounds=5)
  with pytest.raises(ValueError, match=r"rounds\[1\] = 5 is past"):
    ledger.epsilon_for_rounds([0, 5], 1e-6)
  with pytest.raises(ValueError, match=r"repeat"):
    ledger.epsilon_for_rounds([1, 1], 1e-6)
  with pytest.raises(ValueError, match=r"rounds\[0\] must be at least 0"):
    ledger.epsilon_for_rounds([-1], 1e-6)
  with pytest.raises(TypeError, match=r"rounds\[0\] must be an integer"):
    ledger.epsilon_for_rounds([1.0], 1e-6)
  with pytest.raises(TypeError, match="rounds must be a sequence"):
    ledger.epsilon_for_rounds(3, 1e-6)


# ---------------------------------------------------------------------------
# Against TFF itself (imports TFF, ~20 s; everything TFF in one test).


@pytest.mark.tff
@pytest.mark.slow
def test_matches_tff_adaptive_clipping_and_its_dp_events():
  # pylint: disable=g-import-not-at-top
  import tensorflow_federated as tff
  from tensorflow_federated.python.aggregators import differential_privacy

  from tff_canary.federated.runtime import worker_guard
  # pylint: enable=g-import-not-at-top
  worker_guard.install()

  # 1. The noise split, over a grid, including TFF's own refusals.
  for z in (0.0, 0.01, 0.3, 1.0, 4.9):
    for clients in (1.0, 10.0, 100.0, 1000.0):
      for count_std in (None, 0.0, 0.5, 3.0):
        try:
          with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            expected = differential_privacy.adaptive_clip_noise_params(
                z, clients, count_std)
        except ValueError:
          with pytest.raises(ValueError, match="clipped_count_stddev"):
            adaptive_split.adaptive_clipping_noise_multipliers(z, clients,
                                                           count_std)
          continue
        with warnings.catch_warnings():
          warnings.simplefilter("ignore")
          ours = adaptive_split.adaptive_clipping_noise_multipliers(
              z, clients, count_std)
        assert ours == pytest.approx(expected, rel=1e-15), (z, clients,
                                                            count_std)

  # 2. The DpEvents TFF's aggregators actually record, fed to a Ledger.
  adaptive = tff.aggregators.DifferentiallyPrivateFactory.gaussian_adaptive(
      noise_multiplier=1.0, clients_per_round=100.0)
  fixed = tff.aggregators.DifferentiallyPrivateFactory.gaussian_fixed(
      noise_multiplier=0.7, clients_per_round=10.0, clip=1.0)
  recorded = []
  for factory in (adaptive, fixed):
    process = factory.create(tff.TensorType(np.float32, [3]))
    state = process.initialize()
    for _ in range(2):
      state = process.next(state, [np.ones(3, np.float32)] * 4).state
      recorded.append(state)
  raw = [state.dp_event for state in recorded]
  extracted = [differential_privacy.extract_dp_event_from_state(state)
               for state in recorded]
  ledger = ledger_lib.Ledger(raw)
  assert ledger == ledger_lib.Ledger(extracted)
  assert ledger_lib.Ledger.from_json(ledger.to_json()) == ledger
  # TFF computes in float32: the multipliers agree to float32 precision.
  expected_adaptive = adaptive_split.adaptive_clipping_event(1.0, 100.0)
  for event in ledger.events[:2]:
    assert isinstance(event, dp_accounting.ComposedDpEvent)
    for got, want in zip(event.events, expected_adaptive.events):
      assert got.noise_multiplier == pytest.approx(want.noise_multiplier,
                                                   rel=1e-6)
  assert ledger.events[2] == ledger.events[3]
  assert ledger.events[2].noise_multiplier == pytest.approx(0.7, rel=1e-6)
  assert ledger.noise_multipliers == pytest.approx((1.0, 1.0, 0.7, 0.7),
                                                   rel=1e-6)
  assert ledger.epsilon_one_participation(1e-6) == pytest.approx(
      gaussian_accounting.gaussian_epsilon(0.7, 1e-6), rel=1e-5)
  worker_guard.stop_workers()
