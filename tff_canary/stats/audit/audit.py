"""Audit mode: can one run refute a claimed (epsilon, delta)?

A claim "this training is (epsilon, delta)-DP" is refuted at confidence 1 -
alpha when a lower bound on epsilon that holds with probability >= 1 - alpha
exceeds the claimed epsilon (Tramèr et al. 2022, "Debugging Differential
Privacy: A Case Study for Privacy Auditing"; Jagielski et al. 2020). Only such
bounds decide the verdict, never the point estimates (epsilon-final,
epsilon-all), which are estimates with no guarantee:

  * epsilon_lo with `correction="simultaneous"` (`lower_bounds`), on the final
    model with the exact null and, when aggregates were recorded, on all
    iterates with the held-out null;
  * the f-DP one-run bound of Mahloujifar, Melis & Chaudhuri (2024)
    (`fdp_one_run`, k+ = k- = 5% of the candidates), on each statistic, when
    the canaries were inserted by fair coins. It tests the claim as a
    Gaussian mechanism (mu-GDP), which is what the analytical epsilon of a
    DP-FedAvg ledger is, and it replaced the one-run bound of Steinke, Nasr &
    Jagielski (2023) here because on the same coin-flipped runs it measured
    stronger at every epsilon (`bench/power.py`) and stayed valid
    (`bench/validity.py`; docs/method/lower-bounds.md has the figures).

The f-DP one-run bound tests the claim AS a Gaussian mechanism: it is a valid
refutation only of a claim that is a Gaussian mechanism without
amplification (a DP-FedAvg ledger audited for its participations). A claim
that is not (a Poisson-subsampled one, whose trade-off curve is not
Gaussian; a distributed-DP bound; a claimed (epsilon, delta) of unknown
shape) is audited with Steinke, Nasr & Jagielski's one-run bound instead
(`lower_bounds.one_run_bound`), which holds for any (epsilon, delta) claim:
`table_bounds(..., gaussian_claim=False)`.

With orthogonal canaries (`CosineTable.orthogonal`) the canaries' noise
scores are exactly independent, the assumption of the tight one-run bound of
Xiang et al. (2025, `tight_one_run`, the number released chosen among its
fractions by Bonferroni): it replaces the f-DP one for Gaussian claims there.
`bench/validity.py --directions orthogonal` measured it valid (at most
5% + 2 SE of 500 trials above the truth in every setting) and
`bench/power.py --directions orthogonal` stronger (docs/method/lower-bounds.md
has the figures). On independent (gaussian) canaries it exceeded the truth
too often, so it stays out there.

With m such bounds, each is computed at confidence 1 - alpha/m (Bonferroni),
so the chance that ANY of them exceeds the true epsilon, and hence of refuting a
true claim, is at most alpha. A claim consistent with every bound is
"consistent": not confirmed, only not refuted by this attack.

Caveat: the one-run bound is proved for many canaries in one run; epsilon_lo's
order-statistic limits assume the canaries' statistics are independent, which
holds for the Gaussian mechanism's held-out law and approximately for inserted
canaries in high dimension (`bench/validity.py` measures the rates).

NumPy only.
"""

from __future__ import annotations

import dataclasses
import typing
from typing import Any, Callable, Literal, Optional

import numpy as np
import numpy.typing as npt

from tff_canary.stats.bounds import fdp_one_run
from tff_canary.stats.bounds import lower_bounds
from tff_canary.stats.bounds import tight_one_run
from tff_canary.stats import validation
from tff_canary.stats.canaries.cosine_table import CosineTable

Verdict = Literal["consistent", "refuted"]
VERDICTS = typing.get_args(Verdict)


