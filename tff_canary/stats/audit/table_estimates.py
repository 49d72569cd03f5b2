"""Every estimate of docs/method/estimates.md from a run's cosine table, in one call.

`estimate_table(table, delta=...)` feeds a `CosineTable` (the output of the
cosine pass, or a table loaded from a run directory) to every estimator and
bound (`TableEstimates.rows` lists them in report order): on the final model
(x_j = cos(c_j, theta_0 - theta_T)) and, when aggregates were recorded, on
all iterates (m_j = max_t cos(c_j, a_t)); the one-run bounds only when the
canaries were assigned by fair coins (`assignment="coin"`), which their
guarantees require.

The all-iterates estimates are refused (None, with the reason in `warnings`
and an `UnrecordedRoundsWarning`) when an inserted canary took part in a round
whose aggregate was not recorded (`CosineTable.all_iterates_refusal`): its max
would miss its own rounds and make it look held out.
"""

from __future__ import annotations

import dataclasses
import warnings
from typing import Any, Optional

import numpy as np

from tff_canary.stats.audit import audit
from tff_canary.stats.estimators import estimates
from tff_canary.stats.bounds import fdp_one_run
from tff_canary.stats.bounds import lower_bounds
from tff_canary.stats.estimators import max_of_rounds
from tff_canary.stats.estimators import scheduled_sums
from tff_canary.stats import call_site
from tff_canary.stats import results
from tff_canary.stats import validation
from tff_canary.stats.canaries.cosine_table import CosineTable
from tff_canary.stats.canaries.cosine_table import UnrecordedRoundsWarning

# The two statistics, as every row name starts (docs/method/estimates.md).
FINAL_MODEL = "final model"
ALL_ITERATES = "all iterates"
_NEVER_TOOK_PART = ("no inserted canary took part in a recorded round, so "
                    "the max model's epsilon_all has nothing to estimate "
                    "(the Gaussian fit to the maxima is still shown).")


@dataclasses.dataclass(frozen=True)
class TableEstimates:
  """All estimates of one cosine table at one delta (frozen; keeps its inputs).

  Each field is a result object (see `tff_canary.stats.results`), or None when the
  table cannot give it (no recorded aggregates for the all-iterates
  statistics; no fair-coin assignment for the one-run bound).
  `all_iterates` is epsilon-all of the mechanism (`max_of_rounds`, the
  headline); `all_iterates_gaussian_fit` is the paper's Gaussian fit to the
  maxima (Algorithm 3, `estimates.epsilon_all`), which over several rounds
  targets neither the mechanism's epsilon nor a bound on it, kept for
  comparison (docs/method/estimates.md).
  """

  delta: float
  confidence: float
  dim: int
  seed: int
  num_inserted: int
  num_held_out: int
  final_mean_only: results.EpsilonEstimate
  final_fitted: results.EpsilonEstimate
  lo_final: results.LowerBound
  lo_final_paper: results.LowerBound
  all_iterates: Optional[results.EpsilonEstimate] = None
  all_iterates_gaussian_fit: Optional[results.EpsilonEstimate] = None
  lo_all: Optional[results.LowerBound] = None
  lo_all_paper: Optional[results.LowerBound] = None
  one_run_final: Optional[results.OneRunBound] = None
  one_run_all: Optional[results.OneRunBound] = None
  fdp_final: Optional[results.GaussianClaimBound] = None
  fdp_all: Optional[results.GaussianClaimBound] = None
  scheduled: Optional[scheduled_sums.ScheduledEstimate] = None
  tight_final: Optional[results.GaussianClaimBound] = None
  tight_all: Optional[results.GaussianClaimBound] = None
  warnings: tuple[str, ...] = ()

  def rows(self) -> list[tuple[str, str, Any]]:
    """(name, kind, result) for every estimate present, in report order.

    Each name starts with its statistic: "final model: " (cosines with
    theta_0 - theta_T) or "all iterates: " (max cosine over the recorded
    rounds' noised aggregates); the final model's rows come first. kind is
    "estimate" (a point estimate; not a bound) or "bound" (holds with the
    stated confidence) or "nominal bound" (the paper's uncorrected
    epsilon_lo).
    """
    rows = [
        (f"{FINAL_MODEL}: epsilon_final (mean-only)", "estimate",
         self.final_mean_only),
        (f"{FINAL_MODEL}: epsilon_final (fitted variance)", "estimate",
         self.final_fitted),
        (f"{FINAL_MODEL}: epsilon_lo (exact null)", "bound", self.lo_final),
        (f"{FINAL_MODEL}: epsilon_lo (paper)", "nominal bound",
         self.lo_final_paper),
        (f"{FINAL_MODEL}: one-run bound", "bound", self.one_run_final),
        (f"{FINAL_MODEL}: f-DP one-run bound", "bound", self.fdp_final),
        (f"{FINAL_MODEL}: tight one-run bound", "bound", self.tight_final),
        (f"{ALL_ITERATES}: epsilon_all", "estimate", self.all_iterates),
        (f"{ALL_ITERATES}: epsilon_all (Gaussian fit to maxima, paper)",
         "estimate", self.all_iterates_gaussian_fit),
        (f"{ALL_ITERATES}: epsilon_scheduled (sums over each canary's "
         "schedule)", "estimate", self.scheduled),
        (f"{ALL_ITERATES}: epsilon_lo (held-out null)", "bound", self.lo_all),
        (f"{ALL_ITERATES}: epsilon_lo (paper)", "nominal bound",
         self.lo_all_paper),
        (f"{ALL_ITERATES}: one-run bound", "bound", self.one_run_all),
        (f"{ALL_ITERATES}: f-DP one-run bound", "bound", self.fdp_all),
        (f"{ALL_ITERATES}: tight one-run bound", "bound", self.tight_all),
    ]
    return [row for row in rows if row[2] is not None]

  def __str__(self) -> str:
    lines = [f"Estimates at δ={self.delta:g} ({self.num_inserted} inserted, "
             f"{self.num_held_out} held out, d={self.dim}):"]
    lines += [f"  {name}: {result}" for name, _, result in self.rows()]
    lines += [f"  note: {text}" for text in self.warnings]
    return "\n".join(lines)

  def as_dict(self) -> dict[str, Any]:
    out = {}  # in field order, which is report.json's
    for field in dataclasses.fields(self):
      value = getattr(self, field.name)
      out[field.name] = value.as_dict() if hasattr(value, "as_dict") else value
    out["warnings"] = list(self.warnings)
    return out


