"""Audit mode: can one run refute a claimed (epsilon, delta)? (docs/method/audit.md)

A claim "this training is (epsilon, delta)-DP" is refuted at confidence 1 -
alpha when a lower bound on epsilon that holds with probability >= 1 - alpha
exceeds the claimed epsilon (Tramèr et al. 2022, "Debugging Differential
Privacy: A Case Study for Privacy Auditing"; Jagielski et al. 2020). Only such
bounds decide the verdict, never the point estimates. The bounds
(`table_bounds`; docs/method/audit.md says which one-run bound and why):

  * epsilon_lo with `correction="simultaneous"` (`lower_bounds`), on the final
    model with the exact null (in `final_dim` dimensions) and, when
    aggregates were recorded, on all iterates with the held-out null;
  * with fair-coin assignment, a one-run bound on each statistic: for a claim
    that is a Gaussian mechanism without amplification, the f-DP one-run
    bound (Mahloujifar, Melis & Chaudhuri 2024, `fdp_one_run`), or with
    orthogonal canaries the tight one (Xiang et al. 2025, `tight_bound`);
    for any other claim, Steinke, Nasr & Jagielski's (2023,
    `lower_bounds.one_run_bound`; `gaussian_claim=False`).

With m such bounds, each is computed at confidence 1 - alpha/m (Bonferroni),
so the chance that ANY of them exceeds the true epsilon, and hence of refuting a
true claim, is at most alpha. A claim consistent with every bound is
"consistent": not confirmed, only not refuted by this attack.

The reach of an audit (docs/method/audit.md): a bound's value on perfectly
separated statistics, which depends only on the counts (`audit_bounds`). A
claim at or beyond the largest reach cannot be refuted by any run: the
verdict is then "beyond reach", with the candidates that would reach it. A
claim of epsilon = inf (no noise) promises nothing: it needs no audit and
no run can refute it, the verdict "vacuous" (its bounds still computed). A
bound of reach 0 at its share is "powerless" and takes no share of the
level (`audit_bounds.share`), a split still fixed before the statistics.

Caveat: the one-run bound is proved for many canaries in one run; epsilon_lo's
order-statistic limits assume the canaries' statistics are independent, which
holds for the Gaussian mechanism's held-out law and approximately for inserted
canaries in high dimension (`bench/validity.py` measures the rates).
"""

from __future__ import annotations

import dataclasses
import functools
import math
import typing
from typing import Any, Literal, Optional

import numpy as np
import numpy.typing as npt

from tff_canary.stats.audit import audit_bounds
from tff_canary.stats.bounds import fdp_one_run
from tff_canary.stats.bounds import lower_bounds
from tff_canary.stats.bounds import tight_one_run
from tff_canary.stats import results
from tff_canary.stats import validation
from tff_canary.stats.canaries.cosine_table import CosineTable

# A powerless bound's row in a report: why it takes no share of the audit.
POWERLESS_DETAIL = ("; powerless with these canaries (reach 0: 0 even on "
                    "perfectly separated statistics), so no share of the audit")

Verdict = Literal["consistent", "refuted", "beyond reach", "vacuous"]
VERDICTS = typing.get_args(Verdict)


