"""DP-FTRL with canaries: the tree-aggregation query, its constructors, scores.

docs/method/dp-ftrl.md ("In TFF"). DP-FTRL (Kairouz et al. 2021, "Practical
and Private (Deep) Learning without Sampling or Shuffling", arXiv
2103.00039, Algorithm 1) noises the prefix sums of the clipped updates
through a binary tree of independent N(0, (z C)^2 I) node noises. TFF builds
it with `DifferentiallyPrivateFactory.tree_aggregation` and `tree_adaptive`;
this module's functions of the same names return a `CanaryDPFactory` whose
query is described as a `TreeAggregation` (node multiplier z, the tree's
shape), built from the value's specs at `create`. Canaries go in as with the
Gaussian queries (`canary_process`), at the tree's `clip_value` C_t.

Scores. With orthogonal canaries each round reports, under
`measurement_keys.TREE_SCORES_KEY`,

    u_{j,t} = <c_j, S_t> / sigma_t,    sigma_t = z C_t,

S_t the round's noised SUM (`query_noise.QueryNoise.scores`) and z the
value tree's node multiplier (`TreeAggregation.noise_multiplier`; for
`tree_adaptive` the one TFF's `adaptive_clip_noise_params` derives). Rows
u_j ~ N(a_j / z, K), K = `TreeAggregation.noise(T).covariance`, for
`tff_canary.stats.correlated.gls_statistics`; with z = 0 the unit is C_t.

Accounting. The tree's per-round DpEvent is `UnsupportedDpEvent`, so the
ledger refuses it (`tff_canary.stats.accounting.effective_noise`); with each
client at most once per tree the claim is
`tff_canary.stats.correlated.tree_accounting.tree_epsilons(z,
rounds_per_tree, delta=...)` with `TreeAggregation.rounds_per_tree(T)` and z
the constructor's `noise_multiplier` (`tree_adaptive`: the effective one).

Noise seed. `noise_seed` is TFF's: tensorflow_privacy draws tensor i of its
k-th node with `stateless_normal(seed=[s + k L + i, s + k L + i])` (L
tensors), the counter in the query's state, so a checkpointed state resumes
the stream. A gaussian canary is `stateless_normal([d], seed=[canary_seed,
j])`, so when noise_seed <= canary_seed < the number of canaries one node
draws canary j = canary_seed: the factory refuses that
(`TreeAggregation.check_canaries`). `tree_adaptive`'s clipped-count tree,
unseeded in tensorflow_privacy, is seeded too (`seeded_query`). Seeded noise
is for simulation only.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Optional
import warnings

import tensorflow_federated as tff
import tensorflow_privacy as tfp

from tff_canary.federated.insertion import adaptive_clip
from tff_canary.federated.insertion import construction
from tff_canary.federated.insertion import factory
from tff_canary.federated.insertion import query_noise
from tff_canary.federated.insertion import seeded_query
from tff_canary.federated.runtime import worker_guard
from tff_canary.mechanisms.correlated import noise_check as correlated_check
from tff_canary.stats.canaries import canary_config
from tff_canary.stats.canaries import schedules
from tff_canary.stats.correlated import tree_noise
from tff_canary.stats import validation

worker_guard.install()


@dataclasses.dataclass(frozen=True)
class TreeAggregation:
  """A DP-FTRL tree-aggregation sum query, before the value's specs are known.

  What `CanaryDPFactory` needs of a tree query that tensorflow_privacy keeps
  private: the node noise multiplier and the tree's shape. Built by
  `tree_aggregation` and `tree_adaptive`; the query itself by `sum_query`.

  Attributes:
    noise_multiplier: z >= 0: the value tree's node noise std is z C.
    clip: C > 0, the clip (the initial clip with `adaptive`).
    efficient: Honaker's efficient tree (`use_efficient`), else the plain
      tree; True with `adaptive` (tensorflow_privacy's only choice there).
    restart_period, restart_warmup: `PeriodicRoundRestartIndicator(period,
      warmup)` of a `tfp.RestartQuery` around the tree, or None (no restart).
    noise_seed: None (a seed from the clock, as in TFF) or the seed of the
      value tree's noise, and with `adaptive` of the clipped count's
      (`seeded_query`; module docstring). Never in deployment.
    adaptive: None (fixed clip) or the `AdaptiveClip`.
  """

  noise_multiplier: float
  clip: float
  efficient: bool = True
  restart_period: Optional[int] = None
  restart_warmup: Optional[int] = None
  noise_seed: Optional[int] = None
  adaptive: Optional[adaptive_clip.AdaptiveClip] = None

  def __post_init__(self):
    def set_(name, value):
      object.__setattr__(self, name, value)

    set_("noise_multiplier", validation.as_nonnegative(self.noise_multiplier,
                                                       "noise_multiplier"))
    set_("clip", validation.as_positive(self.clip, "clip"))
    set_("efficient", validation.as_bool(self.efficient, "efficient"))
    # tree_noise's check is tensorflow_privacy's rule, with the names.
    tree_noise.restart_rounds(0, self.restart_period, self.restart_warmup)
    if self.restart_period is not None:
      set_("restart_period", int(self.restart_period))
    if self.restart_warmup is not None:
      set_("restart_warmup", int(self.restart_warmup))
    if self.noise_seed is not None:
      set_("noise_seed", schedules.as_seed(self.noise_seed, "noise_seed"))
    if self.adaptive is not None:
      if not isinstance(self.adaptive, adaptive_clip.AdaptiveClip):
        raise TypeError(f"adaptive must be None or an AdaptiveClip, got "
                        f"{validation.show(self.adaptive)}.")
      if not self.efficient:
        raise ValueError("efficient must be True with adaptive clipping: "
                         "tfp.QAdaClipTreeResSumQuery uses the efficient "
                         "tree only.")
      if self.noise_seed is not None:
        seeded_query.check_noise_seed(self.noise_seed)

  def sum_query(self, record_specs: Any) -> tfp.DPQuery:
    """The tensorflow_privacy query for values of `record_specs`.

    TFF's construction (`DifferentiallyPrivateFactory.tree_aggregation`,
    `tree_adaptive`) without the `NormalizedQuery`, which the factory adds.
    """
    if self.adaptive is None:
      query = tfp.TreeResidualSumQuery.build_l2_gaussian_query(
          self.clip, self.noise_multiplier, record_specs,
          noise_seed=self.noise_seed, use_efficient=self.efficient)
    else:
      a = self.adaptive
      args = (self.clip, self.noise_multiplier, record_specs,
              a.target_unclipped_quantile, a.learning_rate,
              a.clipped_count_stddev, a.expected_num_records, True)
      query = (tfp.QAdaClipTreeResSumQuery(*args) if self.noise_seed is None
               else seeded_query.SeededQAdaClipTreeResSumQuery(
                   *args, noise_seed=self.noise_seed))
    return self.with_restarts(query)

  def with_restarts(self, query: tfp.DPQuery) -> tfp.DPQuery:
    """`query` in this tree's `tfp.RestartQuery`, or as is without restarts."""
    if self.restart_period is None:
      return query
    return tfp.RestartQuery(
        query, tfp.restart_query.PeriodicRoundRestartIndicator(
            period=self.restart_period, warmup=self.restart_warmup))

  def tff_factory(self, record_specs: Any, clients_per_round: float
                  ) -> tff.aggregators.DifferentiallyPrivateFactory:
    """TFF's own `DifferentiallyPrivateFactory` over this tree, no canaries.

    `sum_query(record_specs)` in a `tfp.NormalizedQuery` of denominator
    `clients_per_round`, as TFF's `tree_aggregation` and `tree_adaptive`
    wrap theirs, given to the public `DifferentiallyPrivateFactory(query)`:
    what canary clients go through (docs/method/dp-ftrl.md), with the
    restarts TFF's `tree_aggregation` has no argument for.
    """
    clients_per_round = validation.as_positive(clients_per_round,
                                               "clients_per_round")
    query = tfp.NormalizedQuery(self.sum_query(record_specs),
                                denominator=clients_per_round)
    return tff.aggregators.DifferentiallyPrivateFactory(query)

  @property
  def query_noise(self) -> query_noise.QueryNoise:
    """Noise correlated across rounds, node multiplier z (module docstring)."""
    return query_noise.QueryNoise(adaptive=self.adaptive is not None,
                                  noise_multiplier=self.noise_multiplier)

  def check_canaries(self, canaries: canary_config.CanaryConfig) -> None:
    """Refuses a `noise_seed` whose node noise would be a gaussian canary.

    Node keys are [n, n] for every n >= noise_seed, canary keys [canary_seed,
    j] (module docstring): they meet for canary j = canary_seed when it
    exists.
    """
    seed = canaries.seed
    if (self.noise_seed is None or canaries.directions != "gaussian"
        or not self.noise_seed <= seed < canaries.num_canaries):
      return
    raise ValueError(
        f"noise_seed={self.noise_seed} with gaussian canaries of seed {seed}: "
        f"tensorflow_privacy seeds tree node noise with [n, n] for n = "
        f"noise_seed, noise_seed + 1, ..., so node n = {seed} would draw "
        f"exactly canary {seed}'s direction (key [{seed}, {seed}]). Choose a "
        f"noise_seed above {seed}, or directions='orthogonal'.")

  def rounds_per_tree(self, num_rounds: int) -> list[int]:
    """The rounds of each tree in a run of `num_rounds` rounds, in order."""
    num_rounds = validation.as_int(num_rounds, "num_rounds", minimum=1)
    ends = [r + 1 for r in tree_noise.restart_rounds(
        num_rounds, self.restart_period, self.restart_warmup)]
    ends = [e for e in ends if e < num_rounds] + [num_rounds]
    return [b - a for a, b in zip([0] + ends[:-1], ends)]

  def noise(self, num_rounds: int) -> tree_noise.TreeNoise:
    """The released noise of `num_rounds` rounds in units of sigma_t (its
    `covariance` is the scores' K, module docstring)."""
    return tree_noise.tree_noise(num_rounds, efficient=self.efficient,
                                 restart_period=self.restart_period,
                                 restart_warmup=self.restart_warmup)

  @property
  def check_rounds(self) -> int:
    """The correlated noise check's default rounds: two restarts
    (`correlated.noise_check.default_rounds`)."""
    return correlated_check.default_rounds(
        restart_period=self.restart_period, restart_warmup=self.restart_warmup)


