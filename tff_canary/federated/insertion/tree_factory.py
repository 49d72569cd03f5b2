"""DP-FTRL with canaries: the tree-aggregation query and its scores.

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
adopts the estimated clip). `CanaryDPFactory` has the same two
constructors, which describe the query as a `TreeAggregation` (its
`query_noise`: correlated noise of node multiplier z); the query is built
from the value's specs at `create` (`TreeAggregation.sum_query`), in
`tfp.RestartQuery` with
`tfp.restart_query.PeriodicRoundRestartIndicator(restart_period,
restart_warmup)` when a `restart_period` is given.

Canaries go in as with the Gaussian queries (`canary_process`): at the
round's clip C_t (the tree's `clip_value`, which the clients are clipped to),
into the sum part for `tree_adaptive`, before `get_noised_result` adds the
tree's noise residual; they do not vote in the quantile estimate.

Scores. With orthogonal canaries each round reports, under
`measurement_keys.TREE_SCORES_KEY`, every canary's score

    u_{j,t} = <c_j, S_t> / sigma_t,    sigma_t = z C_t,

S_t the round's noised SUM (the released mean times `clients_per_round`;
`query_noise.QueryNoise.scores`) and z the value tree's node noise multiplier
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
(`TreeAggregation.check_canaries`). `tree_adaptive`'s clipped-count tree, which
tensorflow_privacy (and so TFF) builds without a seed, is seeded here from
the same `noise_seed` (`seeded_query`), so a seeded run, its clips
after restarts included, is reproducible. Seeded noise is for simulation
only: whoever knows the seed can subtract the noise.

Canary clients (`canary_clients`) need no canary factory: TFF's own
`DifferentiallyPrivateFactory` over the tree (`TreeAggregation.tff_factory`,
with restarts) clips a canary client of norm above C_t to C_t c_j, what a
server-side canary adds, so the same u_{j,t} are the round's <c_j, result>
(`scoring_factory`'s scores="dot_products") times `clients_per_round` over
z C_t (`tff_canary.harness.running.client_insertion`).
"""

from __future__ import annotations

import dataclasses
from typing import Any, Optional

import tensorflow_federated as tff
import tensorflow_privacy as tfp

from tff_canary.federated.insertion import query_noise
from tff_canary.federated.insertion import seeded_query
from tff_canary.federated.runtime import worker_guard
from tff_canary.stats.canaries import canary_config
from tff_canary.stats.canaries import schedules
from tff_canary.stats.correlated import tree_noise
from tff_canary.stats import validation

worker_guard.install()


@dataclasses.dataclass(frozen=True)
class AdaptiveTreeClip:
  """The quantile-adaptive clip (Andrew et al. 2021, geometric update).

  The arguments of `tfp.QAdaClipTreeResSumQuery` besides the value tree's
  (the estimated clip is adopted at each restart), and of
  `tfp.QuantileAdaptiveClipSumQuery` (`CanaryDPFactory.gaussian_adaptive`)
  besides the clip and noise multiplier.

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
  named constructors of `CanaryDPFactory`; the query itself by `sum_query`.

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
      if not isinstance(self.adaptive, AdaptiveTreeClip):
        raise TypeError(f"adaptive must be None or an AdaptiveTreeClip, got "
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
    what canary clients go through (module docstring), with the restarts
    TFF's `tree_aggregation` has no argument for.
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


__all__ = ["AdaptiveTreeClip", "TreeAggregation"]
