"""A matrix-mechanism run with no restart, simulated in the canaries' scores.

The law of `tree_simulation` (orthogonal canaries, isotropic noise: canary
j's scores u_j = a_j / z + B xi_j, xi_j ~ N(0, I), and the self-test's input
B Xi) with B = C^-1 over all n rounds (`separation.separated_noise`, one
block) and participation under a `separation.MinSeparation` rule, k rounds
at least b apart. Fair-coin candidates (Steinke, Nasr & Jagielski 2023), placed

* "worst_case": every candidate on the claimed rule's a* (rounds 0, b, 2b,
  ...: `MinSeparation.sensitivity`), each inserted canary's GLS statistic
  N(sens / z, 1), the analytical mu;
* "clients": as a cyclic sampler places clients every `client_period`
  rounds (`separation.cyclic_schedule`), by default the claim's b. A
  `client_period` below it is the planted bug "a claim of a larger b than
  the clients' real separation": the canaries then take part more often
  than the claim allows, and their schedules show it.

NumPy only.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Optional

import numpy as np

from tff_canary.stats.matrix import analytical, separation
from tff_canary.stats import validation

PLACEMENTS = ("worst_case", "clients")


@dataclasses.dataclass(frozen=True)
class SeparatedRun:
  """One simulated run (module docstring): what the auditor sees.

  Attributes:
    scores: [candidates, rounds] u_{j,t}, in units of z C.
    schedule: [candidates, rounds] bool, each candidate's rounds (the real
      ones: a canary sampled as a client records where it took part).
    inserted: [candidates] bool, the coins.
    self_test_noise: [rounds, self_test_dim] B Xi, the mechanism on zeros.
    noise: the claimed noise, B = C^-1 over all rounds (one block) under
      the claimed rule (`separation.SeparatedNoise`): its worst case, claim
      and targets are the rule's, so `tree_targets(run.noise, ...)` and
      `audit_ftrl(..., noise=run.noise)` without `claim=` use the rule.
    claim: the claimed rule's analytical epsilon (`run.noise.claim`).
  """

  scores: np.ndarray
  schedule: np.ndarray
  inserted: np.ndarray
  self_test_noise: np.ndarray
  noise: separation.SeparatedNoise
  claim: analytical.MatrixEpsilon


def simulate(coefficients: Any, rule: separation.MinSeparation, *,
             noise_multiplier: float, delta: float, num_candidates: int,
             self_test_dim: int, placement: str = "worst_case",
             client_period: Optional[int] = None,
             seed: int = 0) -> SeparatedRun:
  """One seeded run of C under `rule` (module docstring).

  Args:
    coefficients: C's c_0, c_1, ... (`toeplitz`).
    rule: the claimed participation (`separation.MinSeparation`).
    noise_multiplier: z > 0.
    delta: the claim's delta.
    num_candidates: fair-coin candidates (>= 4).
    self_test_dim: coordinates of the zero-value run (>= 2).
    placement: one of `PLACEMENTS`.
    client_period: the cyclic sampler's period with "clients"; default the
      rule's separation.
    seed: seeds the coins, the placement and the noise.
  """
  if not isinstance(rule, separation.MinSeparation):
    raise TypeError(f"rule must be a separation.MinSeparation, got "
                    f"{validation.show(rule)}.")
  z = validation.as_positive(noise_multiplier, "noise_multiplier")
  m = validation.as_int(num_candidates, "num_candidates", minimum=4)
  dim = validation.as_int(self_test_dim, "self_test_dim", minimum=2)
  placement = validation.as_choice(placement, "placement", PLACEMENTS)
  period = rule.separation if client_period is None else validation.as_int(
      client_period, "client_period", minimum=1)
  rng = np.random.default_rng(validation.as_int(seed, "seed", minimum=0))
  noise = separation.separated_noise(coefficients, rule)
  claim = noise.claim(z, delta=delta)
  inserted = rng.random(m) < 0.5
  if placement == "worst_case":
    schedule = claim.sensitivity.schedule(m)
  else:
    schedule = separation.cyclic_schedule(rule.rounds, period, m, rng)
  b = noise.released
  scores = ((schedule & inserted[:, None]) / z
            + rng.standard_normal((m, b.shape[1])) @ b.T)
  zero_run = b @ rng.standard_normal((b.shape[1], dim))
  return SeparatedRun(scores=scores, schedule=schedule, inserted=inserted,
                      self_test_noise=zero_run, noise=noise, claim=claim)


__all__ = ["PLACEMENTS", "SeparatedRun", "simulate"]
