"""ddp_parameters against a real TFF DistributedDpSumFactory's own state.

The class is not exported from `tff.aggregators` in TFF 0.87 (its public
entry, `tff.learning.ddp_secure_aggregator`, fixes zeroing and adaptive
clipping), so this test imports it from its module. The state after
`initialize()` holds the scale, the query's integer L2 (and L1) norm bound and
local std: the numbers `stats.ddp_parameters` recomputes in NumPy. TFF holds
them in float32, hence rtol 1e-5 (float32 epsilon is 1.2e-7; the bound goes
through a few float32 operations).
"""

import warnings

import numpy as np
import pytest
import tensorflow_federated as tff
from tensorflow_federated.python.aggregators import distributed_dp

from tff_canary.federated.runtime import worker_guard
from tff_canary.stats.accounting import ddp_parameters

# Importing worker_guard does not guard: install() does (before the first
# computation), so that the worker is stopped at exit (tests/conftest.py
# installs it too, for any file that imports TFF).
worker_guard.install()

CASES = [
    dict(noise_multiplier=1.0, clients=40, bits=12, beta=0.0,
         mechanism="distributed_skellam", rotation="dft", dim=4095),
    dict(noise_multiplier=0.7, clients=16, bits=8, beta=np.exp(-0.5),
         mechanism="distributed_dgauss", rotation="hd", dim=1000),
    dict(noise_multiplier=2.0, clients=100, bits=16, beta=np.exp(-0.5),
         mechanism="distributed_skellam", rotation="hd", dim=3000),
]


@pytest.mark.parametrize("case", CASES, ids=lambda c: c["mechanism"] + str(c["bits"]))
def test_parameters_equal_the_factorys_state(case):
  with warnings.catch_warnings():
    warnings.simplefilter("ignore")  # TFF warns about beta > 0.
    factory = distributed_dp.DistributedDpSumFactory(
        noise_multiplier=case["noise_multiplier"],
        expected_clients_per_round=case["clients"], bits=case["bits"],
        l2_clip=0.5, beta=float(case["beta"]), mechanism=case["mechanism"],
        rotation_type=case["rotation"])
    process = factory.create(tff.TensorType(np.float32, [case["dim"]]))
  state = process.initialize()
  discrete = state[0]["inner_agg"]
  query = discrete["inner_agg_process"].query_state
  ours = ddp_parameters.ddp_parameters(
      case["noise_multiplier"], case["clients"], case["bits"], 0.5,
      case["dim"], beta=float(case["beta"]), mechanism=case["mechanism"],
      rotation=case["rotation"])
  np.testing.assert_allclose(ours.scale, discrete["scale_factor"], rtol=1e-5)
  np.testing.assert_allclose(ours.l2_sensitivity, query.l2_norm_bound,
                             rtol=1e-5)
  np.testing.assert_allclose(ours.scaled_local_std, query.local_stddev,
                             rtol=1e-5)
  if case["mechanism"] == "distributed_skellam":
    assert abs(ours.l1_sensitivity - int(query.l1_norm_bound)) <= 1
