"""DP-FTRL with canaries: the tree-aggregation constructors and their scores.

DP-FTRL (Kairouz et al. 2021, "Practical and Private (Deep) Learning without
Sampling or Shuffling", arXiv 2103.00039, Algorithm 1) noises the prefix sums
of the clients' clipped updates through a binary tree whose nodes carry
independent N(0, (z C)^2 I) noises, and releases each round the difference of
two noised prefix sums. TFF builds it with
`tff.aggregators.DifferentiallyPrivateFactory.tree_aggregation`
(tensorflow_privacy's `TreeResidualSumQuery.build_l2_gaussian_query` in a
`NormalizedQuery`, no restarts) and `tree_adaptive` (`QAdaClipTreeResSumQuery`,
the quantile-adaptive clip of Andrew et al. 2021, arXiv 1905.03871, in a
`RestartQuery` whose `PeriodicRoundRestartIndicator` restarts the tree and
adopts the estimated clip). `TreeConstructors` gives `CanaryDPFactory` the
same two constructors; the query is built from the value's specs at
`create` (`TreeAggregation.sum_query`), in `tfp.RestartQuery` with
`tfp.restart_query.PeriodicRoundRestartIndicator(restart_period,
restart_warmup)` when a `restart_period` is given.

Canaries. As with the Gaussian queries (Andrew et al., ICLR 2024, arXiv
2302.03098, Algorithm 1; `canary_process`), the round's canaries are added at
the server to the query's sample state (its sum part, for `tree_adaptive`) at
the round's clip C_t, the tree's `clip_value` that `derive_sample_params`
returns and the clients are clipped to, before `get_noised_result` adds the
tree's noise residual. They do not vote in `tree_adaptive`'s quantile
estimate.

Scores. With orthogonal canaries each round reports, under
`measurement_keys.TREE_SCORES_KEY`, every canary's score

    u_{j,t} = <c_j, S_t> / sigma_t,    sigma_t = z C_t,

S_t the round's noised SUM (the released mean times `clients_per_round`;
`round_scores.tree_scores`) and z the value tree's node noise multiplier
(`TreeAggregation.noise_multiplier`: for `tree_adaptive` the value multiplier
TFF derives with `adaptive_clip_noise_params`, above the argument). A canary
that took part in round t adds exactly 1/z, and with orthonormal canaries and
isotropic node noise the rows u_j are independent, u_j ~ N(a_j / z, K), a_j
the canary's participation indicators and K =
`tff_canary.stats.correlated.tree_noise.tree_noise(T, efficient=...,
restart_period=..., restart_warmup=...).covariance` (`TreeAggregation.noise`),
what `tff_canary.stats.correlated.gls_statistics` takes. With z = 0 (no
noise) the unit is the clip, sigma_t = C_t, so an inserted canary adds
exactly 1; a zero clip gives zero scores. The running statistics of
`round_scores` (max cosine, scheduled sums) assume independent rounds and
are not kept (the state's `scores` are empty). Gaussian canaries are not
scored in the round (record their aggregates,
`CanaryConfig.record_aggregates`).

Accounting. The tree query's DpEvent is `dp_accounting.UnsupportedDpEvent`
every round, and the state carries it unchanged. DP-FTRL's privacy is per
tree, not per round (`SingleEpochTreeAggregationDpEvent(z, steps)` per tree),
and holds only if each client takes part at most once per tree: a property of
the client sampling, which the factory does not see. So no per-round ledger
can hold it, and the ledger path refuses it with an error that says so
(`tff_canary.stats.accounting.effective_noise`; `RunWriter` at the first
round). When each client takes part at most once per tree (Kairouz et al.
2021, Appendix D: restart every epoch), the claim is
`tff_canary.stats.correlated.tree_accounting.tree_epsilons(z, rounds_per_tree,
delta=...)` with `TreeAggregation.rounds_per_tree(T)` and z the constructor's
`noise_multiplier` (for `tree_adaptive` the effective one: its value and
clipped-count trees compose to it, as in TFF's split).

Noise seed. `noise_seed` is TFF's: tensorflow_privacy's
`GaussianNoiseGenerator` draws tensor i of its k-th node with
`stateless_normal(seed=[s + k L + i, s + k L + i])` (L tensors), the counter
in the query's state, so every tensor of every node has its own key and a
checkpointed state resumes the stream. Gaussian canaries are
`stateless_normal([d], seed=[canary_seed, j])`: when noise_seed <= canary_seed
< the number of canaries, one node's key is canary j = canary_seed's and that
node's noise lies along the canary, so the factory refuses that combination
(`check_noise_seed`). `tree_adaptive`'s clipped-count tree, which
tensorflow_privacy (and so TFF) builds without a seed, is seeded here from
the same `noise_seed` (`seeded_tree_query`), so a seeded run, its clips
after restarts included, is reproducible. Seeded noise is for simulation
only: whoever knows the seed can subtract the noise.

Canary clients (`canary_clients`, the client-insertion mode) need no
canary factory: they are clients of the user's aggregator, e.g. TFF's own
`DifferentiallyPrivateFactory.tree_aggregation` or, restarted,
`TreeAggregation.tff_factory` (TFF's public `DifferentiallyPrivateFactory`
over `sum_query`), which clips and noises them like any client. A canary
client of norm above C_t enters the sum as C_t c_j, exactly what a
server-side canary adds, so the same u_{j,t} follow from the round's
<c_j, result> (`scoring_factory`'s scores="dot_products"; its cosine
statistics assume independent rounds), times `clients_per_round` over
z C_t (`tff_canary.harness.running.client_insertion`).
"""

