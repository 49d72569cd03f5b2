"""The names under which the canary aggregator reports its measurements.

The canary aggregation process (`canary_process`) puts the round's noised
aggregate under `AGGREGATE_KEY` in its measurements when asked to record it;
`tff_canary.federated.scores.aggregate_recorder` finds it there (with the round
number beside it) and writes it to disk. With DP-FTRL's tree aggregation
(`tree_factory`) and orthogonal canaries it reports every canary's score in
units of the node noise under `TREE_SCORES_KEY`. Around any aggregator,
`scoring_factory.CanaryScoringFactory(..., scores="dot_products")` reports
every canary's raw <c_j, result> of the round under `DOT_PRODUCTS_KEY`
(canary clients through a DP-FTRL aggregator). Plain strings, no
TensorFlow, so the recorder can import them without importing TFF.
"""

AGGREGATE_KEY = "noised_aggregate"
ROUND_KEY = "round_num"
TREE_SCORES_KEY = "canary_tree_scores"
DOT_PRODUCTS_KEY = "canary_dot_products"
