"""Which canaries a run has, and when the inserted ones take part.

docs/method/canaries.md (Andrew et al., "One-shot Empirical Privacy Estimation for Federated
Learning", ICLR 2024, arXiv 2302.03098, Section 3). Canary ids are 0..m-1
(m = num_inserted + num_held_out); each id names a random unit direction of
the model's parameter space, regenerated from (seed, id) by
`tff_canary.federated.insertion.canary_directions`, or a row of one seeded
orthogonal matrix (docs/method/orthogonal-canaries.md). This module holds
only the configuration, so that tables and reports use it without
TensorFlow.

The defaults are the recommended design (README.md): coin assignment (for
the one-run bound of Steinke, Nasr and Jagielski 2023,
docs/method/lower-bounds.md) and orthogonal directions. The paper's
construction is `CanaryConfig(..., assignment="fixed",
directions="gaussian")`; `CanaryConfig`'s attributes say what each choice
does.
"""

from __future__ import annotations

import dataclasses
import functools
import typing
import warnings
from typing import Literal

import numpy as np

from tff_canary.stats import call_site
from tff_canary.stats.canaries import schedules
from tff_canary.stats import validation

ASSIGNMENTS = ("fixed", "coin")
Directions = Literal["gaussian", "orthogonal"]
DIRECTIONS = typing.get_args(Directions)

# The L2 norm of a canary client's update (the client-insertion mode,
# `tff_canary.federated.insertion.canary_clients`, explains the value); here, TF-free,
# so that experiment configs can default to it before TensorFlow loads.
DEFAULT_CANARY_NORM = 10.0

# Warn when m = num_inserted + num_held_out exceeds dim / ORTHOGONALITY_RATIO.
ORTHOGONALITY_RATIO = 100


class TooManyCanariesWarning(UserWarning):
  """More canaries than the model's dimension keeps nearly orthogonal."""


def resolve_record_aggregates(record_aggregates: bool | None,
                              directions: str) -> bool:
  """Whether a run records each round's noised aggregate.

  None (the default): gaussian canaries do (their all-iterates cosines are
  taken after training from the recorded aggregates), orthogonal ones do
  not (they are scored inside each round).

  Raises:
    TypeError: if `record_aggregates` is not a bool or None.
    ValueError: for True with orthogonal canaries (nothing to record).
  """
  record_aggregates = validation.as_bool(record_aggregates, "record_aggregates",
                                         optional=True)
  if record_aggregates is None:
    return directions == "gaussian"
  if record_aggregates and directions == "orthogonal":
    raise ValueError(
        "record_aggregates=True with directions='orthogonal': orthogonal "
        "canaries are scored inside each round, so no aggregate is "
        "recorded; leave record_aggregates at None (or False), or use "
        "directions='gaussian' to record the aggregates.")
  return record_aggregates