from __future__ import annotations

import dataclasses
from typing import Any, Optional

import tensorflow_federated as tff
import tensorflow_privacy as tfp

from tff_canary.federated.insertion import construction
from tff_canary.federated.insertion import seeded_tree_query
from tff_canary.federated.runtime import worker_guard
from tff_canary.stats.canaries import canary_config
from tff_canary.stats.canaries import schedules
from tff_canary.stats.correlated import tree_noise
from tff_canary.stats import validation

worker_guard.install()

_tff_dp = tff.aggregators.differential_privacy


def _as_bool(value: Any, name: str) -> bool:
  if not isinstance(value, bool):
    raise TypeError(f"{name} must be a bool, got {validation.show(value)}.")
  return value


@dataclasses.dataclass(frozen=True)
class AdaptiveTreeClip:
  """The quantile-adaptive clip of `tree_adaptive` (Andrew et al. 2021).

  The arguments of `tfp.QAdaClipTreeResSumQuery` besides the value tree's
  (geometric update; the estimated clip is adopted at each restart).

  Attributes:
    target_unclipped_quantile: In [0, 1].
    learning_rate: >= 0, the clip learning rate.
    clipped_count_stddev: >= 0, the noise std of the clipped count's tree.
    expected_num_records: > 0, the clipped count's denominator
      (`clients_per_round`).
  """

  target_unclipped_quantile: float
  learning_rate: float
  clipped_count_stddev: float
  expected_num_records: float

  def __post_init__(self):
    checked = dict(
        target_unclipped_quantile=validation.as_unit_interval(
            self.target_unclipped_quantile, "target_unclipped_quantile"),
        learning_rate=validation.as_nonnegative(self.learning_rate,
                                                "learning_rate"),
        clipped_count_stddev=validation.as_nonnegative(
            self.clipped_count_stddev, "clipped_count_stddev"),
        expected_num_records=validation.as_positive(
            self.expected_num_records, "expected_num_records"))
    for name, value in checked.items():
      object.__setattr__(self, name, value)