@construction.recorded
def tree_aggregation(
    noise_multiplier: float,
    clients_per_round: float,
    clip: float,
    *,
    canaries: canary_config.CanaryConfig,
    noise_seed: Optional[int] = None,
    use_efficient: bool = True,
    restart_period: Optional[int] = None,
    restart_warmup: Optional[int] = None,
) -> factory.CanaryDPFactory:
  """DP-FTRL with a fixed clip and tree-aggregated noise, with canaries.

  The query TFF's `DifferentiallyPrivateFactory.tree_aggregation` builds
  (Kairouz et al. 2021, arXiv 2103.00039; `use_efficient`, TFF's default:
  Honaker 2015, "Efficient Use of Differentially Private Binary Trees",
  else the plain tree): clip each record to L2 norm `clip` (> 0), add the
  tree's noise residual (node std z * clip) to the sum, divide by
  `clients_per_round`. With `restart_period` (>= 1; None: one tree, as
  TFF's) the tree restarts as TFF's `tree_adaptive` does, after each call
  k with k mod period == `restart_warmup` (None: 0, else in [1, period);
  `tfp.restart_query.PeriodicRoundRestartIndicator`). Canaries (Andrew et
  al. 2024, arXiv 2302.03098) enter the sum at norm `clip`. The arguments
  `noise_multiplier`, `clients_per_round`, `canaries` and `noise_seed` are
  the `CanaryDPFactory` constructors' (module docstring for the seed);
  TypeError or ValueError for a bad one, naming it.
  """
  noise_multiplier, clients_per_round = construction.noise_arguments(
      noise_multiplier, clients_per_round)
  tree = TreeAggregation(
      noise_multiplier=noise_multiplier, clip=clip,
      efficient=validation.as_bool(use_efficient, "use_efficient"),
      restart_period=restart_period, restart_warmup=restart_warmup,
      noise_seed=noise_seed)
  return factory.CanaryDPFactory(tree, canaries,
                                 clients_per_round=clients_per_round)


