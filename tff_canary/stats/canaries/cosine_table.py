"""The cosine table of a run: one row per canary, saved as CSV or NPZ.

Columns (docs/method/null-law.md; Andrew et al., ICLR 2024, arXiv 2302.03098, Section 3):

  * `id`: canary id (its direction is regenerated from (seed, id), see
    `tff_canary.federated.insertion.canary_directions`).
  * `group`: "inserted" or "held_out".
  * `participation`: number of rounds the canary took part in (0 if held out).
  * `final_cosine`: x_j = cos(c_j, theta_0 - theta_T) (final-model statistic).
  * `max_cosine`: m_j = max over recorded rounds r of cos(c_j, a_r), a_r the
    round's noised aggregate (all-iterates statistic); NaN if no aggregate was
    recorded.
  * `max_round`: the round r (0-based) of that max; -1 if none.
  * `unrecorded`: how many of the canary's participations fall in rounds
    whose aggregate was not recorded (0 for held-out canaries; tables saved
    before this column existed load with 0). Any nonzero entry makes the
    all-iterates statistics unusable (`CosineTable.all_iterates_refusal`).
  * `scheduled_sum`, `scheduled_rounds` (orthogonal canaries, scored in the
    round, `tff_canary.federated.insertion.round_scores`): the sum of the
    canary's round cosines over the rounds of its schedule (held-out
    canaries have schedules too, never inserted) and how many rounds that
    is; NaN and 0 when not taken (gaussian canaries, older tables).

Metadata: `seed`, `dim`, `num_rounds` (the schedule's), `rounds_recorded`,
`assignment` ("fixed" or "coin"), `schedule` (its repr) and `generator` (the
canary generator's identifier), enough to regenerate every canary, and
`known_canaries_removed` ("all_iterates" when each canary's round cosines
were taken without the other inserted canaries, `known_canaries`; "none",
also for tables saved before it existed).

`CosineTable` is frozen (its arrays are read-only) and validated whenever it is
built, including on `load`. Files are written atomically (`atomic_files`).
"""

from __future__ import annotations

import dataclasses
import io
import json
import os
import typing
from typing import Any, Literal

import numpy as np

from tff_canary.stats import atomic_files
from tff_canary.stats import validation

Group = Literal["inserted", "held_out"]
GROUPS = typing.get_args(Group)
COLUMNS = ("id", "group", "participation", "final_cosine", "max_cosine",
           "max_round", "unrecorded", "scheduled_sum", "scheduled_rounds")
# Columns a saved table may lack (older files): filled with their defaults.
OPTIONAL_COLUMNS = ("unrecorded", "scheduled_sum", "scheduled_rounds")
_INT_COLUMNS = ("id", "participation", "max_round", "unrecorded",
                "scheduled_rounds")
_FLOAT_COLUMNS = ("final_cosine", "max_cosine", "scheduled_sum")
METADATA = ("seed", "dim", "num_rounds", "rounds_recorded", "assignment",
            "schedule", "generator", "known_canaries_removed")
# Which statistic had the other inserted canaries removed from each canary's
# aggregates (`tff_canary.stats.estimators.known_canaries`): none, or the all-iterates one.
KnownCanariesRemoved = Literal["none", "all_iterates",
                               "final_and_all_iterates"]
KNOWN_CANARIES_REMOVED = typing.get_args(KnownCanariesRemoved)
_FORMAT = "tff-canary cosine table v1"
# The generator of orthogonal canaries starts so (`orthogonal_transform`).
ORTHOGONAL_GENERATOR_PREFIX = "randomized-hadamard/"


class UnrecordedRoundsWarning(UserWarning):
  """Inserted canaries took part in rounds whose aggregate was not recorded."""


def _readonly(array: np.ndarray) -> np.ndarray:
  array = np.array(array, copy=True)
  array.setflags(write=False)
  return array


