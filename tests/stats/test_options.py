"""The string options of the stats layer refuse a wrong value by name.

Each option is a `typing.Literal` alias in the module that owns it
(`estimates.Method`, `lower_bounds.Correction`, ...), checked at run time by
`validation.as_choice`: a wrong value must raise ValueError whose message
names the argument, shows the value and lists every value of the alias.
"""

import typing

import dp_accounting
import numpy as np
import pytest

from tff_canary.stats.canaries import client_sampling
from tff_canary.stats.canaries import cosine_table
from tff_canary.stats.estimators import estimates
from tff_canary.stats.bounds import fdp_one_run
from tff_canary.stats.simulation import gaussian_mechanism
from tff_canary.stats.accounting import ledger
from tff_canary.stats.bounds import lower_bounds
from tff_canary.stats.accounting import poisson_accounting
from tff_canary.stats.bounds import threshold_strategies
from tff_canary.stats.bounds import tight_one_run

GOOD = np.array([0.001, 0.002, 0.0015, 0.0005])


def _table():
  return cosine_table.CosineTable(
      id=np.arange(4), group=np.array(["inserted"] * 2 + ["held_out"] * 2),
      participation=np.array([1, 1, 0, 0]), final_cosine=GOOD,
      max_cosine=np.full(4, np.nan), max_round=np.full(4, -1), seed=0,
      dim=1000, num_rounds=2, rounds_recorded=0)


# (argument, its Literal alias, a call with the option set to the value).
OPTIONS = [
    ("method", estimates.Method, lambda v: estimates.epsilon_final(
        GOOD, dim=10**6, delta=1e-6, method=v)),
    ("correction", lower_bounds.Correction, lambda v: lower_bounds.epsilon_lo(
        GOOD, dim=10**6, delta=1e-6, correction=v)),
    ("accountant", poisson_accounting.Accountant,
     lambda v: poisson_accounting.poisson_epsilon(1.0, 0.1, 10, 1e-6,
                                                  accountant=v)),
    ("accountant", poisson_accounting.Accountant,
     lambda v: ledger.Ledger([dp_accounting.GaussianDpEvent(1.0)])
     .epsilon_poisson(0.1, 1e-6, accountant=v)),
    ("simulator", gaussian_mechanism.Simulator,
     lambda v: gaussian_mechanism.simulate(
         dim=100, num_inserted=2, num_held_out=2, noise_std=1.0, seed=0,
         simulator=v)),
    ("simulator", gaussian_mechanism.Simulator,
     lambda v: gaussian_mechanism.simulate_coin(
         dim=100, num_candidates=4, noise_std=1.0, seed=0, simulator=v)),
    ("sampling", client_sampling.Sampling,
     lambda v: client_sampling.ClientSampler(10, 2, sampling=v)),
    ("group", cosine_table.Group, lambda v: _table().mask(v)),
    ("strategy", threshold_strategies.Strategy,
     lambda v: fdp_one_run.fdp_one_run_bound(
         GOOD, np.array([True, False, True, False]), delta=1e-6,
         strategy=v)),
    ("strategy", threshold_strategies.Strategy,
     lambda v: tight_one_run.tight_one_run_bound(
         GOOD, np.array([True, False, True, False]), delta=1e-6,
         strategy=v)),
]


@pytest.mark.parametrize("wrong", ["x", None])
@pytest.mark.parametrize("name, alias, call", OPTIONS)
def test_a_wrong_option_is_refused_by_name(name, alias, call, wrong):
  with pytest.raises(ValueError) as info:
    call(wrong)
  message = str(info.value)
  assert message.startswith(f"{name} must be one of"), message
  assert message.endswith(f"got {wrong!r}."), message
  for value in typing.get_args(alias):
    assert repr(value) in message, (value, message)