@construction.recorded
def tree_adaptive(
    noise_multiplier: float,
    clients_per_round: float,
    initial_l2_norm_clip: float = 0.1,
    restart_warmup: Optional[int] = 128,
    restart_period: int = 1024,
    target_unclipped_quantile: float = 0.5,
    clip_learning_rate: float = 0.2,
    clipped_count_stddev: Optional[float] = None,
    *,
    canaries: canary_config.CanaryConfig,
    noise_seed: Optional[int] = None,
) -> factory.CanaryDPFactory:
  """DP-FTRL with adaptive clipping adopted at restarts, with canaries.

  The query TFF's `DifferentiallyPrivateFactory.tree_adaptive` builds,
  with its defaults (`restart_period` is TFF's `restart_frequency`):
  `tfp.QAdaClipTreeResSumQuery` (Kairouz et al. 2021, arXiv 2103.00039;
  the geometric adaptive clip of Andrew et al. 2021, arXiv 1905.03871, on
  an efficient tree) in `tfp.RestartQuery`. The clip changes only when the
  tree restarts (`tree_aggregation`'s restarts). The clip's arguments are
  `CanaryDPFactory.gaussian_adaptive`'s (`clip_learning_rate` its
  `learning_rate`; `noise_multiplier` the effective total one), but
  `clipped_count_stddev` None is TFF's default clients_per_round / 20,
  also without noise; the value tree's node multiplier is
  `TreeAggregation.noise_multiplier`. Both trees' noise is seeded by
  `noise_seed` (`seeded_query`).
  """
  restart_period = validation.as_int(restart_period, "restart_period",
                                     minimum=1)
  if clipped_count_stddev is None:
    clipped_count_stddev = validation.as_positive(
        clients_per_round, "clients_per_round") / 20.0
  value_noise_multiplier, clip, adaptive = adaptive_clip.from_arguments(
      noise_multiplier, clients_per_round, initial_l2_norm_clip,
      target_unclipped_quantile, clip_learning_rate, clipped_count_stddev,
      "clip_learning_rate")
  tree = TreeAggregation(
      noise_multiplier=value_noise_multiplier, clip=clip,
      restart_period=restart_period, restart_warmup=restart_warmup,
      noise_seed=noise_seed, adaptive=adaptive)
  return factory.CanaryDPFactory(
      tree, canaries, clients_per_round=adaptive.expected_num_records)


def tree_of(aggregator: factory.CanaryDPFactory) -> Optional[TreeAggregation]:
  """The `TreeAggregation` of a `CanaryDPFactory`, or None (its
  `described_query` is another mechanism's)."""
  query = aggregator.described_query
  return query if isinstance(query, TreeAggregation) else None


__all__ = ["TreeAggregation", "tree_adaptive", "tree_aggregation", "tree_of"]


def __getattr__(name: str):
  """`AdaptiveTreeClip`, renamed `adaptive_clip.AdaptiveClip` (the Gaussian
  adaptive clip uses it too), for one release (docs/changelog.md)."""
  if name == "AdaptiveTreeClip":
    warnings.warn("tree_factory.AdaptiveTreeClip is tff_canary.federated."
                  "insertion.adaptive_clip.AdaptiveClip.", DeprecationWarning,
                  stacklevel=2)
    return adaptive_clip.AdaptiveClip
  raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
