"""Flower's DP planted bugs as a user or a library would write them (issue 36).

The Flower analogue of `planted_bugs.py`: four bugs, each an ordinary
subclass of one of Flower 1.42's DP strategies overriding the one step it
gets wrong (no Flower module is patched), or a user's ClientApp built
without the mod its strategy needs; what catches each, measured by
`bench/flower_audit.py` (docs/benchmarks.md, "Flower"):

* `NoiseOverNSquared`: server-side fixed clipping whose noise std is
  z C / n^2 instead of z C / n (flwr/serverapp/strategy/dp_fixed_clipping.py
  adds `noise_multiplier * clipping_norm / num_sampled_clients`): n x less
  noise than claimed. Caught by the noise self-test (variance n^-2 of the
  claim) and by the audit (canaries at C / n stand n noise sds out).
* `SeedEveryRound`: server-side fixed clipping that calls
  `np.random.seed(s)` before each round's noise "for reproducibility": the
  same noise every round, which cancels in w_T - w_0's differences and
  averages nothing. Caught by the noise self-test (bit-identical noise in
  two rounds; in a run, the same np.random state before two rounds' noise).
* `CountWithoutNoise`: server-side adaptive clipping whose clipped-count
  fraction is released without its noise (Andrew et al. 2021, arXiv
  1905.03871, Alg. 1: b_t = (sum of bits + N(0, sigma_b^2)) / n): the clip's
  update leaks the count. Caught by the noise self-test (the count's noise,
  read back from the clip's update, is 0 in every round).
* `client_app_without_clipping_mod`: client-side fixed clipping whose
  ClientApp has no `fixedclipping_mod` (flwr/clientapp/mod/
  centraldp_mods.py): nothing clips, so a client moves the mean by its own
  norm, not C. Flower's strategy does not notice (it only reads the
  replies); caught by the audit (canary clients of norm 10 C score ten
  noise sds instead of one).
"""

from __future__ import annotations

from typing import Callable

import numpy as np
from flwr.app import Array, ArrayRecord, Context, Message
from flwr.clientapp import ClientApp
from flwr.serverapp.strategy import DifferentialPrivacyServerSideAdaptiveClipping
from flwr.serverapp.strategy import DifferentialPrivacyServerSideFixedClipping
from flwr.supercore.differential_privacy import add_gaussian_noise_inplace

from tff_canary.mechanisms.gaussian import flower_clients
from tff_canary.stats import validation

# The seed `SeedEveryRound` resets np.random to before each round's noise.
RESET_SEED = 1234


class NoiseOverNSquared(DifferentialPrivacyServerSideFixedClipping):
  """Planted: the noise std z C / n^2 instead of z C / n (module
  docstring); caught by the noise self-test and the audit."""

  def _add_noise_to_aggregated_arrays(self, aggregated):
    arrays = aggregated.to_numpy_ndarrays()
    add_gaussian_noise_inplace(arrays, self.noise_multiplier
                               * self.clipping_norm
                               / self.num_sampled_clients**2)
    return ArrayRecord({k: Array(v) for k, v in zip(aggregated.keys(),
                                                    arrays)})


class SeedEveryRound(DifferentialPrivacyServerSideFixedClipping):
  """Planted: np.random reseeded (`RESET_SEED`) before every round's noise
  draw, as a library "for reproducibility" would (module docstring);
  caught by the noise self-test."""

  def _add_noise_to_aggregated_arrays(self, aggregated):
    np.random.seed(RESET_SEED)
    return super()._add_noise_to_aggregated_arrays(aggregated)


class CountWithoutNoise(DifferentialPrivacyServerSideAdaptiveClipping):
  """Planted: adaptive clipping's clipped-count fraction released without
  its noise N(0, sigma_b^2) / n (module docstring); caught by the noise
  self-test."""

  def _noisy_fraction(self, count, total):
    return count / total


def client_app_without_clipping_mod(
    train: Callable[[Message, Context], Message]) -> ClientApp:
  """Planted: a user's ClientApp for client-side fixed clipping built
  without `fixedclipping_mod`: `ClientApp()` where `ClientApp(mods=
  [fixedclipping_mod])` was needed (module docstring); caught by the audit.

  Args:
    train: The user's train function, `train(message, context)` returning
      the reply `Message`; registered under `@app.train()` with the canary
      clients' decorator (`flower_clients.canary_train`), as a user of
      `CanaryClients` writes it.
  """
  if not callable(train):
    raise TypeError(f"train must be a train function, got "
                    f"{validation.show(train)} of type {type(train).__name__}.")
  app = ClientApp()  # the bug: mods=[fixedclipping_mod] is missing
  app.train()(flower_clients.canary_train()(train))
  return app


__all__ = ["CountWithoutNoise", "NoiseOverNSquared", "RESET_SEED",
           "SeedEveryRound", "client_app_without_clipping_mod"]
