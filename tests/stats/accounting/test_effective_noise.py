"""Tests of tff_canary.stats.accounting.effective_noise: one Gaussian for a DpEvent.

References: closed forms of the composition, and dp_accounting's PLD
accountant convolving the Gaussians (`pld_reference`).
"""

from __future__ import annotations

import math

import dp_accounting
import pytest

import pld_reference
from tff_canary.stats.accounting.effective_noise import effective_noise_multiplier
from tff_canary.stats.accounting.gaussian_accounting import gaussian_epsilon


def test_effective_noise_multiplier_of_event_kinds():
  gaussian = dp_accounting.GaussianDpEvent
  assert effective_noise_multiplier(gaussian(0.7)) == 0.7
  composed = dp_accounting.ComposedDpEvent([gaussian(3.0), gaussian(4.0)])
  assert effective_noise_multiplier(composed) == pytest.approx(
      12.0 / 5.0, rel=1e-15)  # (1/9 + 1/16)^(-1/2) = 12/5.
  repeated = dp_accounting.SelfComposedDpEvent(gaussian(2.0), 16)
  assert effective_noise_multiplier(repeated) == 0.5
  nested = dp_accounting.SelfComposedDpEvent(composed, 4)
  assert effective_noise_multiplier(nested) == pytest.approx(1.2)
  assert effective_noise_multiplier(
      dp_accounting.NoOpDpEvent()) == math.inf
  assert effective_noise_multiplier(
      dp_accounting.NonPrivateDpEvent()) == 0.0
  assert effective_noise_multiplier(
      dp_accounting.ComposedDpEvent([gaussian(1.0), gaussian(0.0)])) == 0.0
  assert effective_noise_multiplier(composed.to_named_tuple()) == (
      pytest.approx(2.4))


def test_effective_noise_multiplier_matches_pld_composition():
  # Independent: the PLD accountant convolves the two Gaussians' PLDs.
  composed = dp_accounting.ComposedDpEvent(
      [dp_accounting.GaussianDpEvent(1.3), dp_accounting.GaussianDpEvent(2.1)])
  z = effective_noise_multiplier(composed)
  exact = gaussian_epsilon(z, 1e-6)
  pld = pld_reference.pld_epsilon(composed, 1e-6, 1e-4)
  assert exact - 1e-9 <= pld <= exact + 1e-3


@pytest.mark.parametrize("event, fragment", [
    (dp_accounting.LaplaceDpEvent(1.0), "LaplaceDpEvent(noise_multiplier=1.0)"),
    (dp_accounting.PoissonSampledDpEvent(
        0.1, dp_accounting.GaussianDpEvent(1.0)), "PoissonSampledDpEvent"),
    (dp_accounting.ComposedDpEvent([dp_accounting.GaussianDpEvent(1.0),
                                    dp_accounting.LaplaceDpEvent(2.0)]),
     "LaplaceDpEvent(noise_multiplier=2.0)"),
    (dp_accounting.GaussianDpEvent(-1.0), "-1.0"),
])
def test_effective_noise_multiplier_refuses_unsupported(event, fragment):
  with pytest.raises(ValueError) as info:
    effective_noise_multiplier(event)
  assert fragment in str(info.value)


def test_effective_noise_multiplier_refuses_non_events():
  with pytest.raises(TypeError, match="1.5"):
    effective_noise_multiplier(1.5)

