"""A DP-FedAvg aggregation factory that inserts random canary clients.

`CanaryDPFactory` is TFF's `tff.aggregators.DifferentiallyPrivateFactory` with
one step added: after the clients' clipped records are summed and before the
query adds noise, the server adds this round's canaries to the query's sample
state, each exactly at the round's clip norm C_t (docs/method/canaries.md; Andrew et al.,
"One-shot Empirical Privacy Estimation for Federated Learning", ICLR 2024,
arXiv 2302.03098, Algorithm 1). A canary therefore passes through the same
path as a client record: clipping (a no-op at norm C_t), the same noise, the
same normalization by the fixed `clients_per_round` (canaries do not change
the denominator). Server-side canaries change nothing a real client sees.
The process, its state and its measurements are `canary_process`. As in
TFF, the factory does not know its mechanism: the query is, and what the
canaries need of it is its `query_noise.QueryNoise`. A mechanism's own
constructors live in its package (DP-FTRL's trees:
`tff_canary.mechanisms.tree.aggregation`).

Zeroing (`canary_dp_aggregator(..., zeroing=True)`, like
`tff.learning.dp_aggregator`) wraps OUTSIDE the DP factory and zeroes client
values before it; canaries are added inside, at the server, so they are
never zeroed. The zeroed factory (`ZeroedFactory`) keeps the one inside,
`inner_factory`. The noise self-test (`tff_canary.mechanisms.canary_noise_check`)
runs on the factory built again without canaries (`without_canaries`).

Noise. With `noise_seed=None` (the default) the query's unseeded noise, as
in TFF (a resumed run repeats the canaries, not the noise); with
`noise_seed=s` the same noise from seed s (`seeded_query`), the draw counter
in the query's state, so a resumed run equals an uninterrupted one. Only for
simulation: whoever knows the seed can subtract the noise.
"""

from __future__ import annotations

import dataclasses
import importlib
import math
from typing import Any, Optional
import warnings

import tensorflow_federated as tff
import tensorflow_privacy as tfp

from tff_canary.federated.insertion import adaptive_clip
from tff_canary.federated.insertion import canary_process
from tff_canary.federated.insertion import construction
from tff_canary.federated.insertion import query_noise
from tff_canary.federated.insertion import seeded_query
from tff_canary.federated.structures import flat_layout
from tff_canary.federated.runtime import worker_guard
from tff_canary.stats.canaries import canary_config
from tff_canary.stats.canaries import schedules
from tff_canary.stats import validation

worker_guard.install()

# TFF's default adaptive zeroing (`tff.learning.dp_aggregator(...,
# zeroing=True)`): zero a client value whose norm exceeds 2x the estimated
# 0.98 quantile of the norms seen, plus 1; the estimate starts at 10 and moves
# geometrically at rate log(10) per round, without noise. TFF 0.87 keeps these
# numbers in a private function (`model_update_aggregator._default_zeroing`);
# they are repeated here to build the same wrapper from public symbols, and
# tests/federated/insertion/test_factory.py checks the result against `tff.learning.dp_aggregator`
# round by round.
_ZEROING_QUANTILE = dict(initial_estimate=10.0, target_quantile=0.98,
                         learning_rate=math.log(10.0), multiplier=2.0,
                         increment=1.0)

# Seeded noise of the noise self-test (`without_canaries`) is drawn from
# noise_seed + this tag, never from the run's own noise_seed.
NOISE_CHECK_SEED_TAG = 0xC4EC


def _moved_to_tree(name: str) -> Any:
  """`tff_canary.mechanisms.tree.aggregation`'s `name`, warning that the
  factory's old name moved there (imported here, when called: the federated
  layer imports no mechanism)."""
  new = f"tff_canary.mechanisms.tree.aggregation.{name}"
  warnings.warn(f"CanaryDPFactory.{name} moved to {new}; the old name will "
                "be removed in the next release", DeprecationWarning,
                stacklevel=3)
  return getattr(importlib.import_module("tff_canary.mechanisms.tree."
                                         "aggregation"), name)