@dataclasses.dataclass(frozen=True)
class AuditVerdict:
  """The verdict on a claimed epsilon, and the bounds it rests on.

  Attributes:
    claimed_epsilon, delta, confidence: the claim and the verdict's level.
    verdict: "consistent" or "refuted".
    bounds: {name: bound result}, each computed at `per_bound_confidence`.
    per_bound_confidence: 1 - (1 - confidence) / len(bounds).
    strongest: name of the largest bound.
    claim_kind: "gaussian" (bounds of a Gaussian-mechanism claim), "any"
      (bounds valid for any (epsilon, delta) claim), or "" when the caller
      chose the bounds itself (`audit`).
  """

  claimed_epsilon: float
  delta: float
  confidence: float
  verdict: Verdict
  bounds: dict[str, Any]
  per_bound_confidence: float
  strongest: str
  claim_kind: str = ""

  @property
  def claim_kind_text(self) -> str:
    """What the one-run bounds assume of the claim, for reports."""
    return {"gaussian": "one-run bounds of a Gaussian-mechanism claim",
            "any": "one-run bounds valid for any (ε, δ) claim (Steinke et "
                   "al.)"}.get(self.claim_kind, "")

  @property
  def refuted(self) -> bool:
    return self.verdict == "refuted"

  @property
  def largest_bound(self) -> float:
    return self.bounds[self.strongest].epsilon

  def __str__(self) -> str:
    bound = self.largest_bound
    if self.refuted:
      return (f"REFUTED at {self.confidence:.0%} confidence: {self.strongest} "
              f"= {bound:.4g} > claimed ε = {self.claimed_epsilon:.4g} "
              f"(δ={self.delta:g}; {len(self.bounds)} bounds, each at "
              f"{self.per_bound_confidence:.2%}"
              + (f"; {self.claim_kind_text}" if self.claim_kind else "") + ")")
    return (f"consistent with claimed ε = {self.claimed_epsilon:.4g} at "
            f"{self.confidence:.0%} confidence: largest bound {self.strongest}"
            f" = {bound:.4g} (δ={self.delta:g}; {len(self.bounds)} bounds, "
            f"each at {self.per_bound_confidence:.2%}"
            + (f"; {self.claim_kind_text}" if self.claim_kind else "") + ")")

  def as_dict(self) -> dict[str, Any]:
    return dict(claimed_epsilon=self.claimed_epsilon, delta=self.delta,
                confidence=self.confidence, verdict=self.verdict,
                per_bound_confidence=self.per_bound_confidence,
                strongest=self.strongest, claim_kind=self.claim_kind,
                bounds={k: v.as_dict() for k, v in self.bounds.items()})


BoundFn = Callable[[float], Any]  # confidence -> a result with .epsilon


def audit(bound_fns: dict[str, BoundFn], *, claimed_epsilon: float,
          delta: float, confidence: float = 0.95) -> AuditVerdict:
  """The verdict from named bound builders (each called with its confidence).

  Args:
    bound_fns: {name: f}, f(confidence) returning a bound result with
      `.epsilon`; every f must hold with the confidence it is given.
    claimed_epsilon: the claim, >= 0 (inf is never refuted).
    delta: the claim's delta, in (0, 1).
    confidence: the verdict's confidence, in (0, 1).
  """
  if not bound_fns:
    raise ValueError("audit needs at least one bound.")
  claimed = validation.as_float(claimed_epsilon, "claimed_epsilon") if (
      claimed_epsilon != float("inf")) else float("inf")
  if claimed < 0:
    raise ValueError(f"claimed_epsilon must be >= 0, got {claimed}.")
  delta = validation.as_open_unit(delta, "delta")
  confidence = validation.as_open_unit(confidence, "confidence")
  per = 1.0 - (1.0 - confidence) / len(bound_fns)
  bounds = {name: fn(per) for name, fn in bound_fns.items()}
  strongest = max(bounds, key=lambda name: bounds[name].epsilon)
  verdict = "refuted" if bounds[strongest].epsilon > claimed else "consistent"
  return AuditVerdict(claimed_epsilon=claimed, delta=delta,
                      confidence=confidence, verdict=verdict, bounds=bounds,
                      per_bound_confidence=per, strongest=strongest)


