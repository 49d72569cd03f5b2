"""The noise self-test of a Flower DP strategy, and what NumPy's global RNG makes of it.

`check_flower_noise(strategy, arrays)` is the Flower twin of the TFF half's
`canary_noise_check.check_noise` (docs/method/noise-self-test.md): it
drives a COPY of the user's server-side DP strategy (`copy.deepcopy`: the
user's object, its clip and its accountant are untouched) in-process for
`num_rounds` rounds on hand-built replies whose clipped mean is known, so
that each round's release minus that mean is Flower's noise alone, and
tests it with `tff_canary.stats.noise.noise_stats.check_noise` against the
std the run's claim assumes: s_t = z_t C_t / n, z_t the round's noise
multiplier over a client's sensitivity (`flower_claim.value_multiplier`;
fixed clipping: z C / n; adaptive: z_v C_{t+1} / n, the noise Flower adds
after moving the clip), read from the strategy's public parameters, not
from its noise step, so a noise step that adds another std fails (e.g. a
subclass scaling by n^2).

The replies: every one of the n = `num_sampled_clients` replies is the
model sent plus the same update u, of norm C_t / 2 (below the clip: not
clipped, and not zero, which Flower's clipping divides by), weight 1.
The noiseless aggregate is FedAvg's own mean of the replies as Flower
clipped them in place (`aggregate_arrayrecords`), so the noise is exact up
to the float rounding of one addition. The model's arrays are zeros of the
user's model's names, shapes and dtypes (Flower casts its noise to each
array's dtype). The copy has no accountant (None): it needs
`configure_train`'s pending event and does not touch the noise.

What the statistics cannot see: Flower draws its noise with NumPy's
global `np.random.normal`, so its noise is a known function of that RNG's
state, and a script that calls `np.random.seed(s)` (for reproducibility)
gives no DP against anyone who knows or guesses s. The check runs its
first round twice from the same `np.random` state and compares the noise
bit for bit (`reproducible`: True for Flower 1.42, a note, not a failure:
it is a property of Flower's code, and whether the state is guessable
depends on the script), and fails when two of its rounds drew bit-identical
noise (`repeated_rounds`: a seed reset every round). `with_run_states`
adds what the run itself recorded: equal fingerprints of the RNG state
before two rounds' noise (`protocol_flower.rng_fingerprint`) mean those
rounds drew the same noise, a failure. A run that seeded `np.random`
itself (experiments/flower_app's `noise-seed`, for a reproducible
simulation) says so in its check (`noise_seed`): its note comes first, as
the headline shows the first note.

Adaptive clipping's other release, the clipped count noised with
`np.random.normal(count, clipped_count_stddev)`, is read back from the
clip's update (no reply of the check is clipped: count 0); a count noise
of exactly 0 in every round (to 1e-6 of its std) fails: the count was
released without its noise. Its std is not tested (one value a round). The check puts `np.random`'s state
back as it found it, so a run's noise is the same with or without it.
"""

from __future__ import annotations

import copy
import dataclasses
import hashlib
import math
from typing import Any, Optional, Sequence

import numpy as np
from flwr.app import Array, ArrayRecord
from flwr.supercore.differential_privacy import KEY_NORM_BIT
from flwr.serverapp.strategy import DifferentialPrivacyClientSideAdaptiveClipping
from flwr.serverapp.strategy.strategy_utils import aggregate_arrayrecords

from tff_canary.mechanisms import protocol_flower
from tff_canary.mechanisms.gaussian import flower
from tff_canary.mechanisms.gaussian import flower_claim
from tff_canary.mechanisms.gaussian import flower_clients
from tff_canary.stats import validation
from tff_canary.stats.noise import noise_stats

DEFAULT_ROUNDS = 4  # as the TFF check's (noise_check.DEFAULT_ROUNDS)

# What the report says of noise drawn from NumPy's global RNG.
GLOBAL_RNG_NOTE = (
    "Flower's noise is a function of NumPy's global RNG state (np.random): "
    "drawn twice from the same state it was bit for bit the same, so a "
    "script that calls np.random.seed(s) gives no DP against anyone who "
    "knows or guesses s")


