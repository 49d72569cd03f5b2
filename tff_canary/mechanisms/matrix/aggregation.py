"""Matrix-factorization DP-FTRL with canaries: `MatrixAggregation`.

`matrix_query.MatrixFactorizationQuery` adds w_t, row t of C^-1 xi, to round
t's clipped sum (banded or BLT Toeplitz C). `MatrixAggregation` describes it
to `CanaryDPFactory` (`query_noise`): the query is built from the value's
specs at `create` (`sum_query`), and its `query_noise` says the noise is
correlated across rounds with multiplier z, so each round reports every
orthogonal canary's score

    u_{j,t} = <c_j, S_t> / (z C),

S_t the round's noised sum. A canary in round t adds exactly 1/z, and the
rows u_j are u_j ~ N(a_j / z, K) with K = C^-1 C^-T (block-diagonal with
`restart_every`): `noise(T)` is that `LinearNoise`
(`tff_canary.stats.matrix.strategy_noise`), whose statistics
(`tff_canary.stats.correlated`) the scores take, as the tree's do
(`tff_canary.mechanisms.tree.aggregation`). With z = 0 the unit is C, a
canary adds 1; `check_rounds` is the correlated noise check's default span.

`tff_factory` is TFF's own `DifferentiallyPrivateFactory` over the same
query, for canary clients or for BLT / banded DP-FTRL without canaries.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Optional

import numpy as np
import tensorflow_federated as tff
import tensorflow_privacy as tfp

from tff_canary.federated.insertion import query_noise
from tff_canary.federated.runtime import worker_guard
from tff_canary.mechanisms.correlated import noise_check as correlated_check
from tff_canary.mechanisms.matrix import query as matrix_query
from tff_canary.stats import validation
from tff_canary.stats.canaries import schedules
from tff_canary.stats.correlated import linear_noise
from tff_canary.stats.matrix import blt as blt_lib
from tff_canary.stats.matrix import strategy_noise
from tff_canary.stats.matrix import toeplitz

worker_guard.install()


@dataclasses.dataclass(frozen=True)
class MatrixAggregation:
  """A matrix-mechanism sum query, before the value's specs are known.

  Attributes:
    noise_multiplier: z >= 0: xi's std is z C.
    clip: C > 0, the L2 clip of every record.
    coefficients: A banded C's c_0 .. c_{b-1} (`banded_square_root`), or
      None with `strategy`.
    strategy: A BLT C (`tff_canary.stats.matrix.blt`), or None.
    restart_every: None, or E: the noise restarts every E rounds.
    noise_seed: None (unseeded) or the seed of xi (`matrix_query`). Never in
      deployment.
  """

  noise_multiplier: float
  clip: float
  coefficients: Optional[Any] = None
  strategy: Optional[blt_lib.BLT] = None
  restart_every: Optional[int] = None
  noise_seed: Optional[int] = None

  def __post_init__(self):
    def set_(name, value):
      object.__setattr__(self, name, value)

    set_("noise_multiplier", validation.as_nonnegative(self.noise_multiplier,
                                                       "noise_multiplier"))
    set_("clip", validation.as_positive(self.clip, "clip"))
    if (self.coefficients is None) == (self.strategy is None):
      raise ValueError("give exactly one of coefficients (banded C) and "
                       "strategy (BLT C).")
    if self.coefficients is not None:
      set_("coefficients", tuple(
          toeplitz.as_coefficients(self.coefficients).tolist()))
    elif not isinstance(self.strategy, blt_lib.BLT):
      raise TypeError(f"strategy must be a BLT (tff_canary.stats.matrix.blt."
                      f"blt), got {validation.show(self.strategy)}.")
    if self.restart_every is not None:
      set_("restart_every", validation.as_int(self.restart_every,
                                              "restart_every", minimum=1))
    if self.noise_seed is not None:
      set_("noise_seed", schedules.as_seed(self.noise_seed, "noise_seed"))

  @classmethod
  def banded_square_root(cls, noise_multiplier: float, clip: float,
                         bands: int, **kwargs) -> "MatrixAggregation":
    """The b-banded square root (Choquette-Choo et al. 2023, arXiv
    2306.08153); keyword arguments `restart_every`, `noise_seed`."""
    return cls(noise_multiplier, clip,
               coefficients=toeplitz.square_root_coefficients(bands),
               **kwargs)

  @classmethod
  def blt(cls, noise_multiplier: float, clip: float, strategy: blt_lib.BLT,
          **kwargs) -> "MatrixAggregation":
    """A BLT (Dvijotham et al. 2024, arXiv 2404.16706; McMahan, Xu & Zhang
    2024, arXiv 2408.08868, Alg. 3); keyword arguments as
    `banded_square_root`'s."""
    return cls(noise_multiplier, clip, strategy=strategy, **kwargs)

  def sum_query(self, record_specs: Any
                ) -> matrix_query.MatrixFactorizationQuery:
    """The `MatrixFactorizationQuery` for values of `record_specs`."""
    return matrix_query.MatrixFactorizationQuery(
        record_specs, self.clip, self.noise_multiplier,
        coefficients=self.coefficients, strategy=self.strategy,
        noise_seed=self.noise_seed, restart_every=self.restart_every)

  def tff_factory(self, record_specs: Any, clients_per_round: float
                  ) -> tff.aggregators.DifferentiallyPrivateFactory:
    """TFF's own `DifferentiallyPrivateFactory` over `sum_query` in a
    `tfp.NormalizedQuery` of `clients_per_round`: no canaries."""
    clients_per_round = validation.as_positive(clients_per_round,
                                               "clients_per_round")
    return tff.aggregators.DifferentiallyPrivateFactory(tfp.NormalizedQuery(
        self.sum_query(record_specs), denominator=clients_per_round))

  @property
  def query_noise(self) -> query_noise.QueryNoise:
    """Correlated noise of multiplier z (module docstring)."""
    return query_noise.QueryNoise(noise_multiplier=self.noise_multiplier)

  def check_canaries(self, unused_canaries: Any) -> None:
    """Nothing to refuse: xi's keys are `seeded_query`'s, never a canary's."""

  def coefficients_of(self, rounds: int) -> np.ndarray:
    """C's c_0 .. c_{rounds-1}."""
    if self.strategy is not None:
      return self.strategy.coefficients(rounds)
    return toeplitz.padded(self.coefficients, rounds)

  def noise(self, num_rounds: int) -> linear_noise.LinearNoise:
    """The released noise of `num_rounds` rounds in units of z C: B = C^-1
    per block (its `covariance` is the scores' K, module docstring)."""
    n = validation.as_int(num_rounds, "num_rounds", minimum=1)
    return strategy_noise.strategy_noise(self.coefficients_of(n), n,
                                         restart_every=self.restart_every)

  @property
  def check_rounds(self) -> int:
    """The correlated noise check's default rounds: two restarts
    (`correlated.noise_check.default_rounds`)."""
    return correlated_check.default_rounds(restart_period=self.restart_every)


__all__ = ["MatrixAggregation"]
