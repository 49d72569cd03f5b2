"""What the canary process needs of a DP sum query: `QueryNoise`.

The query is the mechanism (`factory`); what the canaries need beyond the
`tfp.DPQuery` interface is one `QueryNoise`: where the query keeps the clip
and the record sum (an adaptive query's sum part: the canaries do not vote in
the quantile estimate), the mean's denominator, and whether the rounds'
noises are independent (orthogonal canaries scored in the state,
`round_scores`) or correlated, as DP-FTRL's tree's are (each round reports
every canary's score, `QueryNoise.scores`).

The factory takes a described query: an object with `query_noise`,
`sum_query(record_specs)` (the `tfp.DPQuery`, built once the value's specs
are known) and `check_canaries(canaries)` (refuses canaries that its noise
would draw). A query of correlated noise also gives, for the correlated
noise check's default claim, `noise(num_rounds)` (its released noise, a
`tff_canary.stats.correlated.linear_noise.LinearNoise`) and `check_rounds`
(the check's default span). DP-FTRL's
`tff_canary.mechanisms.tree.aggregation.TreeAggregation` is one;
`GivenQuery` describes a tensorflow_privacy Gaussian query (`describe`).
"""

from __future__ import annotations

import dataclasses
from typing import Any, Optional

import tensorflow as tf
import tensorflow_privacy as tfp


@dataclasses.dataclass(frozen=True)
class QueryNoise:
  """What the canary process needs of a sum query (module docstring).

  Attributes:
    adaptive: Whether the query's sample params and sample state are
      (sum part, quantile part) pairs (`tfp.QuantileAdaptiveClipSumQuery`,
      `tfp.QAdaClipTreeResSumQuery`).
    noise_multiplier: None for noises independent across rounds, else z:
      the rounds' noises are correlated, a round's noise has std z C_r, and
      the process reports `scores` every round.
    denominator: None (the result is the noised sum S) or d > 0: the
      process aggregates with `tfp.NormalizedQuery(query, d)` (`normalized`)
      and S is the result times d.
  """

  adaptive: bool = False
  noise_multiplier: Optional[float] = None
  denominator: Optional[float] = None

  @property
  def correlated(self) -> bool:
    return self.noise_multiplier is not None

  def normalized(self, query: tfp.DPQuery) -> tfp.DPQuery:
    """`query` in a `tfp.NormalizedQuery` of the denominator, if any."""
    if self.denominator is None:
      return query
    return tfp.NormalizedQuery(query, denominator=self.denominator)

  def clip(self, params: Any) -> Any:
    """The clip C_r in the query's sample params."""
    return params[0] if self.adaptive else params

  def sum_part(self, sample_state: Any) -> Any:
    """The record sum in the query's sample state."""
    return sample_state[0] if self.adaptive else sample_state

  def with_sum(self, sample_state: Any, new_sum: Any) -> Any:
    """The sample state with its record sum replaced by `new_sum`."""
    if not self.adaptive:
      return new_sum
    if hasattr(sample_state, "_replace"):
      return sample_state._replace(sum_state=new_sum)
    return (new_sum,) + tuple(sample_state[1:])

  def scores(self, dot_products: tf.Tensor, clip: Any) -> tf.Tensor:
    """u_j = <c_j, S> / (z C), float64 [m], from <c_j, result>.

    A canary in S adds exactly 1/z. With z = 0 the unit is C (a canary adds
    1); a zero clip gives 0.
    """
    z = self.noise_multiplier
    unit = tf.cast(clip, tf.float64) * (float(z) if z else 1.0)
    d = 1.0 if self.denominator is None else float(self.denominator)
    return tf.math.divide_no_nan(tf.cast(dot_products, tf.float64) * d, unit)


@dataclasses.dataclass(frozen=True)
class GivenQuery:
  """A tensorflow_privacy Gaussian sum query, described (module docstring).

  Attributes:
    query: A `tfp.GaussianSumQuery` or `tfp.QuantileAdaptiveClipSumQuery`
      (or a subclass, such as the seeded queries of `seeded_query`).
  """

  query: tfp.DPQuery

  def __post_init__(self):
    query = self.query
    if isinstance(query, (tfp.TreeResidualSumQuery,
                          tfp.TreeCumulativeSumQuery, tfp.TreeRangeSumQuery,
                          tfp.QAdaClipTreeResSumQuery, tfp.RestartQuery)):
      # The canaries' scores need the node noise multiplier and the tree's
      # shape, which tensorflow_privacy keeps private; the query needs the
      # value's specs, which the factory learns at create.
      raise TypeError(
          "a tree-aggregation query (DP-FTRL) is given as a tff_canary."
          "mechanisms.tree.aggregation.TreeAggregation (or use its "
          "tree_aggregation / tree_adaptive), not as a "
          f"tensorflow_privacy query; got {query!r}.")
    if isinstance(query, tfp.NormalizedQuery):
      # tensorflow_privacy gives no public access to a NormalizedQuery's
      # numerator, whose clip and sum the canaries need: take the parts.
      raise TypeError(
          "sum_query must be the numerator, not a tfp.NormalizedQuery: pass "
          "NormalizedQuery(q, d)'s q as sum_query and d as clients_per_round;"
          f" got {query!r}.")
    if not isinstance(query, (tfp.GaussianSumQuery,
                              tfp.QuantileAdaptiveClipSumQuery)):
      raise TypeError(
          "sum_query must be a tfp.GaussianSumQuery or a "
          f"tfp.QuantileAdaptiveClipSumQuery (or a subclass); got {query!r}.")

  @property
  def query_noise(self) -> QueryNoise:
    return QueryNoise(adaptive=isinstance(self.query,
                                          tfp.QuantileAdaptiveClipSumQuery))

  def sum_query(self, unused_record_specs: Any) -> tfp.DPQuery:
    return self.query

  def check_canaries(self, unused_canaries: Any) -> None:
    """Its noise keys never meet a canary's (`seeded_query`)."""


def describe(sum_query: Any) -> Any:
  """`sum_query` as a described query: itself if it is one, else a
  `GivenQuery` (TypeError for a query of another kind)."""
  if hasattr(sum_query, "query_noise") and hasattr(sum_query, "sum_query"):
    return sum_query
  return GivenQuery(sum_query)


__all__ = ["GivenQuery", "QueryNoise", "describe"]