class CanaryDPFactory(tff.aggregators.UnweightedAggregationFactory):
  """`UnweightedAggregationFactory` for DP queries, with canary clients.

  Wraps a DP sum query like `tff.aggregators.DifferentiallyPrivateFactory`
  and adds the canaries of a `CanaryConfig` at the server, at the round's
  clip norm (module docstring). Its named constructors build TFF's queries
  of DP-FedAvg, `gaussian_fixed` and `gaussian_adaptive` (DP-FTRL's are in
  the tree's package: `tff_canary.mechanisms.tree.aggregation.
  tree_aggregation`, `tree_adaptive`); `canary_dp_aggregator` is the analogue of
  `tff.learning.dp_aggregator`. Each takes, besides its own arguments:

    noise_multiplier: z >= 0; for the adaptive ones the effective total
      one, split by TFF's `adaptive_clip_noise_params` into the value's and
      the clipped count's.
    clients_per_round: Expected clients per round (> 0), the denominator.
    canaries: The `CanaryConfig`.
    noise_seed: None (TFF's unseeded noise) or a seed of reproducible
      simulation noise (module docstring).
      Never in deployment.

  and returns a `CanaryDPFactory`, raising TypeError or ValueError for a
  bad argument, naming it.
  """

  @construction.remembered
  def gaussian_adaptive(
      cls,
      noise_multiplier: float,
      clients_per_round: float,
      initial_l2_norm_clip: float = 0.1,
      target_unclipped_quantile: float = 0.5,
      learning_rate: float = 0.2,
      clipped_count_stddev: Optional[float] = None,
      *,
      canaries: canary_config.CanaryConfig,
      noise_seed: Optional[int] = None,
  ) -> CanaryDPFactory:
    """Adaptive clipping and Gaussian noise, with canaries.

    The query TFF's `DifferentiallyPrivateFactory.gaussian_adaptive` builds:
    DP-FedAvg (McMahan et al. 2018, https://arxiv.org/abs/1710.06963) with the
    geometric adaptive clip of Andrew et al. 2021
    (https://arxiv.org/abs/1905.03871): from `initial_l2_norm_clip` (> 0)
    towards the `target_unclipped_quantile` (in [0, 1]) at `learning_rate`
    (>= 0), the clipped count noised with std `clipped_count_stddev` (>= 0;
    None: TFF's default 0.05 * clients_per_round, 0 without noise).
    Canaries (Andrew et al. 2024, arXiv 2302.03098) are added at each
    round's clip and do not vote in the quantile estimate.
    """
    value_noise_multiplier, clip, adaptive = adaptive_clip.from_arguments(
        noise_multiplier, clients_per_round, initial_l2_norm_clip,
        target_unclipped_quantile, learning_rate, clipped_count_stddev,
        "learning_rate")
    arguments = dict(initial_l2_norm_clip=clip,
                     noise_multiplier=value_noise_multiplier,
                     geometric_update=True, **dataclasses.asdict(adaptive))
    query = (tfp.QuantileAdaptiveClipSumQuery(**arguments)
             if noise_seed is None else
             seeded_query.SeededQuantileAdaptiveClipSumQuery(
                 **arguments, noise_seed=noise_seed))
    return cls(query, canaries, clients_per_round=adaptive.expected_num_records)

  @construction.remembered
  def gaussian_fixed(
      cls,
      noise_multiplier: float,
      clients_per_round: float,
      clip: float,
      *,
      canaries: canary_config.CanaryConfig,
      noise_seed: Optional[int] = None,
  ) -> CanaryDPFactory:
    """Fixed clipping and Gaussian noise, with canaries.

    The query TFF's `DifferentiallyPrivateFactory.gaussian_fixed` builds
    (DP-FedAvg, McMahan et al. 2018, https://arxiv.org/abs/1710.06963): clip
    each record to L2 norm `clip` (> 0), add N(0, (z * clip)^2) to the sum,
    divide by `clients_per_round`. Canaries (Andrew et al. 2024, arXiv
    2302.03098) enter the sum at norm `clip`.
    """
    noise_multiplier, clients_per_round = construction.noise_arguments(
        noise_multiplier, clients_per_round)
    clip = validation.as_positive(clip, "clip")
    arguments = dict(l2_norm_clip=clip, stddev=clip * noise_multiplier)
    query = (tfp.GaussianSumQuery(**arguments) if noise_seed is None else
             seeded_query.SeededGaussianSumQuery(**arguments,
                                                 noise_seed=noise_seed))
    return cls(query, canaries, clients_per_round=clients_per_round)

  @classmethod
  def tree_aggregation(cls, *args: Any, **kwargs: Any) -> CanaryDPFactory:
    """Deprecated: DP-FTRL's `tff_canary.mechanisms.tree.aggregation.
    tree_aggregation` (the same call), for one release."""
    return _moved_to_tree("tree_aggregation")(*args, **kwargs)

  @classmethod
  def tree_adaptive(cls, *args: Any, **kwargs: Any) -> CanaryDPFactory:
    """Deprecated: DP-FTRL's `tff_canary.mechanisms.tree.aggregation.
    tree_adaptive` (the same call), for one release."""
    return _moved_to_tree("tree_adaptive")(*args, **kwargs)

  def __init__(
      self,
      sum_query: Any,
      canaries: canary_config.CanaryConfig,
      *,
      clients_per_round: Optional[float] = None,
      record_aggregation_factory: Optional[
          tff.aggregators.UnweightedAggregationFactory] = None,
  ):
    """Initializes the factory.

    Args:
      sum_query: A `tfp.GaussianSumQuery` or `tfp.QuantileAdaptiveClipSumQuery`
        (or a subclass, such as `seeded_query`'s), or a described query
        (`query_noise`) such as DP-FTRL's `TreeAggregation`.
      canaries: The `CanaryConfig`.
      clients_per_round: None (the aggregate is the noised sum) or the fixed
        denominator d > 0: the factory then aggregates with
        `tfp.NormalizedQuery(sum_query, d)`, what TFF's named constructors
        build.
      record_aggregation_factory: Aggregates the clients' clipped records, as
        in TFF's factory (default `tff.aggregators.SumFactory`); it must
        implement a sum that does not increase sensitivity.

    Raises:
      TypeError: for a query or factory of another kind (a
        `tfp.NormalizedQuery` too: pass its numerator and denominator; a
        tensorflow_privacy tree query: pass a `TreeAggregation`), or a
        `canaries` that is not a `CanaryConfig`.
      ValueError: for a `clients_per_round` <= 0, or canaries that the
        query's noise would draw (`check_canaries`: a tree's `noise_seed`).
    """
    self._sum_query = query_noise.describe(sum_query)
    if clients_per_round is not None:
      clients_per_round = validation.as_positive(clients_per_round,
                                                 "clients_per_round")
    self._noise = dataclasses.replace(self._sum_query.query_noise,
                                      denominator=clients_per_round)
    self._canaries = construction.as_canaries(canaries)
    self._sum_query.check_canaries(self._canaries)
    self._record_aggregation_factory = construction.as_unweighted_factory(
        record_aggregation_factory, "record_aggregation_factory",
        tff.aggregators.SumFactory)
    # A named constructor replaces this record with its own call.
    self._construction = construction.Construction(None, dict(
        sum_query=sum_query, clients_per_round=clients_per_round,
        record_aggregation_factory=record_aggregation_factory))

  @property
  def canaries(self) -> canary_config.CanaryConfig:
    return self._canaries

  @property
  def construction(self) -> construction.Construction:
    """The constructor and arguments this factory was built with."""
    return self._construction

  @property
  def query_noise(self) -> query_noise.QueryNoise:
    """What the canaries need of the query (`query_noise`)."""
    return self._noise

  @property
  def described_query(self) -> Any:
    """The sum query as described (`query_noise`): a `query_noise.GivenQuery`
    around a tensorflow_privacy query, or the mechanism's own description
    (DP-FTRL's `tff_canary.mechanisms.tree.aggregation.TreeAggregation`, a
    matrix mechanism's `MatrixAggregation`)."""
    return self._sum_query

  @property
  def tree(self) -> Any:
    """Deprecated: `tff_canary.mechanisms.tree.aggregation.tree_of(factory)`
    (DP-FTRL's `TreeAggregation`, or None), for one release."""
    return _moved_to_tree("tree_of")(self)

  def without_canaries(self, num_rounds: int) -> CanaryDPFactory:
    """This aggregator without canaries, for the noise self-test.

    Built again by the same constructor from the same arguments
    (`construction`) with no canary in `num_rounds` rounds (same seed and
    directions, nothing recorded); seeded noise (`noise_seed=s`) from
    s + `NOISE_CHECK_SEED_TAG`: the same code path, never the run's draws.
    `CanaryDPFactory(sum_query, ...)`'s copy shares the query (and its seed).
    """
    no_canaries = canary_config.CanaryConfig(
        seed=self._canaries.seed, num_inserted=0, num_held_out=0,
        schedule=schedules.FixedPresentations(num_rounds=num_rounds,
                                              presentations=0),
        record_aggregates=False, directions=self._canaries.directions)
    changed = {}
    noise_seed = self._construction.arguments.get("noise_seed")
    if noise_seed is not None:
      changed["noise_seed"] = noise_seed + NOISE_CHECK_SEED_TAG
    return self._construction.build(type(self), no_canaries, **changed)

  def create(self, value_type) -> tff.templates.AggregationProcess:
    """Builds the aggregation process for `value_type` (the model weights).

    Warns (`tff_canary.stats.canaries.canary_config.TooManyCanariesWarning`) when the
    number of canaries exceeds dim / 100.
    """
    value_type = tff.types.to_type(value_type)
    try:
      specs = tff.types.type_to_tf_tensor_specs(value_type)
    except Exception as e:  # pylint: disable=broad-except
      raise TypeError(f"value_type must be a structure of tensors, got "
                      f"{value_type}: {e}") from None
    dim = flat_layout.tensor_specs_dim(specs)
    if self._canaries.directions == "gaussian":  # orthogonal: `rows` checks
      canary_config.check_orthogonality(self._canaries.num_canaries, dim)
    return canary_process.build(
        self._sum_query.sum_query(specs), self._noise, self._canaries,
        self._record_aggregation_factory, value_type, specs, dim)