@dataclasses.dataclass(frozen=True)
class AuditVerdict:
  """The verdict on a claimed epsilon, the bounds it rests on, and its reach.

  Attributes:
    claimed_epsilon, delta, confidence: the claim and the verdict's level.
    verdict: "refuted" (a bound above the claim), "beyond reach" (no bound
      could exceed the claim with these canaries, whatever the run leaks:
      the audit tested nothing), "vacuous" (the claim is epsilon = inf: it
      needs no audit, and no run can refute it) or "consistent" (not
      refuted by a test that could have refuted it).
    bounds: {name: bound result}, each computed at `per_bound_confidence`;
      only the bounds that take a share of the level (not `powerless`).
    per_bound_confidence: 1 - (1 - confidence) / len(bounds).
    strongest: name of the largest bound.
    claim_kind: "gaussian" (bounds of a Gaussian-mechanism claim), "any"
      (bounds valid for any (epsilon, delta) claim), or "" when the caller
      chose the bounds itself (`audit`).
    reach: {name: the largest epsilon the bound can show with these
      canaries}, for every bound: at `per_bound_confidence` for those in
      `bounds`, at the share where it was dropped for the powerless ones
      (0 there). inf when unlimited (epsilon_lo with the exact null); nan
      when the caller gave no reach.
    powerless: the bounds of reach 0, which took no share of the level.
    candidates: the most canaries a bound sees (coin-flipped candidates, or
      inserted and held-out canaries).
    candidates_needed: when the claim is beyond reach, the candidates (this
      run's doubled until a bound reaches the claim) that could test it;
      None otherwise, or when 2^20 candidates do not reach it.
  """

  claimed_epsilon: float
  delta: float
  confidence: float
  verdict: Verdict
  bounds: dict[str, Any]
  per_bound_confidence: float
  strongest: str
  claim_kind: str = ""
  reach: dict[str, float] = dataclasses.field(default_factory=dict)
  powerless: tuple[str, ...] = ()
  candidates: Optional[int] = None
  candidates_needed: Optional[int] = None

  @property
  def claim_kind_text(self) -> str:
    """What the one-run bounds assume of the claim, for reports ("" when the
    audit has no one-run bound, e.g. without fair-coin assignment)."""
    if not any("one-run" in name for name in self.bounds):
      return ""
    return {"gaussian": "one-run bounds of a Gaussian-mechanism claim",
            "any": "one-run bounds valid for any (ε, δ) claim (Steinke et "
                   "al.)"}.get(self.claim_kind, "")

  @property
  def refuted(self) -> bool:
    return self.verdict == "refuted"

  @property
  def beyond_reach(self) -> bool:
    """Whether no bound could exceed the claim with these canaries."""
    return self.verdict == "beyond reach"

  @property
  def vacuous(self) -> bool:
    """Whether the claim is epsilon = inf, which promises nothing."""
    return self.verdict == "vacuous"

  @property
  def largest_bound(self) -> float:
    return self.bounds[self.strongest].epsilon

  @property
  def reach_epsilon(self) -> float:
    """The largest claim the audit can refute: the largest reach of its
    bounds (nan when a bound's reach is unknown)."""
    values = [self.reach.get(name, math.nan) for name in self.bounds]
    return math.nan if any(map(math.isnan, values)) else max(values)

  @property
  def reach_name(self) -> str:
    """The bound of the largest reach."""
    return max(self.bounds, key=lambda name: self.reach.get(name, math.nan))

  def reach_text(self) -> str:
    """"these N canaries can refute claims up to X; use more canaries ...",
    for a verdict beyond reach ("" otherwise)."""
    if not self.beyond_reach:
      return ""
    needed = (f" (about {self.candidates_needed:,} candidates)"
              if self.candidates_needed else
              " (2^20 candidates would not be enough)")
    return (f"these {self.candidates:,} canaries can refute claims up to "
            f"ε = {self.reach_epsilon:.4g} ({self.reach_name}); use more "
            f"canaries{needed} to test a claim of "
            f"{self.claimed_epsilon:.4g}")

  def _details(self) -> str:
    n = len(self.bounds)
    text = (f"δ={self.delta:g}; {n} bound{'s' if n > 1 else ''}, "
            f"{'each ' if n > 1 else ''}at "
            f"{results.format_confidence(self.per_bound_confidence)}")
    if self.powerless:
      text += (f"; powerless with these canaries, so without a share: "
               f"{', '.join(self.powerless)} (reach 0)")
    if self.claim_kind_text:
      text += f"; {self.claim_kind_text}"
    return text

  def __str__(self) -> str:
    bound = self.largest_bound
    if self.vacuous:
      return (f"NOT NEEDED: a claim of ε = inf promises no privacy, so no "
              f"run can refute it (largest bound {self.strongest} = "
              f"{bound:.4g}; {self._details()})")
    if self.refuted:
      return (f"REFUTED at {results.format_confidence(self.confidence)} "
              f"confidence: {self.strongest} "
              f"= {bound:.4g} > claimed ε = {self.claimed_epsilon:.4g} "
              f"({self._details()})")
    if self.beyond_reach:
      return (f"BEYOND REACH at {results.format_confidence(self.confidence)} "
              "confidence: no bound "
              f"can exceed the claimed ε = {self.claimed_epsilon:.4g} with "
              f"these canaries, whatever the run leaks: {self.reach_text()} "
              f"(largest bound {self.strongest} = {bound:.4g}; "
              f"{self._details()})")
    reach = self.reach_epsilon
    reach = (f"; they can refute claims up to ε = {reach:.4g}"
             if math.isfinite(reach) else "")
    return (f"consistent with claimed ε = {self.claimed_epsilon:.4g} at "
            f"{results.format_confidence(self.confidence)} confidence: "
            f"largest bound {self.strongest}"
            f" = {bound:.4g} ({self._details()}{reach})")

  def reach_dict(self) -> dict[str, Any]:
    """The reach, for report.json (`headline["audit"]["reach"]`)."""
    return dict(epsilon=self.reach_epsilon, bound=self.reach_name,
                candidates=self.candidates, bounds=dict(self.reach),
                powerless=list(self.powerless),
                beyond=self.beyond_reach,
                candidates_needed=self.candidates_needed)

  def as_dict(self) -> dict[str, Any]:
    return dict(claimed_epsilon=self.claimed_epsilon, delta=self.delta,
                confidence=self.confidence, verdict=self.verdict,
                per_bound_confidence=self.per_bound_confidence,
                strongest=self.strongest, claim_kind=self.claim_kind,
                bounds={k: v.as_dict() for k, v in self.bounds.items()},
                reach=self.reach_dict())


