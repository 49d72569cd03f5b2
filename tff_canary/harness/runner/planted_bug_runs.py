"""One real TFF training run per planted DP bug, judged by the tool as a whole.

The TFF counterpart of `tff_canary.stats.simulation.pipeline_simulator` (issue 10: "show
each [planted bug] once in a real TFF run"); docs/guide/distributed-dp.md
("Each bug once in a real TFF run") shows the runs. `run(config)` trains a
tiny model (`planted_model`: a 2-layer MLP, d = F*H + H + H*K + K, on
synthetic Gaussian-class data) with a `tff.learning` process and canaries:

* ``mode="client"``: `canary_clients.build_canary_client_fedavg`; canary j
  is a client whose update is `canary_norm` x c_j, so the user's aggregator
  clips (and, under distributed DP, scales, rounds and noises) it like any
  client. Each round has exactly `clients_per_round` participants: the
  round's canary clients and real clients for the rest.
* ``mode="server"``: TFF's `build_unweighted_fed_avg` with `CanaryDPFactory`
  on the same query; canaries are added at the query's clip C after the
  clients' pipeline, and `clients_per_round` real clients take part.

The run asks its mechanism's TFF half (`protocol_tff.TffMechanism.
planted_bugs`), never its name, for a `PlantedBugs`
(`tff_canary.mechanisms.planted_runs`, which holds the run's
`BugRunConfig` too): its planted bugs (user code, in each mechanism's
`planted_bugs` module) and each step of a run; the defaults are
DP-FedAvg's, a mechanism overrides what differs. By
default the claim is the analytical epsilon of one participation; the
canaries' cosine table (final model and all iterates) is audited at 95% on
its valid bounds (`audit.table_bounds`; for a claim that is not a Gaussian
mechanism's, Steinke et al.'s one-run bound, valid for any (epsilon, delta)
claim, replaces the f-DP one); the point estimates decide nothing. "The
tool" caught a run when the audit refuted the claim or the noise self-test
(the run's aggregator as configured, on zero values) failed.
"""

from __future__ import annotations

import dataclasses
import time
import typing
from typing import Optional

from tff_canary.mechanisms.planted_runs import BugRunConfig
from tff_canary.mechanisms.planted_runs import MODES
from tff_canary.mechanisms.planted_runs import Mode
from tff_canary.mechanisms.planted_runs import PlantedBugs
from tff_canary.mechanisms.planted_runs import aggregator_names
from tff_canary.mechanisms.planted_runs import bugs
from tff_canary.mechanisms.planted_runs import coin_canaries
from tff_canary.mechanisms.planted_runs import planted
from tff_canary.stats import validation
from tff_canary.stats.audit import table_estimates


@dataclasses.dataclass(frozen=True)
class BugRun:
  """One run's claim, audit (`PlantedBugs.judge`'s verdict, and its
  estimates or None) and noise self-test."""

  config: BugRunConfig
  claimed_epsilon: float
  claim: str
  verdict: Any  # audit_lib.AuditVerdict, or the mechanism's own
  estimates: Optional[table_estimates.TableEstimates]
  noise_check: Any  # noise_stats.NoiseCheck, or the mechanism's own
  seconds: float

  @property
  def detected(self) -> bool:
    """The tool as a whole: the claim refuted, or the self-test failed."""
    return self.verdict.refuted or not self.noise_check.passed

  def row(self) -> dict[str, str]:
    c, e, v = self.config, self.estimates, self.verdict
    eps = lambda bound: f"{getattr(bound, 'epsilon', float('nan')):.3g}"
    return {
        "bug": c.bug, "size": f"{c.bug_size:g}" if c.bug != "none" else "-",
        "aggregator": c.aggregator, "mode": c.mode,
        "claimed ε": f"{self.claimed_epsilon:.3g}",
        "ε_lo final/all": (f"{eps(e.lo_final)}/{eps(e.lo_all)}" if e
                           else "-"),
        "largest bound": f"{v.largest_bound:.3g}", "audit": v.verdict,
        "ε-final/ε-all (pt)": (f"{eps(e.final_mean_only)}/"
                               f"{eps(e.all_iterates)}" if e else "-"),
        "self-test": "passed" if self.noise_check.passed else "FAILED",
        "caught": "yes" if self.detected else "no",
        "s": f"{self.seconds:.0f}",
    }

  def as_dict(self) -> dict[str, typing.Any]:
    return dict(config=dataclasses.asdict(self.config), label=self.config.label,
                claimed_epsilon=self.claimed_epsilon, claim=self.claim,
                detected=self.detected,
                verdict=self.verdict.as_dict(),
                estimates=self.estimates and self.estimates.as_dict(),
                noise_check=self.noise_check.as_dict(), seconds=self.seconds)

  def __str__(self) -> str:
    return (f"{self.config.label}: claim {self.claim}; {self.verdict}; "
            f"{self.noise_check}; {'caught' if self.detected else 'not caught'}"
            " (one run: a detection or a miss, not a rate)")


def format_table(runs: typing.Sequence[BugRun]) -> str:
  """The runs' rows as an aligned text table."""
  rows = [run.row() for run in runs]
  if not rows:
    return "(no runs)"
  keys = list(rows[0])
  widths = {k: max(len(k), *(len(r[k]) for r in rows)) for k in keys}
  lines = ["  ".join(k.ljust(widths[k]) for k in keys)]
  lines += ["  ".join(r[k].ljust(widths[k]) for k in keys) for r in rows]
  return "\n".join(lines)


def run(config: BugRunConfig) -> BugRun:
  """Trains once with `config` and applies the tool (module docstring)."""
  if not isinstance(config, BugRunConfig):
    raise TypeError(f"config must be a BugRunConfig, got "
                    f"{validation.show(config)}.")
  start = time.perf_counter()
  planted_bugs = config.planted
  canaries, told = planted_bugs.canaries(config)
  training, checked, claimed_std = planted_bugs.aggregators(config, canaries)
  observed = planted_bugs.observe(config, canaries, training)
  check = planted_bugs.noise_check(config, checked, claimed_std)
  eps, claim = planted_bugs.claim(config)
  verdict, estimated = planted_bugs.judge(config, observed, told, eps, check)
  return BugRun(config=config, claimed_epsilon=eps, claim=claim,
                verdict=verdict, estimates=estimated, noise_check=check,
                seconds=time.perf_counter() - start)


__all__ = ["BugRun", "BugRunConfig", "MODES", "PlantedBugs",
           "aggregator_names", "bugs", "coin_canaries", "format_table",
           "planted", "run"]
