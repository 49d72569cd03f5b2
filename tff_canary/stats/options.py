"""The option types of the estimators and bounds, in one place.

Each is a `typing.Literal` of the values an argument accepts; the estimator
modules re-export the ones they take (`estimates.Method`, ...), and the result
objects (`tff_canary.stats.results`) name them in their fields. Keeping them
here lets the results import no estimator, so the layers form no cycle.
"""

from typing import Literal

# epsilon_final's two estimates (`tff_canary.stats.estimators.estimates`).
Method = Literal["mean_only", "fitted_variance"]
# The threat model of an estimate: the final model, or all iterates.
Statistic = Literal["final", "all"]
# How an estimate's confidence interval was made (`EpsilonEstimate`).
IntervalMethod = Literal["t", "projection", "profile"]
# The method name of epsilon_all_max_model's estimate.
MaxModel = Literal["max_model"]
# How epsilon_lo spreads its level (`tff_canary.stats.bounds.lower_bounds`).
Correction = Literal["none", "simultaneous", "bonferroni", "split",
                     "multi_split"]
# Where epsilon_lo's null comes from: the exact law (dim) or held-out canaries.
Null = Literal["exact", "held_out"]
# How a bound maximized over thresholds pays for the choice
# (`tff_canary.stats.bounds.threshold_strategies`).
Strategy = Literal["fixed", "bonferroni", "bonferroni_all", "split",
                   "multi_split"]