@dataclasses.dataclass(frozen=True)
class TreeAggregation:
  """A DP-FTRL tree-aggregation sum query, before the value's specs are known.

  What `CanaryDPFactory` needs of a tree query that tensorflow_privacy keeps
  private: the node noise multiplier and the tree's shape. Built by the
  constructors of `TreeConstructors`; the query itself by `sum_query`.

  Attributes:
    noise_multiplier: z >= 0: the value tree's node noise std is z C.
    clip: C > 0, the clip (the initial clip with `adaptive`).
    efficient: Honaker's efficient tree (`use_efficient`), else the plain
      tree; True with `adaptive` (tensorflow_privacy's only choice there).
    restart_period, restart_warmup: `PeriodicRoundRestartIndicator(period,
      warmup)` of a `tfp.RestartQuery` around the tree, or None (no restart).
    noise_seed: None (a seed from the clock, as in TFF) or the seed of the
      value tree's noise, and with `adaptive` of the clipped count's
      (`seeded_tree_query`; module docstring). Never in deployment.
    adaptive: None (fixed clip) or the `AdaptiveTreeClip`.
  """

  noise_multiplier: float
  clip: float
  efficient: bool = True
  restart_period: Optional[int] = None
  restart_warmup: Optional[int] = None
  noise_seed: Optional[int] = None
  adaptive: Optional[AdaptiveTreeClip] = None

  def __post_init__(self):
    def set_(name, value):
      object.__setattr__(self, name, value)

    set_("noise_multiplier", validation.as_nonnegative(self.noise_multiplier,
                                                       "noise_multiplier"))
    set_("clip", validation.as_positive(self.clip, "clip"))
    _as_bool(self.efficient, "efficient")
    # tree_noise's check is tensorflow_privacy's rule, with the names.
    tree_noise.restart_rounds(0, self.restart_period, self.restart_warmup)
    if self.restart_period is not None:
      set_("restart_period", int(self.restart_period))
    if self.restart_warmup is not None:
      set_("restart_warmup", int(self.restart_warmup))
    if self.noise_seed is not None:
      set_("noise_seed", schedules.as_seed(self.noise_seed, "noise_seed"))
    if self.adaptive is not None:
      if not isinstance(self.adaptive, AdaptiveTreeClip):
        raise TypeError(f"adaptive must be None or an AdaptiveTreeClip, got "
                        f"{validation.show(self.adaptive)}.")
      if not self.efficient:
        raise ValueError("efficient must be True with adaptive clipping: "
                         "tfp.QAdaClipTreeResSumQuery uses the efficient "
                         "tree only.")
      if (self.noise_seed is not None
          and self.noise_seed > seeded_tree_query.MAX_NOISE_SEED):
        raise ValueError(
            f"noise_seed must be at most {seeded_tree_query.MAX_NOISE_SEED} "
            "with adaptive clipping (the clipped count's tree is seeded "
            f"{seeded_tree_query.COUNT_SEED_OFFSET} above), got "
            f"{self.noise_seed}.")

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
               else seeded_tree_query.SeededQAdaClipTreeResSumQuery(
                   *args, noise_seed=self.noise_seed))
    if self.restart_period is not None:
      query = tfp.RestartQuery(
          query, tfp.restart_query.PeriodicRoundRestartIndicator(
              period=self.restart_period, warmup=self.restart_warmup))
    return query

  def tff_factory(self, record_specs: Any, clients_per_round: float
                  ) -> tff.aggregators.DifferentiallyPrivateFactory:
    """TFF's own `DifferentiallyPrivateFactory` over this tree, no canaries.

    `sum_query(record_specs)` in a `tfp.NormalizedQuery` of denominator
    `clients_per_round`, as TFF's `tree_aggregation` and `tree_adaptive`
    wrap theirs, given to the public `DifferentiallyPrivateFactory(query)`:
    what canary clients go through (module docstring), with the restarts
    TFF's `tree_aggregation` has no argument for.
    """
    clients_per_round = validation.as_positive(clients_per_round,
                                               "clients_per_round")
    query = tfp.NormalizedQuery(self.sum_query(record_specs),
                                denominator=clients_per_round)
    return tff.aggregators.DifferentiallyPrivateFactory(query)

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


def check_noise_seed(tree: TreeAggregation,
                     canaries: canary_config.CanaryConfig) -> None:
  """Refuses a `noise_seed` whose node noise would be a gaussian canary.

  Node keys are [n, n] for every n >= noise_seed, canary keys [canary_seed,
  j] (module docstring): they meet for canary j = canary_seed when it
  exists.
  """
  seed = canaries.seed
  if (tree.noise_seed is None or canaries.directions != "gaussian"
      or not tree.noise_seed <= seed < canaries.num_canaries):
    return
  raise ValueError(
      f"noise_seed={tree.noise_seed} with gaussian canaries of seed {seed}: "
      f"tensorflow_privacy seeds tree node noise with [n, n] for n = "
      f"noise_seed, noise_seed + 1, ..., so node n = {seed} would draw "
      f"exactly canary {seed}'s direction (key [{seed}, {seed}]). Choose a "
      f"noise_seed above {seed}, or directions='orthogonal'.")