class ZeroedFactory(tff.aggregators.UnweightedAggregationFactory):
  """An unweighted factory under TFF's default adaptive zeroing
  (`with_zeroing`) that keeps it: `inner_factory` (TFF's own wrapper holds
  it in a closure only). Its processes are `tff.aggregators.zeroing_factory`'s
  (the inner state under 'inner_agg', its measurements under 'zeroing')."""

  def __init__(self, inner_factory):
    if not isinstance(inner_factory,
                      tff.aggregators.UnweightedAggregationFactory):
      raise TypeError("inner_factory must be a tff.aggregators."
                      "UnweightedAggregationFactory, got "
                      f"{validation.show(inner_factory)}.")
    self._inner_factory = inner_factory
    zeroing_norm = tff.aggregators.PrivateQuantileEstimationProcess.no_noise(
        **_ZEROING_QUANTILE)
    self._zeroed = tff.aggregators.zeroing_factory(zeroing_norm,
                                                   inner_factory)

  @property
  def inner_factory(self) -> tff.aggregators.UnweightedAggregationFactory:
    return self._inner_factory

  def create(self, value_type) -> tff.templates.AggregationProcess:
    return self._zeroed.create(value_type)


def with_zeroing(inner_factory) -> ZeroedFactory:
  """Wraps an unweighted factory in TFF's default adaptive zeroing.

  The zeroing of `tff.learning.dp_aggregator(..., zeroing=True)`, built from
  `tff.aggregators.zeroing_factory` and
  `tff.aggregators.PrivateQuantileEstimationProcess.no_noise` with TFF's
  numbers (`_ZEROING_QUANTILE`) and TFF's default norm order. With a
  `CanaryDPFactory` inside, it zeroes client values only (module docstring).
  """
  return ZeroedFactory(inner_factory)


def canary_dp_aggregator(
    noise_multiplier: float,
    clients_per_round: float,
    canaries: canary_config.CanaryConfig,
    zeroing: bool = True,
    noise_seed: Optional[int] = None,
) -> tff.aggregators.UnweightedAggregationFactory:
  """`tff.learning.dp_aggregator` with canaries.

  Adaptive clipping and Gaussian noise with TFF's defaults
  (`CanaryDPFactory.gaussian_adaptive`, whose arguments these are; McMahan
  et al. 2018, Andrew et al. 2021), wrapped, with `zeroing`, in TFF's default
  adaptive zeroing (`with_zeroing`), which never zeroes a canary.
  """
  zeroing = validation.as_bool(zeroing, "zeroing")
  factory = CanaryDPFactory.gaussian_adaptive(noise_multiplier,
                                              clients_per_round,
                                              canaries=canaries,
                                              noise_seed=noise_seed)
  return with_zeroing(factory) if zeroing else factory


__all__ = [
    "CanaryDPFactory",
    "ZeroedFactory",
    "canary_dp_aggregator",
    "with_zeroing",
]
