"""Planted bugs of a matrix mechanism's noise generator, as the noise released.

A matrix mechanism restarted every epoch releases y = x + B xi with B
block-diagonal, blocks C_E^-1 of its Toeplitz strategy C
(`strategy_noise`). A streaming generator (`streaming.BandedNoise`,
`streaming.BltNoise`, the TFF query `matrix_query`) computes row t of B xi
from round t's fresh noise xi_t and a state; each bug below is one wrong line
of such a generator, written as the B' it really releases while the claim
keeps B:

* "buffers_reset": the state (the banded generator's last b - 1 noises, the
  BLT's buffers) is reset every `reset_every` rounds, counted from the
  epoch's start, instead of carried to the next round (`reset_every` = 1:
  never carried). B' is block-diagonal
  with blocks C_r^-1, r = `reset_every` (each epoch cut into such blocks);
* "coefficient_scale": the generator's c_i, i >= 1, multiplied by `factor`
  (a BLT's output scales omega, or a banded strategy's off-diagonal bands,
  off by that factor): B' has blocks C'_E^-1;
* "noise_reuse": the fresh noise of round t drawn again at round t + `lag`
  (a ring of `lag` seeds): xi'_t = xi_(t mod lag), B' = B R with R[t, s] = 1
  for s = t mod lag.

Each changes the law of the noise on zero values, which the audit's
self-test whitens by the claimed K (`tree_audit.audit_ftrl`); what each does
to privacy differs (reuse lets differences of rounds cancel the noise, a
reset buffer makes the rounds' noise less correlated than claimed), so the
audit calls each a departure from the claim, not an epsilon. A client
counted twice in an epoch is `tree_simulation.simulate`'s
"double_participation" on any noise. A claim of a larger separation than the
clients' real one needs the b-min-separated claim without restarts, which
the audit does not take yet.

NumPy only.
"""

from __future__ import annotations

from typing import Any, Literal, Optional

import numpy as np

from tff_canary.stats.correlated import linear_noise
from tff_canary.stats.matrix import strategy_noise, toeplitz
from tff_canary.stats import validation

Bug = Literal["none", "buffers_reset", "coefficient_scale", "noise_reuse"]
BUGS: tuple[str, ...] = ("none", "buffers_reset", "coefficient_scale",
                         "noise_reuse")


def _blocks(rounds: int, period: int) -> list[tuple[int, int]]:
  return [(s, min(s + period, rounds)) for s in range(0, rounds, period)]


def _below(value: Any, name: str, limit: int, limit_name: str) -> int:
  value = validation.as_int(value, name, minimum=1)
  if value >= limit:
    raise ValueError(f"{name} must be below {limit_name} = {limit}, got "
                     f"{value}.")
  return value


def planted_noise(coefficients: Any, rounds: int, *, restart_every: int,
                  bug: Bug, reset_every: int = 1, factor: float = 0.5,
                  lag: Optional[int] = None) -> linear_noise.LinearNoise:
  """The noise released by the generator of C restarted every
  `restart_every` rounds with `bug` planted (module docstring).

  Args:
    coefficients: C's c_0, c_1, ... (`toeplitz`).
    rounds: n.
    restart_every: E, the epoch: the claimed noise is
      `strategy_noise.strategy_noise(coefficients, n, restart_every=E)`,
      whose blocks the returned noise keeps.
    bug: one of `BUGS`.
    reset_every: "buffers_reset"'s r, 1 <= r < E.
    factor: "coefficient_scale"'s factor on c_i, i >= 1; positive, not 1.
    lag: "noise_reuse"'s lag, 1 <= lag < n; default E // 2.
  """
  c = toeplitz.as_coefficients(coefficients)
  n = validation.as_int(rounds, "rounds", minimum=2)
  e = validation.as_int(restart_every, "restart_every", minimum=2)
  bug = validation.as_choice(bug, "bug", BUGS)
  claimed = strategy_noise.strategy_noise(c, n, restart_every=e)
  if bug == "none":
    return claimed
  released = np.zeros((n, n))
  if bug == "buffers_reset":
    r = _below(reset_every, "reset_every", e, "restart_every")
    for start, stop in _blocks(n, e):
      for first, last in _blocks(stop - start, r):
        released[start + first:start + last, start + first:start + last] = (
            toeplitz.noise_matrix(c, last - first))
  elif bug == "coefficient_scale":
    factor = validation.as_positive(factor, "factor")
    if factor == 1.0:
      raise ValueError("factor must differ from 1 (1 plants no bug), got 1.0.")
    scaled = np.concatenate([c[:1], factor * c[1:]])
    for start, stop in _blocks(n, e):
      released[start:stop, start:stop] = toeplitz.noise_matrix(
          scaled, stop - start)
  else:  # noise_reuse
    lag = e // 2 if lag is None else _below(lag, "lag", n, "rounds")
    for t in range(n):
      released[:, t % lag] += claimed.released[:, t]
  return claimed.with_coefficients(released)


__all__ = ["BUGS", "Bug", "planted_noise"]