def seeded_note(noise_seed: int) -> str:
  """What the report says of a run that seeded np.random with `noise_seed`."""
  return (f"this run seeded np.random with noise_seed={noise_seed} (a "
          "reproducible simulation): its noise is known to anyone who knows "
          "the seed, and gives no DP against them")


@dataclasses.dataclass(frozen=True)
class FlowerNoiseCheck:
  """The verdict of `check_flower_noise` (module docstring).

  Attributes:
    noise: The statistical check of the noise (`noise_stats.NoiseCheck`).
    reproducible: The first round's noise, drawn again from the same
      `np.random` state, was bit for bit the same (and not all zero).
    repeated_rounds: (earlier, later) Flower rounds of the check whose
      noise was bit for bit the same (each later round with the first
      round it repeats).
    run_repeats: (earlier, later) Flower rounds of the run whose
      `np.random` state before the noise was the same (`with_run_states`).
    strategy: The DP strategy's class name.
    count_noise: Adaptive clipping: each round's noise of the clipped
      count, read back from the clip's update (`_count_noise`); () for
      fixed clipping.
    count_std: The count's claimed std (`clipped_count_stddev`; 0 for
      fixed clipping).
    noise_seed: The seed the run gave `np.random.seed` (None: the run
      did not seed it).
  """

  noise: noise_stats.NoiseCheck
  reproducible: bool
  repeated_rounds: tuple[tuple[int, int], ...]
  run_repeats: tuple[tuple[int, int], ...] = ()
  strategy: str = ""
  count_noise: tuple[float, ...] = ()
  count_std: float = 0.0
  noise_seed: Optional[int] = None

  @property
  def failures(self) -> tuple[str, ...]:
    own = [f"rounds {a} and {b} of the check drew bit-identical noise (the "
           "noise RNG was reset between them)" for a, b in self.repeated_rounds]
    own += [f"rounds {a} and {b} of the run started their noise from the "
            "same np.random state: their noise was the same draw"
            for a, b in self.run_repeats]
    # A Gaussian of std s is within 1e-6 s of 0 with probability 8e-7:
    # zero in every round means no noise, not chance.
    if self.count_noise and self.count_std > 0.0 and all(
        abs(x) <= 1e-6 * self.count_std for x in self.count_noise):
      own.append(
          f"adaptive clipping's clipped count was released without its "
          f"noise: read back from the clip's updates, its noise was 0 in "
          f"all {len(self.count_noise)} rounds, claimed std "
          f"{self.count_std:.4g}")
    return tuple(own) + self.noise.failures

  @property
  def passed(self) -> bool:
    return not self.failures

  @property
  def verdict(self) -> str:
    return "passed" if self.passed else "failed"

  @property
  def notes(self) -> tuple[str, ...]:
    return self._rng_notes + self.noise.notes

  @property
  def _rng_notes(self) -> tuple[str, ...]:
    seeded = (() if self.noise_seed is None
              else (seeded_note(self.noise_seed),))
    return seeded + ((GLOBAL_RNG_NOTE,) if self.reproducible else ())

  def __str__(self) -> str:
    text = str(self.noise)
    rng = "".join("; " + note for note in self._rng_notes)
    if self.passed:
      return text + rng
    more = len(self.failures) - 1
    return (f"noise check FAILED on Flower's noise ({self.strategy}): "
            f"{self.failures[0]}" + (f" (and {more} more)" if more else "")
            + rng)

  def with_run_states(self, rounds: Sequence[protocol_flower.RoundScores]
                      ) -> FlowerNoiseCheck:
    """This check with the run's repeated RNG states added (module
    docstring), from the rounds' recorded `rng_state` (of rounds with
    noise: no noise is the same whatever the state)."""
    pairs = protocol_flower.repeated_states(
        [r.rng_state if r.noise_std > 0.0 else "" for r in rounds])
    repeats = tuple((rounds[a].server_round, rounds[b].server_round)
                    for a, b in pairs)
    return dataclasses.replace(self, run_repeats=repeats)

  def as_dict(self) -> dict[str, Any]:
    """noise_check.json: the statistical check's keys (`NoiseCheck.as_dict`),
    its verdict, summary, failures and notes this check's; a failed
    check's `notes` are empty (the report's line shows a note before the
    summary: a failure must show its reason) and kept under `flower`."""
    out = self.noise.as_dict()
    out.update(passed=self.passed, verdict=self.verdict, summary=str(self),
               failures=list(self.failures),
               notes=list(self.notes) if self.passed else [],
               flower=dict(strategy=self.strategy, notes=list(self.notes),
                           reproducible=self.reproducible,
                           repeated_rounds=[list(p) for p in
                                            self.repeated_rounds],
                           run_repeats=[list(p) for p in self.run_repeats],
                           count_noise=list(self.count_noise),
                           count_std=self.count_std,
                           noise_seed=self.noise_seed))
    return out