@dataclasses.dataclass(frozen=True)
class CanaryConfig:
  """Which canaries a run has, and when the inserted ones take part.

  Frozen and validated at construction; the membership and the realized
  schedule are computed then, deterministically from `seed`.

  Attributes:
    seed: Nonnegative integer seed of the canary directions, the coin and the
      schedule.
    num_inserted: k >= 0, inserted canaries (ids 0..k-1 with "fixed"; with
      "coin", k + k' is the number of candidates).
    num_held_out: k' >= 0, held-out canaries (ids k..k+k'-1 with "fixed").
    schedule: A `tff_canary.stats.canaries.schedules.Schedule`.
    assignment: "coin" (the default: each of the k + k' candidates is
      inserted by an independent fair coin from the seed) or "fixed" (the
      paper's: the ids above).
    record_aggregates: Whether the aggregation process reports each round's
      noised aggregate (measurement `noised_aggregate`); None (the default)
      as `resolve_record_aggregates` says.
    directions: "orthogonal" (the default: rows of one seeded orthogonal
      matrix, `tff_canary.federated.insertion.orthogonal_transform`, scored
      inside each round) or "gaussian" (the paper's: independent uniform
      directions, `tff_canary.federated.insertion.canary_directions`).
    inserted: bool [k + k'], canary id -> inserted (derived).
    participation: `schedules.Participation` of the inserted canaries
      (derived).
    held_out_participation: `schedules.Participation` of the held-out
      canaries, drawn from the same schedule on its own stream (derived when
      first asked for; never inserted: the reference of the schedule-aware
      statistic).
  """

  seed: int
  num_inserted: int
  num_held_out: int
  schedule: schedules.Schedule
  assignment: str = "coin"
  record_aggregates: bool | None = None
  directions: Directions = "orthogonal"
  # Derived from the fields above, so equality and hashing leave them out.
  inserted: np.ndarray = dataclasses.field(init=False, repr=False,
                                           compare=False)
  participation: schedules.Participation = dataclasses.field(
      init=False, repr=False, compare=False)

  def __post_init__(self):
    seed = schedules.as_seed(self.seed, "seed")
    num_inserted = validation.as_int(self.num_inserted, "num_inserted",
                                     minimum=0)
    num_held_out = validation.as_int(self.num_held_out, "num_held_out",
                                     minimum=0)
    if num_inserted + num_held_out > np.iinfo(np.int32).max:
      raise ValueError(f"num_inserted + num_held_out must fit in int32, got "
                       f"{num_inserted + num_held_out}.")
    if not isinstance(self.schedule, schedules.Schedule):
      raise TypeError(f"schedule must be a tff_canary.stats.canaries.schedules.Schedule "
                      f"(ShuffledEpochs, FixedPresentations, PerRoundSampling)"
                      f", got {self.schedule!r}.")
    assignment = validation.as_choice(self.assignment, "assignment",
                                      ASSIGNMENTS)
    directions = validation.as_choice(self.directions, "directions",
                                      DIRECTIONS)
    record_aggregates = resolve_record_aggregates(self.record_aggregates,
                                                  directions)
    total = num_inserted + num_held_out
    if assignment == "fixed":
      inserted = np.arange(total) < num_inserted
    else:
      rng = np.random.default_rng([seed, schedules.COIN_TAG])
      inserted = rng.integers(0, 2, size=total).astype(bool)
    inserted.setflags(write=False)
    participation = self.schedule.realize(seed, np.flatnonzero(inserted))
    self.__dict__.update(  # frozen: past the dataclass's __setattr__
        seed=seed, num_inserted=num_inserted, num_held_out=num_held_out,
        assignment=assignment, record_aggregates=record_aggregates,
        directions=directions, inserted=inserted, participation=participation)

  @functools.cached_property
  def held_out_participation(self) -> schedules.Participation:
    """The held-out canaries' schedules (class docstring); drawn when first
    asked for, since only orthogonal canaries use them."""
    return self.schedule.realize(self.seed, self.held_out_ids,
                                 tag=schedules.HELD_OUT_SCHEDULE_TAG)

  @property
  def num_canaries(self) -> int:
    """m = num_inserted + num_held_out, all canary ids."""
    return self.num_inserted + self.num_held_out

  @property
  def num_rounds(self) -> int:
    return self.schedule.num_rounds

  @property
  def inserted_ids(self) -> np.ndarray:
    return np.flatnonzero(self.inserted)

  @property
  def held_out_ids(self) -> np.ndarray:
    return np.flatnonzero(~self.inserted)

  def counts(self) -> np.ndarray:
    """Realized participation count of every canary id (0 if held out)."""
    return self.participation.counts(self.num_canaries)

  def scheduled_events(self) -> np.ndarray:
    """(round, canary id) events of every canary's schedule, int32 [n, 2].

    The inserted canaries' events and the held-out canaries' (never
    inserted), sorted by round then id.
    """
    events = np.concatenate([self.participation.events,
                             self.held_out_participation.events])
    order = np.lexsort((events[:, 1], events[:, 0]))
    return np.ascontiguousarray(events[order], np.int32)

  def schedule_matrix(self) -> np.ndarray:
    """Boolean [candidates, rounds]: True where a canary is scheduled
    (inserted or held out, `scheduled_events`), the schedule matrix of the
    DP-FTRL statistics (`tff_canary.stats.correlated.gls_statistics`)."""
    a = np.zeros((self.num_canaries, self.num_rounds), dtype=bool)
    events = self.scheduled_events()
    a[events[:, 1], events[:, 0]] = True
    return a

  def scheduled_counts(self) -> np.ndarray:
    """Rounds in every canary's schedule (inserted or held out), int64."""
    return (self.participation.counts(self.num_canaries)
            + self.held_out_participation.counts(self.num_canaries))


def check_orthogonality(num_canaries: int, dim: int) -> bool:
  """Warns (`TooManyCanariesWarning`) if m > dim / 100; returns whether it did.

  Why the threshold: docs/method/canaries.md ("How many").
  """
  num_canaries = validation.as_int(num_canaries, "num_canaries", minimum=0)
  dim = validation.as_dim(dim)
  if num_canaries * ORTHOGONALITY_RATIO > dim:
    warnings.warn(
        f"{num_canaries} canaries for a model of dim = {dim}: more than "
        f"dim / {ORTHOGONALITY_RATIO} = {dim / ORTHOGONALITY_RATIO:g}. Random "
        f"canaries have pairwise cosines ~ N(0, 1/dim); their cross-talk adds "
        f"a noise multiplier of about sqrt(k/dim) = "
        f"{np.sqrt(num_canaries / dim):.3g} to the statistics. Use fewer "
        "canaries or a larger model.", TooManyCanariesWarning,
        stacklevel=call_site.user_stacklevel())
    return True
  return False
