"""tff-canary: how much privacy a DP-FedAvg run really leaks, from that run.

Random-canary empirical privacy estimation (Andrew et al., "One-shot Empirical
Privacy Estimation for Federated Learning", ICLR 2024) for TensorFlow Federated.

The names exported here are the estimators and analytical accounting; they need
only NumPy, SciPy and dp-accounting, so `import tff_canary` never imports
TensorFlow. The TFF side (`CanaryConfig`, `canary_dp_aggregator`,
`RunWriter`, ...) lives in submodules that import it on demand
(docs/guide/drop-in.md). The method these implement is in docs/method/
(start at docs/method/index.md); the package's layout, one line per module,
is docs/guide/layout.md. Modules that moved keep their old import path for
one release, with a DeprecationWarning naming the new one
(tff_canary.moved_modules; the list is in docs/changelog.md).
"""

from tff_canary import moved_modules as _moved_modules

from tff_canary.stats.estimators.estimates import epsilon_all
from tff_canary.stats.estimators.estimates import epsilon_final
from tff_canary.stats.accounting.gaussian_accounting import gaussian_epsilon
from tff_canary.stats.accounting.gaussian_accounting import gaussian_noise_multiplier
from tff_canary.stats.accounting.gaussian_accounting import repeated_epsilon
from tff_canary.stats.accounting.ledger import Ledger
from tff_canary.stats.bounds.lower_bounds import epsilon_lo
from tff_canary.stats.bounds.lower_bounds import one_run_bound
from tff_canary.stats.estimators.max_of_rounds import epsilon_all_max_model
from tff_canary.stats.estimators.null_law import CosineNull
from tff_canary.stats.accounting.poisson_accounting import poisson_epsilon
from tff_canary.stats.results import EpsilonEstimate
from tff_canary.stats.results import LowerBound
from tff_canary.stats.results import OneRunBound
from tff_canary.stats.results import SignConventionWarning
from tff_canary.stats.results import VarianceMismatchWarning
from tff_canary.stats.estimators.two_gaussians import delta_for_epsilon
from tff_canary.stats.estimators.two_gaussians import epsilon_for_delta

__all__ = [
    "CosineNull", "EpsilonEstimate", "Ledger", "LowerBound", "OneRunBound",
    "SignConventionWarning", "VarianceMismatchWarning", "delta_for_epsilon",
    "epsilon_all", "epsilon_all_max_model", "epsilon_final", "epsilon_for_delta", "epsilon_lo",
    "gaussian_epsilon", "gaussian_noise_multiplier", "one_run_bound",
    "poisson_epsilon", "repeated_epsilon",
]
__version__ = "0.1.0"

_moved_modules.install()