def _count_noise(dp: Any, clip: float, n: int) -> float:
  """The clipped count's noise of an adaptive round, read back from the
  clip's update (module docstring): no reply was clipped (count 0), and
  C_{t+1} = C_t exp(-lr (noisy count / n - target)), so the noisy count is
  n (target - log(C_{t+1} / C_t) / lr); NaN for fixed clipping."""
  if not isinstance(dp, flower_claim.ADAPTIVE):
    return float("nan")
  fraction = (dp.target_clipped_quantile
              - math.log(float(dp.clipping_norm) / clip) / dp.clip_norm_lr)
  return n * fraction


def _round(dp: Any, layout: protocol_flower.ArrayLayout, zeros, server_round):
  """(noise [d] float64, claimed std, the count's noise) of one round of
  `dp` (module docstring)."""
  n = int(dp.num_sampled_clients)
  clip = float(dp.clipping_norm)
  step = np.full(layout.dim, 0.5 * clip / np.sqrt(layout.dim))
  sent = layout.add(zeros, np.zeros(layout.dim))
  key, weight_key = dp.strategy.arrayrecord_key, dp.strategy.weighted_by_key
  replies = [protocol_flower.reply(layout.add(zeros, step), node, server_round,
                                   arrays_key=key, weighted_by_key=weight_key)
             for node in range(1, n + 1)]
  if isinstance(dp, DifferentialPrivacyClientSideAdaptiveClipping):
    for message in replies:  # what adaptiveclipping_mod adds: not clipped
      message.content["metrics"][KEY_NORM_BIT] = 0
  dp.current_arrays = sent  # what its configure_train keeps
  released, _ = dp.aggregate_train(server_round, replies)
  if released is None:
    raise ValueError(f"strategy released nothing in round {server_round} of "
                     "the noise check (Flower refused its replies).")
  mean = aggregate_arrayrecords([r.content for r in replies], weight_key)
  noise = layout.flatten(released) - layout.flatten(mean)
  scores = protocol_flower.RoundScores(
      server_round=server_round, schedule_round=server_round - 1, clip=clip,
      scale=clip / n, noise_std=float("nan"),
      inserted_ids=np.zeros(0, np.int64), num_replies=n, max_weight=1.0 / n,
      scores=np.zeros(0), cosines=np.zeros(0),
      noise_multiplier=float(dp.noise_multiplier),
      noise_clip=float(dp.clipping_norm))
  return (noise, flower_claim.value_multiplier(scores, n) * clip / n,
          _count_noise(dp, clip, n))


