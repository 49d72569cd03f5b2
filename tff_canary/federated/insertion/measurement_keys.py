"""The names under which the canary aggregators report their measurements.

`AGGREGATE_KEY`: the round's noised aggregate (`canary_process`, for
`tff_canary.federated.scores.aggregate_recorder`); `TREE_SCORES_KEY`: every
canary's score in units of the node noise (`query_noise.QueryNoise.scores`);
`DOT_PRODUCTS_KEY`: every canary's <c_j, result> (`scoring_factory`). Plain
strings, so the recorder can import them without importing TFF.
"""

AGGREGATE_KEY = "noised_aggregate"
ROUND_KEY = "round_num"
TREE_SCORES_KEY = "canary_tree_scores"
DOT_PRODUCTS_KEY = "canary_dot_products"