BoundFn = audit_bounds.BoundFn
AuditBound = audit_bounds.AuditBound


def audit(bound_fns: dict[str, BoundFn], *, claimed_epsilon: float,
          delta: float, confidence: float = 0.95) -> AuditVerdict:
  """The verdict from named bound builders (each called with its confidence).

  Args:
    bound_fns: {name: f}, f(confidence) returning a bound result with
      `.epsilon`; every f must hold with the confidence it is given. An
      `AuditBound` also gives its reach (module docstring); a plain
      function's reach is unknown (nan) and it always takes a share.
    claimed_epsilon: the claim, >= 0 (inf: "vacuous", never refuted).
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
  active, per, reach = audit_bounds.share(bound_fns, confidence)
  bounds = {name: bound_fns[name](per) for name in active}
  strongest = max(bounds, key=lambda name: bounds[name].epsilon)
  candidates = max([fn.candidates for fn in bound_fns.values()
                    if isinstance(fn, AuditBound)], default=None)
  verdict = AuditVerdict(
      claimed_epsilon=claimed, delta=delta, confidence=confidence,
      verdict="consistent", bounds=bounds, per_bound_confidence=per,
      strongest=strongest, reach=reach,
      powerless=tuple(n for n in bound_fns if n not in active),
      candidates=candidates)
  if math.isinf(claimed):
    return dataclasses.replace(verdict, verdict="vacuous")
  if verdict.largest_bound > claimed:
    return dataclasses.replace(verdict, verdict="refuted")
  if verdict.reach_epsilon <= claimed:  # nan (a reach unknown): never
    return dataclasses.replace(
        verdict, verdict="beyond reach",
        candidates_needed=audit_bounds.candidates_needed(
            bound_fns, active, per, claimed, candidates))
  return verdict


def final_dim(table: CosineTable) -> int:
  """The dimension of the final-model cosines' null law: d, or d - |I| + 1.

  When the inserted canaries' projections are removed from theta_0 -
  theta_T (orthogonal canaries, known_canaries_removed =
  "final_and_all_iterates"), an inserted canary's cosine is taken in the
  complement of the |I| - 1 others, whose null is the cosine null in d - |I|
  + 1 dimensions, wider than in d (docs/method/orthogonal-canaries.md). Every
  estimate and bound on the final model's cosines uses it; each round removes
  only its own inserted canaries, a handful against d, so the round
  statistics keep d.
  """
  if table.known_canaries_removed != "final_and_all_iterates":
    return int(table.dim)
  return int(table.dim) - int(table.mask("inserted").sum()) + 1


def repeats_final(table: CosineTable) -> bool:
  """True when the all-iterates statistics are the final model's again.

  With one recorded round whose every canary's statistic equals its
  final-model cosine bit for bit (one release, the final model being the
  initial one plus it, scaled: FedAvg, Flower's DP strategies, a one-round
  TFF run with SGD), a bound on "all iterates" is a bound on the same
  statistic as on "final", with a weaker null (held out, not exact): it
  would take half of the audit's level and add no power. The test is on the
  table's structure and its recorded values, before any bound is computed;
  `table_bounds` then leaves the "all" bounds out (docs/method/audit.md).
  """
  return (table.has_max_cosines and table.rounds_recorded == 1
          and np.array_equal(table.max_cosine, table.final_cosine))


# The report's row of an all-iterates bound that `repeats_final` leaves out.
REPEATS_FINAL_DETAIL = ("; not in the audit: with one recorded release the "
                        "all-iterates statistic is the final model's, so its "
                        "bound would repeat the final one's")


STATISTICS = ("final", "all")


def statistic_bounds(table: CosineTable, delta: float, statistic: str, *,
                     gaussian_claim: bool = True) -> dict[str, AuditBound]:
  """The valid bounds on one statistic of a cosine table (module docstring).

  Args:
    table: The cosine table.
    delta: The claim's delta.
    statistic: "final" (the final model's cosines: epsilon_lo with the
      exact null in `final_dim` dimensions) or "all" (the all-iterates
      statistics, which need `has_max_cosines`: epsilon_lo with the held-out
      null); with coin assignment, each also gets its one-run bound.
    gaussian_claim: Whether the claim is a Gaussian mechanism without
      amplification: then the one-run bound is the f-DP one ("f-DP one-run
      bound final/all"), or with orthogonal canaries the tight one ("tight
      one-run bound final/all"); else Steinke et al.'s, valid for any
      (epsilon, delta) claim ("one-run bound final/all").
  """
  validation.as_bool(gaussian_claim, "gaussian_claim")
  statistic = validation.as_choice(statistic, "statistic", STATISTICS)
  fns: dict[str, AuditBound] = {}
  if statistic == "final":
    fns["epsilon_lo final"] = audit_bounds.epsilon_lo_bound(
        table.final_cosines("inserted"), dim=final_dim(table), delta=delta)
  else:
    fns["epsilon_lo all"] = audit_bounds.epsilon_lo_bound(
        table.max_cosines("inserted"), held_out=table.max_cosines("held_out"),
        delta=delta)
  if table.assignment == "coin":
    if not gaussian_claim:
      bound, prefix = lower_bounds.one_run_bound, "one-run bound"
    elif table.orthogonal:
      bound, prefix = tight_bound, "tight one-run bound"
    else:
      bound, prefix = one_run_bound, "f-DP one-run bound"
    values = table.final_cosine if statistic == "final" else table.max_cosine
    fns[f"{prefix} {statistic}"] = audit_bounds.coin_bound(
        bound, values, table.mask("inserted"), delta=delta)
  return fns


def table_bounds(table: CosineTable, delta: float, *,
                 gaussian_claim: bool = True) -> dict[str, AuditBound]:
  """The valid bounds the audit of a cosine table uses (module docstring).

  Those of the final model (`statistic_bounds`), and of all iterates when
  the table has their statistics (`has_max_cosines`) and they are not the
  final model's again (`repeats_final`), in the order epsilon_lo final,
  epsilon_lo all, one-run final, one-run all. Args as `statistic_bounds`.
  """
  final = statistic_bounds(table, delta, "final",
                           gaussian_claim=gaussian_claim)
  if not table.has_max_cosines or repeats_final(table):
    return final
  every = statistic_bounds(table, delta, "all", gaussian_claim=gaussian_claim)
  return dict(pair for pairs in zip(final.items(), every.items())
              for pair in pairs)


# The one-run bound the audit uses (module docstring): the f-DP one.
one_run_bound = fdp_one_run.fdp_one_run_bound


# The audit's one-run bound with orthogonal canaries (module docstring): the
# tight one, the number released chosen by Bonferroni.
tight_bound = functools.partial(tight_one_run.tight_one_run_bound,
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
  fns: dict[str, AuditBound] = {
      "f-DP one-run bound": audit_bounds.coin_bound(one_run_bound, stats, mask,
                                       delta=delta)}
  if dim is not None:
    fns["epsilon_lo"] = audit_bounds.epsilon_lo_bound(stats[mask], dim=dim, delta=delta)
  return audit(fns, claimed_epsilon=claimed_epsilon, delta=delta,
               confidence=confidence)