@dataclasses.dataclass(frozen=True, eq=False)
class CosineTable:
  """One row per canary; see the module docstring for the columns."""

  id: np.ndarray
  group: np.ndarray
  participation: np.ndarray
  final_cosine: np.ndarray
  max_cosine: np.ndarray
  max_round: np.ndarray
  seed: int
  dim: int
  num_rounds: int
  rounds_recorded: int
  assignment: str = "fixed"
  schedule: str = ""
  generator: str = ""
  unrecorded: Any = None
  known_canaries_removed: KnownCanariesRemoved = "none"
  scheduled_sum: Any = None
  scheduled_rounds: Any = None

  def __post_init__(self):
    seed = validation.as_int(self.seed, "seed", minimum=0)
    dim = validation.as_dim(self.dim)
    num_rounds = validation.as_int(self.num_rounds, "num_rounds", minimum=1)
    rounds_recorded = validation.as_int(self.rounds_recorded,
                                        "rounds_recorded", minimum=0)
    for name in ("assignment", "schedule", "generator"):
      if not isinstance(getattr(self, name), str):
        raise TypeError(f"{name} must be a str, got "
                        f"{validation.show(getattr(self, name))}.")
    validation.as_choice(self.known_canaries_removed,
                         "known_canaries_removed", KNOWN_CANARIES_REMOVED)
    shape = np.asarray(self.id).shape
    for name, fill in (("unrecorded", 0), ("scheduled_sum", np.nan),
                       ("scheduled_rounds", 0)):
      if getattr(self, name) is None:
        object.__setattr__(self, name, np.full(
            shape, fill, np.float64 if name == "scheduled_sum" else np.int64))
    columns = {}
    for name in COLUMNS:
      try:
        column = np.asarray(getattr(self, name))
      except Exception as e:  # pylint: disable=broad-except
        raise TypeError(f"column {name} is not an array: {e}") from None
      if column.ndim != 1:
        raise ValueError(f"column {name} must be 1-D, got shape "
                         f"{column.shape}.")
      columns[name] = column
    size = columns["id"].size
    if size == 0:
      raise ValueError("a cosine table needs at least one canary (row).")
    for name, column in columns.items():
      if column.size != size:
        raise ValueError(f"column {name} has {column.size} rows; column id "
                         f"has {size}.")
    for name in _INT_COLUMNS:
      column = columns[name]
      if column.dtype.kind == "f" and np.all(np.isfinite(column)) and np.all(
          column == np.round(column)):
        column = column.astype(np.int64)
      if column.dtype.kind not in "iu":
        raise TypeError(f"column {name} must hold integers, got dtype "
                        f"{column.dtype}.")
      columns[name] = column.astype(np.int64)
    ids = columns["id"]
    if ids.min() < 0 or np.unique(ids).size != size:
      raise ValueError("column id must hold distinct nonnegative integers.")
    group = columns["group"].astype(str)
    bad = ~np.isin(group, GROUPS)
    if bad.any():
      i = int(np.flatnonzero(bad)[0])
      raise ValueError(f"column group must hold {GROUPS}, but row {i} has "
                       f"{validation.show(group[i])}.")
    columns["group"] = group.astype("<U8")
    if columns["participation"].min() < 0:
      raise ValueError("column participation must be nonnegative.")
    bad = (group == "held_out") & (columns["participation"] != 0)
    if bad.any():
      i = int(np.flatnonzero(bad)[0])
      raise ValueError(f"held-out canary id {ids[i]} has participation "
                       f"{columns['participation'][i]}; held-out canaries "
                       "never take part.")
    unrecorded = columns["unrecorded"]
    bad = (unrecorded < 0) | (unrecorded > columns["participation"])
    if bad.any():
      i = int(np.flatnonzero(bad)[0])
      raise ValueError(f"column unrecorded must lie in [0, participation], "
                       f"but canary id {ids[i]} has unrecorded "
                       f"{unrecorded[i]} and participation "
                       f"{columns['participation'][i]}.")
    if columns["scheduled_rounds"].min() < 0:
      raise ValueError("column scheduled_rounds must be nonnegative.")
    for name in _FLOAT_COLUMNS:
      column = columns[name]
      if column.dtype.kind not in "fiu":
        raise TypeError(f"column {name} must hold real numbers, got dtype "
                        f"{column.dtype}.")
      columns[name] = column.astype(np.float64)
    validation.as_cosines(columns["final_cosine"], "column final_cosine",
                          min_size=1)
    max_cos, max_round = columns["max_cosine"], columns["max_round"]
    missing = np.isnan(max_cos)
    if np.any(missing != (max_round == -1)):
      raise ValueError("column max_cosine is NaN exactly where max_round is "
                       "-1 (no recorded round); the two columns disagree.")
    if np.any(max_round < -1):
      raise ValueError("column max_round must be >= -1.")
    if not missing.all():
      validation.as_cosines(max_cos[~missing], "column max_cosine",
                            min_size=1)
    if rounds_recorded == 0 and not missing.all():
      raise ValueError("rounds_recorded = 0 but column max_cosine has values.")
    self.__dict__.update(  # frozen: past the dataclass's __setattr__
        {name: _readonly(column) for name, column in columns.items()},
        seed=seed, dim=dim, num_rounds=num_rounds,
        rounds_recorded=rounds_recorded)

  # ------------------------------------------------------------- accessors

  def __len__(self) -> int:
    return int(self.id.size)

  @property
  def metadata(self) -> dict[str, Any]:
    return {name: getattr(self, name) for name in METADATA}

  def mask(self, group: Group) -> np.ndarray:
    """Boolean row mask of `group` ("inserted" or "held_out")."""
    group = validation.as_choice(group, "group", GROUPS)
    return self.group == group

  def ids(self, group: Group) -> np.ndarray:
    return self.id[self.mask(group)]

  def final_cosines(self, group: Group) -> np.ndarray:
    """The final-model cosines x_j of `group`, float64."""
    return self.final_cosine[self.mask(group)]

  @property
  def has_max_cosines(self) -> bool:
    """True when every canary has a usable all-iterates statistic: aggregates
    were recorded, and in every round an inserted canary took part."""
    return self.all_iterates_refusal is None

  @property
  def all_iterates_refusal(self) -> str | None:
    """Why the all-iterates statistics cannot be used, or None if they can."""
    if self.rounds_recorded == 0 or np.isnan(self.max_cosine).any():
      return ("this table has no all-iterates cosines (no noised aggregates "
              "were recorded).")
    missed = self.unrecorded > 0
    if missed.any():
      return (f"{int(self.unrecorded.sum())} participations of "
              f"{int(missed.sum())} inserted canaries (e.g. canary id "
              f"{int(self.id[missed][0])}) fall in rounds whose noised "
              f"aggregate was not recorded ({self.rounds_recorded} rounds "
              f"recorded, the schedule has {self.num_rounds}): their max "
              "cosines miss those rounds and would make them look held out, "
              "so epsilon_all and the all-iterates bounds are refused. Record "
              "the aggregate of every round.")
    return None

  def max_cosines(self, group: Group) -> np.ndarray:
    """The all-iterates statistics m_j of `group`.

    Raises:
      ValueError: when no aggregates were recorded, or an inserted canary
        took part in a round that was not recorded (`all_iterates_refusal`).
    """
    refusal = self.all_iterates_refusal
    if refusal is not None:
      raise ValueError(refusal)
    return self.max_cosine[self.mask(group)]

  def participations(self, group: Group) -> np.ndarray:
    return self.participation[self.mask(group)]

  @property
  def orthogonal(self) -> bool:
    """Whether the canaries are orthogonal (independent noise scores)."""
    return self.generator.startswith(ORTHOGONAL_GENERATOR_PREFIX)

  @property
  def has_scheduled_sums(self) -> bool:
    """True when every canary has a schedule-aware statistic."""
    return bool(np.all(np.isfinite(self.scheduled_sum))
                and np.all(self.scheduled_rounds > 0))

  def scheduled_statistics(self, group: Group) -> np.ndarray:
    """T_j = sqrt(dim / P_j) * scheduled_sum_j of `group` (P_j its rounds),
    about N(0, 1) under the null (docs/method/orthogonal-canaries.md).

    Raises:
      ValueError: when the table has no schedule-aware sums.
    """
    if not self.has_scheduled_sums:
      raise ValueError("this table has no schedule-aware sums (they are "
                       "taken in the round for orthogonal canaries only).")
    mask = self.mask(group)
    return (np.sqrt(self.dim / self.scheduled_rounds[mask])
            * self.scheduled_sum[mask])

  def __eq__(self, other):
    if not isinstance(other, CosineTable):
      return NotImplemented
    return self.metadata == other.metadata and all(
        np.array_equal(getattr(self, c), getattr(other, c),
                       equal_nan=c in _FLOAT_COLUMNS) for c in COLUMNS)

  __hash__ = None

  def __repr__(self):
    counts = {g: int(self.mask(g).sum()) for g in GROUPS}
    return (f"CosineTable({counts['inserted']} inserted, "
            f"{counts['held_out']} held out, seed={self.seed}, "
            f"dim={self.dim}, num_rounds={self.num_rounds}, "
            f"rounds_recorded={self.rounds_recorded})")

  # ------------------------------------------------------------- saving

  def save_csv(self, path: str | os.PathLike) -> None:
    """Writes the table as CSV with '# key: value' metadata lines, atomically.

    Floats are written as Python's shortest repr of the float64 (what NumPy
    1 wrote too; NumPy 2's scalar repr is `np.float64(...)`), so loading
    gives the same float64 values bitwise.
    """
    buffer = io.StringIO()
    buffer.write(f"# {_FORMAT}\n")
    for name in METADATA:
      buffer.write(f"# {name}: {json.dumps(getattr(self, name))}\n")
    buffer.write(",".join(COLUMNS) + "\n")
    for row in zip(*(getattr(self, name) for name in COLUMNS)):
      buffer.write(",".join(repr(float(v)) if name in _FLOAT_COLUMNS else str(v)
                            for name, v in zip(COLUMNS, row)) + "\n")
    atomic_files.write_bytes(path, buffer.getvalue().encode("utf-8"))

  def save_npz(self, path: str | os.PathLike) -> None:
    """Writes the table as NPZ (columns and a JSON `metadata`), atomically."""
    metadata = dict(self.metadata, format=_FORMAT)
    atomic_files.save_npz(path, metadata=np.array(json.dumps(metadata)),
                          **{name: getattr(self, name) for name in COLUMNS})

  def save(self, path: str | os.PathLike) -> None:
    """`save_csv` or `save_npz`, by the extension (.csv or .npz)."""
    suffix = os.path.splitext(os.fspath(path))[1].lower()
    if suffix not in (".csv", ".npz"):
      raise ValueError(f"path must end in .csv or .npz, got {path!r}.")
    (self.save_csv if suffix == ".csv" else self.save_npz)(path)

  @classmethod
  def load(cls, path: str | os.PathLike, dim: int | None = None
          ) -> CosineTable:
    """Loads and validates a table saved by `save_csv` or `save_npz` (format
    sniffed); with `dim`, the model dimension it must have.

    Raises:
      FileNotFoundError: if there is no such file.
      ValueError: for a corrupt file, missing columns or metadata, invalid
        values, or a dim other than `dim`.
    """
    path = os.fspath(path)
    with open(path, "rb") as f:
      head = f.read(4)
    try:  # an NPZ is a zip file
      table = (cls._load_npz if head.startswith(b"PK") else cls._load_csv)(path)
    except (ValueError, TypeError, KeyError) as e:
      raise ValueError(f"{path} is not a valid cosine table: {e}") from None
    if dim is not None:
      dim = validation.as_dim(dim)
      if table.dim != dim:
        raise ValueError(f"{path} is a table for dim = {table.dim}, not dim = "
                         f"{dim}.")
    return table

  @classmethod
  def _load_npz(cls, path: str) -> CosineTable:
    import zipfile  # pylint: disable=g-import-not-at-top
    try:
      with np.load(path, allow_pickle=False) as data:
        columns = {name: data[name] for name in COLUMNS if name in data}
        metadata = (json.loads(str(data["metadata"])) if "metadata" in data
                    else {})
    except (zipfile.BadZipFile, OSError, EOFError) as e:
      raise ValueError(f"corrupt NPZ file ({e})") from None
    return cls._from_parts(columns, metadata)

  @classmethod
  def _load_csv(cls, path: str) -> CosineTable:
    try:
      with open(path, encoding="utf-8") as f:
        lines = f.read().splitlines()
    except UnicodeDecodeError as e:
      raise ValueError(f"not a text file ({e})") from None
    metadata = {}
    body = []
    for line in lines:
      if line.startswith("#"):
        text = line[1:].strip()
        if text == _FORMAT or ":" not in text:
          continue
        key, value = text.split(":", 1)
        try:
          metadata[key.strip()] = json.loads(value)
        except json.JSONDecodeError:
          raise ValueError(f"bad metadata line {line!r}") from None
      elif line.strip():
        body.append(line)
    if not body:
      raise ValueError("no header line")
    header = [h.strip() for h in body[0].split(",")]
    rows = [line.split(",") for line in body[1:]]
    for i, row in enumerate(rows):
      if len(row) != len(header):
        raise ValueError(f"data row {i} has {len(row)} fields, the header "
                         f"{len(header)}")
    cells = {name: [row[header.index(name)].strip() for row in rows]
             for name in COLUMNS if name in header}
    try:
      columns = {name: np.array(cells[name], "<U8") if name == "group" else
                 np.array([int(v) if name in _INT_COLUMNS else _float_cell(v)
                           for v in cells[name]])
                 for name in COLUMNS if name in cells}
    except ValueError as e:
      raise ValueError(f"bad value ({e})") from None
    return cls._from_parts(columns, metadata)

  @classmethod
  def _from_parts(cls, columns: dict[str, np.ndarray],
                  metadata: dict[str, Any]) -> CosineTable:
    missing = [c for c in COLUMNS
               if c not in columns and c not in OPTIONAL_COLUMNS]
    if missing:
      raise ValueError(f"missing columns {missing}")
    missing = [m for m in ("seed", "dim", "num_rounds", "rounds_recorded")
               if m not in metadata]
    if missing:
      raise ValueError(f"missing metadata {missing}")
    kwargs = {name: metadata[name] for name in METADATA if name in metadata}
    return cls(**columns, **kwargs)


_NUMPY2_REPR = "np.float64("


def _float_cell(text: str) -> float:
  """A float cell; also `np.float64(x)`, which save_csv wrote under NumPy 2
  before it wrote `repr(float(v))`, so those files load too."""
  if text.startswith(_NUMPY2_REPR) and text.endswith(")"):
    text = text[len(_NUMPY2_REPR):-1]
  return float(text)


def of_canaries(canaries: Any, **columns: Any) -> CosineTable:
  """The table of a run's `CanaryConfig` (`canaries`): its ids, groups,
  participation counts, seed, schedule and assignment, and `columns` (the
  cosines, `dim`, `generator`, ...)."""
  return CosineTable(
      id=np.arange(canaries.num_canaries),
      group=np.where(canaries.inserted, "inserted", "held_out"),
      participation=canaries.counts(), seed=canaries.seed,
      num_rounds=canaries.num_rounds, assignment=canaries.assignment,
      schedule=repr(canaries.schedule), **columns)