def table_bounds(table: CosineTable, delta: float, *,
                 gaussian_claim: bool = True) -> dict[str, BoundFn]:
  """The valid bounds a cosine table supports (module docstring).

  Args:
    table: The cosine table.
    delta: The claim's delta.
    gaussian_claim: Whether the claim is a Gaussian mechanism without
      amplification: then the one-run bounds are the f-DP ones (named
      "f-DP one-run bound final/all"); else Steinke et al.'s, valid for any
      (epsilon, delta) claim ("one-run bound final/all").
  """
  if not isinstance(gaussian_claim, (bool, np.bool_)):
    raise TypeError(f"gaussian_claim must be a bool, got "
                    f"{validation.show(gaussian_claim)}.")
  fns: dict[str, BoundFn] = {}
  final_in = table.final_cosines("inserted")
  fns["epsilon_lo final"] = lambda c: lower_bounds.epsilon_lo(
      final_in, dim=table.dim, delta=delta, confidence=c,
      correction="simultaneous")
  recorded = table.has_max_cosines
  if recorded:
    max_in, max_out = table.max_cosines("inserted"), table.max_cosines(
        "held_out")
    fns["epsilon_lo all"] = lambda c: lower_bounds.epsilon_lo(
        max_in, held_out=max_out, delta=delta, confidence=c,
        correction="simultaneous")
  if table.assignment == "coin":
    mask = table.mask("inserted")
    if not gaussian_claim:
      bound, prefix = lower_bounds.one_run_bound, "one-run bound"
    elif table.orthogonal:
      bound, prefix = tight_bound, "tight one-run bound"
    else:
      bound, prefix = one_run_bound, "f-DP one-run bound"
    fns[f"{prefix} final"] = lambda c: bound(
        table.final_cosine, mask, delta=delta, confidence=c)
    if recorded:
      fns[f"{prefix} all"] = lambda c: bound(
          table.max_cosine, mask, delta=delta, confidence=c)
  return fns


def one_run_bound(statistics: npt.ArrayLike, inserted_mask: npt.ArrayLike, *,
                  delta: float, confidence: float):
  """The one-run bound the audit uses (module docstring): the f-DP one."""
  return fdp_one_run.fdp_one_run_bound(statistics, inserted_mask,
                                       delta=delta, confidence=confidence)


def tight_bound(statistics: npt.ArrayLike, inserted_mask: npt.ArrayLike, *,
                delta: float, confidence: float):
  """The audit's one-run bound with orthogonal canaries (module docstring):
  the tight one, the number released chosen by Bonferroni."""
  return tight_one_run.tight_one_run_bound(
      statistics, inserted_mask, delta=delta, confidence=confidence,
      strategy="bonferroni")


def audit_table(table: CosineTable, *, claimed_epsilon: float, delta: float,
                confidence: float = 0.95,
                gaussian_claim: bool = True) -> AuditVerdict:
  """Audits a claimed epsilon with every valid bound of a cosine table.

  `gaussian_claim`: whether the claim is a Gaussian mechanism without
  amplification (`table_bounds`).
  """
  if not isinstance(table, CosineTable):
    raise TypeError(f"table must be a CosineTable, got "
                    f"{type(table).__name__}.")
  delta = validation.as_open_unit(delta, "delta")
  verdict = audit(table_bounds(table, delta, gaussian_claim=gaussian_claim),
                  claimed_epsilon=claimed_epsilon, delta=delta,
                  confidence=confidence)
  return dataclasses.replace(
      verdict, claim_kind="gaussian" if gaussian_claim else "any")


def audit_coin_statistics(statistics: npt.ArrayLike,
                          inserted_mask: npt.ArrayLike, *, dim: Optional[int],
                          claimed_epsilon: float, delta: float,
                          confidence: float = 0.95) -> AuditVerdict:
  """Audits with one run's coin-flipped candidates (e.g. the simulator's).

  Uses the f-DP one-run bound on all candidates and, with `dim`, epsilon_lo
  with the exact null on the inserted ones.
  """
  mask = np.asarray(inserted_mask)
  stats = validation.as_cosines(statistics, "statistics")
  fns: dict[str, BoundFn] = {
      "f-DP one-run bound": lambda c: one_run_bound(
          stats, mask, delta=delta, confidence=c)}
  if dim is not None:
    fns["epsilon_lo"] = lambda c: lower_bounds.epsilon_lo(
        stats[mask], dim=dim, delta=delta, confidence=c,
        correction="simultaneous")
  return audit(fns, claimed_epsilon=claimed_epsilon, delta=delta,
               confidence=confidence)
