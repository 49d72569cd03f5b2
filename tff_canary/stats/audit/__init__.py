"""What one run's canaries say: every estimate and bound of its cosine table
in one call, and the audit of a claimed epsilon.

The names of the old module `audit` (now the module `audit.audit`) still
resolve here for one release, with a DeprecationWarning naming the new path
(PEP 562 `__getattr__`; docs/changelog.md).
"""

import importlib
import warnings

# The public names of the old module tff_canary/stats/audit.py (at 842ba1e^).
_OLD_MODULE_NAMES = ("AuditVerdict", "BoundFn", "VERDICTS", "Verdict",
                     "audit_coin_statistics", "audit_table", "one_run_bound",
                     "table_bounds")


def __getattr__(name: str):
  if name not in _OLD_MODULE_NAMES:
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
  warnings.warn(f"{__name__}.{name} moved to {__name__}.audit.{name}; the "
                "old path will be removed in the next release",
                DeprecationWarning, stacklevel=2)
  return getattr(importlib.import_module(f"{__name__}.audit"), name)