def estimate_table(table: CosineTable, *, delta: float,
                   confidence: float = 0.95) -> TableEstimates:
  """Runs every estimator of docs/method/estimates.md on a cosine table.

  Args:
    table: a `CosineTable` with at least 2 inserted and 2 held-out canaries.
    delta: delta in (0, 1) for every estimate.
    confidence: confidence of the intervals and bounds, in (0, 1).

  Returns:
    A `TableEstimates`. Warnings raised by the estimators (sign convention,
    variance mismatch) are re-raised once and also kept in `warnings`.
  """
  if not isinstance(table, CosineTable):
    raise TypeError(f"table must be a CosineTable, got "
                    f"{type(table).__name__}.")
  delta = validation.as_open_unit(delta, "delta")
  confidence = validation.as_open_unit(confidence, "confidence")
  for group in ("inserted", "held_out"):
    if table.mask(group).sum() < 2:
      raise ValueError(f"the cosine table has {table.mask(group).sum()} "
                       f"{group} canaries; the estimators need at least 2.")

  notes, found = [], {}
  dim = audit.final_dim(table)  # d - |I| + 1 after known-canary removal
  final_in = table.final_cosines("inserted")
  final_out = table.final_cosines("held_out")
  with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    kw = dict(delta=delta, confidence=confidence)
    found["final_mean_only"] = estimates.epsilon_final(final_in, dim=dim, **kw)
    found["final_fitted"] = estimates.epsilon_final(
        final_in, dim=dim, method="fitted_variance", **kw)
    found["lo_final"] = lower_bounds.epsilon_lo(
        final_in, dim=dim, correction="simultaneous", **kw)
    found["lo_final_paper"] = lower_bounds.epsilon_lo(final_in, dim=dim, **kw)

    have_all = table.has_max_cosines
    if have_all:
      max_in = table.max_cosines("inserted")
      max_out = table.max_cosines("held_out")
      # Every participation of an inserted canary is in a recorded round
      # (has_max_cosines), so its maximum is over rounds_recorded rounds of
      # which it took part in `participation`.
      taken = table.participations("inserted")
      if taken.max() > 0:
        found["all_iterates"] = max_of_rounds.epsilon_all_max_model(
            max_in, max_out, inserted_participation=taken,
            num_rounds=table.rounds_recorded, **kw)
      else:
        notes.append(_NEVER_TOOK_PART)
      found["all_iterates_gaussian_fit"] = estimates.epsilon_all(
          max_in, max_out, **kw)
      found["lo_all"] = lower_bounds.epsilon_lo(
          max_in, held_out=max_out, correction="simultaneous", **kw)
      found["lo_all_paper"] = lower_bounds.epsilon_lo(
          max_in, held_out=max_out, **kw)

    if table.has_scheduled_sums:  # orthogonal canaries, scored in the round
      found["scheduled"] = scheduled_sums.epsilon_scheduled(
          table.scheduled_statistics("inserted"),
          table.scheduled_statistics("held_out"), **kw)

    if table.assignment == "coin":
      mask = table.mask("inserted")
      parts = {"final": table.final_cosine}
      if have_all:
        parts["all"] = table.max_cosine
      for part, stat in parts.items():
        found[f"one_run_{part}"] = lower_bounds.one_run_bound(stat, mask, **kw)
        found[f"fdp_{part}"] = fdp_one_run.fdp_one_run_bound(stat, mask, **kw)
        if table.orthogonal:  # independent scores (`audit`)
          found[f"tight_{part}"] = audit.tight_bound(stat, mask, **kw)

  if (table.rounds_recorded and not np.isnan(table.max_cosine).any()
      and not have_all):  # recorded, but refused: unrecorded participations
    notes.append(table.all_iterates_refusal)
    warnings.warn(table.all_iterates_refusal, UnrecordedRoundsWarning,
                  stacklevel=call_site.user_stacklevel())
  ours = (results.SignConventionWarning, results.VarianceMismatchWarning)
  for w in caught:
    text = str(w.message)
    if not issubclass(w.category, ours):
      warnings.warn_explicit(w.message, w.category, w.filename, w.lineno)
    elif text not in notes:
      notes.append(text)
      warnings.warn(w.message, stacklevel=call_site.user_stacklevel())
  return TableEstimates(
      delta=delta, confidence=confidence, dim=table.dim, seed=table.seed,
      num_inserted=int(final_in.size), num_held_out=int(final_out.size),
      warnings=tuple(notes), **found)