def check_flower_noise(strategy: Any, arrays: Any, *,
                       num_rounds: int = DEFAULT_ROUNDS,
                       level: float = noise_stats.DEFAULT_LEVEL,
                       seed: int = 0) -> FlowerNoiseCheck:
  """The noise self-test of a Flower server-side DP strategy (module doc).

  Args:
    strategy: The DP strategy (`flower.check_strategy`), or the
      `ServerSideCanaries` around it; it is copied, not driven.
    arrays: The model's `ArrayRecord` (its names, shapes and dtypes; the
      check's model is zeros of them).
    num_rounds: Rounds of noise to test (at least 2: independence across
      rounds).
    level: The family-wise level of the statistical check.
    seed: Seeds the Gaussianity test's subsample.

  Raises:
    TypeError, ValueError: for an argument it cannot check, naming it.
  """
  if isinstance(strategy, (flower.ServerSideCanaries,
                           flower_clients.CanaryClients)):
    strategy = strategy.strategy
  strategy = flower_clients.check_strategy(strategy)  # any of the four
  layout = protocol_flower.ArrayLayout.of(arrays)
  num_rounds = validation.as_int(num_rounds, "num_rounds", minimum=2)
  zeros = ArrayRecord({k: Array(np.zeros(s, d)) for k, s, d in
                       zip(layout.keys, layout.shapes, layout.dtypes)})
  state = np.random.get_state()
  try:
    dp = _copy(strategy)
    rounds = [_round(dp, layout, zeros, t + 1) for t in range(num_rounds)]
    np.random.set_state(state)
    again = _round(_copy(strategy), layout, zeros, 1)[0]
  finally:
    np.random.set_state(state)
  noise = [[piece for piece in _split(layout, r[0])] for r in rounds]
  result = noise_stats.check_noise(
      noise, [r[1] for r in rounds], level=level, seed=seed,
      tensor_names=layout.keys,
      claim="z_t x C_t / num_sampled_clients of the Flower strategy "
            "(flower_claim.value_multiplier)")
  # Zero noise (none claimed, `noise_stats`' degenerate end) repeats
  # without meaning anything: only nonzero noise is compared.
  digests = [hashlib.sha256(r[0].tobytes()).hexdigest()
             if np.any(r[0] != 0.0) else "" for r in rounds]
  repeated = tuple((a + 1, b + 1)
                   for a, b in protocol_flower.repeated_states(digests))
  return FlowerNoiseCheck(
      noise=result, reproducible=bool(np.any(again != 0.0) and np.array_equal(
          again, rounds[0][0])),
      repeated_rounds=repeated, strategy=type(strategy).__name__,
      count_noise=tuple(r[2] for r in rounds if math.isfinite(r[2])),
      count_std=(float(strategy.clipped_count_stddev) if isinstance(
          strategy, flower_claim.ADAPTIVE) else 0.0))


def _copy(strategy: Any) -> Any:
  """A deep copy of `strategy` whose accountant is None (module docstring:
  it needs configure_train's event; and it holds modules, which do not
  copy): the memo maps the accountant to None, so the user's is not
  touched."""
  accountant = getattr(strategy, "accountant", None)
  memo = {} if accountant is None else {id(accountant): None}
  return copy.deepcopy(strategy, memo)


def _split(layout: protocol_flower.ArrayLayout, flat: np.ndarray
           ) -> list[np.ndarray]:
  pieces, start = [], 0
  for shape in layout.shapes:
    size = int(np.prod(shape, dtype=np.int64))
    pieces.append(flat[start:start + size])
    start += size
  return pieces


def check_run(strategy: Any, arrays: Any,
              check: Optional[FlowerNoiseCheck] = None,
              **kwargs: Any) -> FlowerNoiseCheck:
  """The check of a finished run's `ServerSideCanaries`: `check` (one the
  user ran before training) or a new `check_flower_noise` of its DP
  strategy, with the run's repeated RNG states (`with_run_states`)."""
  if not isinstance(strategy, (flower.ServerSideCanaries,
                               flower_clients.CanaryClients)):
    raise TypeError("strategy must be the run's ServerSideCanaries or "
                    "CanaryClients, got "
                    f"{validation.show(strategy)}.")
  if check is None:
    check = check_flower_noise(strategy, arrays, **kwargs)
  elif not isinstance(check, FlowerNoiseCheck):
    raise TypeError("check must be a FlowerNoiseCheck "
                    "(check_flower_noise's), got "
                    f"{validation.show(check)}.")
  return check.with_run_states(strategy.rounds)


__all__ = ["DEFAULT_ROUNDS", "FlowerNoiseCheck", "GLOBAL_RNG_NOTE",
           "check_flower_noise", "check_run", "seeded_note"]