class TreeConstructors:
  """DP-FTRL's constructors of `CanaryDPFactory` (a mixin; module docstring).

  `cls(tree_aggregation, canaries, clients_per_round=...)` must take a
  `TreeAggregation` as its query, as `CanaryDPFactory` does; each
  constructor records its call (`construction.remembered`).
  """

  @construction.remembered
  def tree_aggregation(
      cls,
      noise_multiplier: float,
      clients_per_round: float,
      clip: float,
      *,
      canaries: canary_config.CanaryConfig,
      noise_seed: Optional[int] = None,
      use_efficient: bool = True,
      restart_period: Optional[int] = None,
      restart_warmup: Optional[int] = None,
  ) -> tff.aggregators.UnweightedAggregationFactory:
    """DP-FTRL with a fixed clip and tree-aggregated noise, with canaries.

    The query TFF's `DifferentiallyPrivateFactory.tree_aggregation` builds
    (Kairouz et al. 2021, arXiv 2103.00039; `use_efficient`: Honaker 2015,
    "Efficient Use of Differentially Private Binary Trees"): clip each record
    to L2 norm `clip`, add the tree's noise residual (node std z * clip) to
    the sum, divide by `clients_per_round`. With `restart_period` the tree
    restarts as TFF's `tree_adaptive` does (`tfp.RestartQuery`). Canaries
    (Andrew et al. 2024, arXiv 2302.03098) enter the sum at norm `clip`.

    Args:
      noise_multiplier: z >= 0, the node noise std over the clip.
      clients_per_round: Expected clients per round (> 0), the denominator.
      clip: The clip norm C > 0.
      canaries: The `CanaryConfig`.
      noise_seed: None (a seed from the clock, as in TFF) or an integer seed
        in [0, 2^63 - 1] of reproducible simulation noise (module
        docstring). Never in deployment.
      use_efficient: The efficient tree (TFF's default), else the plain one.
      restart_period: None (one tree, as TFF's `tree_aggregation`) or the
        period >= 1 of `PeriodicRoundRestartIndicator`: the tree restarts
        after each call k with k mod period == warmup.
      restart_warmup: None (0) or the indicator's warmup, in [1, period).

    Returns:
      A `CanaryDPFactory`.

    Raises:
      TypeError, ValueError: for bad arguments, naming them.
    """
    noise_multiplier = validation.as_nonnegative(noise_multiplier,
                                                 "noise_multiplier")
    clients_per_round = validation.as_positive(clients_per_round,
                                               "clients_per_round")
    tree = TreeAggregation(
        noise_multiplier=noise_multiplier, clip=clip,
        efficient=_as_bool(use_efficient, "use_efficient"),
        restart_period=restart_period, restart_warmup=restart_warmup,
        noise_seed=noise_seed)
    return cls(tree, canaries, clients_per_round=clients_per_round)

  @construction.remembered
  def tree_adaptive(
      cls,
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
  ) -> tff.aggregators.UnweightedAggregationFactory:
    """DP-FTRL with adaptive clipping adopted at restarts, with canaries.

    The query TFF's `DifferentiallyPrivateFactory.tree_adaptive` builds,
    with its defaults (`restart_period` is TFF's `restart_frequency`):
    `tfp.QAdaClipTreeResSumQuery` (Kairouz et al. 2021, arXiv 2103.00039;
    the geometric adaptive clip of Andrew et al. 2021, arXiv 1905.03871, on
    an efficient tree) in `tfp.RestartQuery`. The clip changes only when the
    tree restarts. `noise_multiplier` is the effective total one: the value
    tree's node multiplier is TFF's `adaptive_clip_noise_params` split,
    `TreeAggregation.noise_multiplier`. Canaries (Andrew et al. 2024, arXiv
    2302.03098) enter at each round's clip and do not vote in the quantile
    estimate.

    Args:
      noise_multiplier: Effective noise multiplier z >= 0.
      clients_per_round: Expected clients per round (> 0), the denominator.
      initial_l2_norm_clip: Initial clip (> 0).
      restart_warmup: The first restart's round, in [1, restart_period), or
        None (restarts at multiples of the period only).
      restart_period: Restart period >= 1 (TFF's `restart_frequency`).
      target_unclipped_quantile: Target quantile in [0, 1].
      clip_learning_rate: Clip learning rate (>= 0).
      clipped_count_stddev: Noise std of the clipped count (>= 0), or None
        for TFF's default clients_per_round / 20 (also without noise).
      canaries: The `CanaryConfig`.
      noise_seed: None or the seed of both trees' noise, the value's and
        the clipped count's (`seeded_tree_query`; module docstring). Never
        in deployment.

    Returns:
      A `CanaryDPFactory`.

    Raises:
      TypeError, ValueError: for bad arguments, naming them (a
        `clipped_count_stddev` too small for `noise_multiplier` as in TFF).
    """
    noise_multiplier = validation.as_nonnegative(noise_multiplier,
                                                 "noise_multiplier")
    clients_per_round = validation.as_positive(clients_per_round,
                                               "clients_per_round")
    initial_l2_norm_clip = validation.as_positive(initial_l2_norm_clip,
                                                  "initial_l2_norm_clip")
    restart_period = validation.as_int(restart_period, "restart_period",
                                       minimum=1)
    clip_learning_rate = validation.as_nonnegative(clip_learning_rate,
                                                   "clip_learning_rate")
    if clipped_count_stddev is None:
      clipped_count_stddev = clients_per_round / 20.0
    clip = AdaptiveTreeClip(
        target_unclipped_quantile=target_unclipped_quantile,
        learning_rate=clip_learning_rate,
        clipped_count_stddev=clipped_count_stddev,
        expected_num_records=clients_per_round)
    value_noise_multiplier, count_stddev = _tff_dp.adaptive_clip_noise_params(
        noise_multiplier, clients_per_round, clip.clipped_count_stddev)
    tree = TreeAggregation(
        noise_multiplier=value_noise_multiplier, clip=initial_l2_norm_clip,
        efficient=True, restart_period=restart_period,
        restart_warmup=restart_warmup, noise_seed=noise_seed,
        adaptive=dataclasses.replace(clip, clipped_count_stddev=count_stddev))
    return cls(tree, canaries, clients_per_round=clients_per_round)


__all__ = [
    "AdaptiveTreeClip",
    "TreeAggregation",
    "TreeConstructors",
    "check_noise_seed",
]
