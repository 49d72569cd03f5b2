"""Bad input of the accounting modules is refused by name.

gaussian_accounting, poisson_accounting, adaptive_split and ledger raise
TypeError / ValueError whose message names the argument and shows the value.
"""

import math

import dp_accounting
import pytest

from tff_canary.stats.accounting import adaptive_split
from tff_canary.stats.accounting import gaussian_accounting
from tff_canary.stats.accounting import ledger
from tff_canary.stats.accounting import poisson_accounting


def _ledger():
  return ledger.Ledger([dp_accounting.GaussianDpEvent(0.7)] * 3)


@pytest.mark.parametrize("call, error, fragments", [
    (lambda: gaussian_accounting.gaussian_epsilon(-0.5, 1e-6), ValueError,
     ("noise_multiplier", "-0.5")),
    (lambda: gaussian_accounting.gaussian_epsilon(1.0, 0.0), ValueError,
     ("delta", "0.0")),
    (lambda: gaussian_accounting.gaussian_epsilon(1.0, 1.5), ValueError,
     ("delta", "1.5")),
    (lambda: gaussian_accounting.gaussian_epsilon("1.0", 1e-6), TypeError,
     ("noise_multiplier", "'1.0'")),
    (lambda: gaussian_accounting.gaussian_epsilon(float("nan"), 1e-6),
     ValueError, ("noise_multiplier", "nan")),
    (lambda: gaussian_accounting.gaussian_epsilon(math.inf, 1e-6), ValueError,
     ("noise_multiplier", "inf")),
    (lambda: gaussian_accounting.gaussian_noise_multiplier(-1.0, 1e-6),
     ValueError, ("epsilon", "-1.0")),
    (lambda: gaussian_accounting.gaussian_noise_multiplier(1.0, None),
     TypeError, ("delta", "None")),
    (lambda: gaussian_accounting.gaussian_delta(1.0, -2.0), ValueError,
     ("epsilon", "-2.0")),
    (lambda: gaussian_accounting.repeated_epsilon(1.0, 0, 1e-6), ValueError,
     ("participations", "0")),
    (lambda: gaussian_accounting.repeated_epsilon(1.0, 2.5, 1e-6), TypeError,
     ("participations", "2.5")),
    (lambda: poisson_accounting.poisson_epsilon(1.0, 0.0, 10, 1e-6),
     ValueError, ("sampling_probability", "0.0")),
    (lambda: poisson_accounting.poisson_epsilon(1.0, 1.2, 10, 1e-6),
     ValueError, ("sampling_probability", "1.2")),
    (lambda: poisson_accounting.poisson_epsilon(1.0, 0.1, 0, 1e-6),
     ValueError, ("rounds", "0")),
    (lambda: poisson_accounting.poisson_epsilon(1.0, 0.1, True, 1e-6),
     TypeError, ("rounds", "True")),
    (lambda: poisson_accounting.poisson_epsilon(1.0, 0.1, 10, 1e-6, "moments"),
     ValueError, ("accountant", "'moments'")),
    (lambda: adaptive_split.adaptive_clipping_noise_multipliers(1.0, 0.0),
     ValueError, ("clients_per_round", "0.0")),
    (lambda: adaptive_split.adaptive_clipping_noise_multipliers(
        1.0, 100, -1.0), ValueError, ("clipped_count_stddev", "-1.0")),
    (lambda: _ledger().epsilon_poisson(2.0, 1e-6), ValueError,
     ("sampling_probability", "2.0")),
    (lambda: _ledger().epsilon_one_participation(-1e-6), ValueError,
     ("delta", "-1e-06")),
    (lambda: _ledger().epsilon_poisson(0.1, 1e-6, accountant="x"),
     ValueError, ("accountant", "'x'")),
])
def test_bad_input_is_named(call, error, fragments):
  with pytest.raises(error) as info:
    call()
  message = str(info.value)
  for fragment in fragments:
    assert fragment in message, message
