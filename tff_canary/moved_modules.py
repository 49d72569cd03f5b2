"""Old import paths of moved modules, kept working for one release.

A module that moved keeps its old dotted path for one release: importing the
old path (`import tff_canary.stats.canary_config`,
`from tff_canary.stats import canary_config`) emits a `DeprecationWarning`
naming the new path and gives THE SAME module object as the new path (one
module, so `isinstance` checks and module state are shared). The hook is a
`sys.meta_path` finder (PEP 451) that `tff_canary/__init__.py` installs; it
imports a new module only when its old path is imported, so `import
tff_canary` stays free of TensorFlow.

An old path never shadows a module that exists: if the regular import system
finds a module or package under an old path, that module wins
(`tests/test_moved_modules.py` also checks that no old path is a live module).
An old package (`tff_canary.stats.tree`) maps its submodules too:
`from tff_canary.stats.tree import tree_noise` and
`import tff_canary.stats.tree.tree_noise` give the new package's modules.

`docs/changelog.md` lists the table: its tables between the `moved-modules`
markers are this module's `changelog_table()` of each group; print them with

  python -c "import tff_canary.moved_modules as m; print(m.changelog_blocks())"
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import sys
from typing import Optional, Sequence
import warnings


def _into(parent: str, folder: str, names: str) -> dict[str, str]:
  """{parent.name: parent.folder.name} for each of the space-separated names."""
  return {f"{parent}.{name}": f"{parent}.{folder}.{name}"
          for name in names.split()}


# Old dotted path -> new dotted path, grouped by the change that moved them
# (a release, or the commit of a layout that came with no release note).
MOVED_IN: dict[str, dict[str, str]] = {
    # Commit 842ba1e ("Layout by concept"), during 0.1.0, without a note.
    # Not here: tff_canary.stats.audit (now the package of the same name,
    # which forwards the old module's names itself) and the five modules
    # that 7f82da6 deleted (federated.canary_cache, cosine_chunks,
    # cosine_stream, known_canary_removal, stream_worker).
    "842ba1e": {
        **_into("tff_canary.federated", "audit",
                "noise_check planted_bug_runs planted_bugs"),
        **_into("tff_canary.federated", "insertion",
                "canary_client_outcomes canary_clients canary_directions "
                "canary_process client_round_state ddp_chain factory "
                "seeded_query state_check"),
        **_into("tff_canary.federated", "runtime", "multi_worker worker_guard"),
        **_into("tff_canary.federated", "scores",
                "aggregate_recorder cosine_pass row_reader"),
        **_into("tff_canary.federated", "structures",
                "flat_layout tree_search"),
        **_into("tff_canary.stats", "accounting",
                "adaptive_split ddp_accounting ddp_parameters dp_event_data "
                "effective_noise gaussian_accounting ledger "
                "poisson_accounting"),
        **_into("tff_canary.stats", "audit", "table_estimates"),
        **_into("tff_canary.stats", "bounds",
                "fdp_one_run gdp_bound lower_bounds threshold_strategies "
                "tight_one_run"),
        **_into("tff_canary.stats", "canaries",
                "canary_config client_sampling cosine_table schedules"),
        **_into("tff_canary.stats", "estimators",
                "estimates known_canaries max_of_rounds null_law "
                "two_gaussians"),
        **_into("tff_canary.stats", "noise", "noise_stats noise_tests"),
        **_into("tff_canary.stats", "simulation",
                "discrete_noise gaussian_mechanism pipeline_simulator "
                "round_simulation"),
    },
    # This release: the harness in config / mechanisms / running / recording
    # / reporting, the planted-bug runs with the mechanisms (their bugs are
    # the mechanisms'), and the correlated-noise statistics (stats/tree) in
    # stats/correlated, whose GLS statistics hold for any known linear map of
    # node noises (tree_statistics -> gls_statistics).
    "0.2.0": {
        **_into("tff_canary.harness", "config",
                "experiment_config preflight model_sizes"),
        **_into("tff_canary.harness", "mechanisms",
                "canary_claim analytical_epsilons ddp_claim"),
        **_into("tff_canary.harness", "running",
                "experiment training tasks datasets synthetic dp_fedavg "
                "client_insertion resume round_metrics run_writer "
                "release_manager loop_settings run_results"),
        **_into("tff_canary.harness", "recording", "run_dir"),
        **_into("tff_canary.harness", "reporting",
                "report tree_report headline plots epsilon_plot "
                "insertion_notes"),
        "tff_canary.federated.audit.planted_bug_runs":
            "tff_canary.harness.running.planted_bug_runs",
        "tff_canary.federated.audit.planted_tree_bug_runs":
            "tff_canary.harness.running.tree_planted",
        "tff_canary.federated.insertion.seeded_tree_query":
            "tff_canary.federated.insertion.seeded_query",
        "tff_canary.stats.tree": "tff_canary.stats.correlated",
        # Named for what they hold, not like a test file or DP-FTRL's tree.
        "tff_canary.federated.audit.self_test":
            "tff_canary.federated.audit.canary_noise_check",
        "tff_canary.federated.structures.tree_search":
            "tff_canary.federated.structures.nested_search",
        **{f"tff_canary.stats.tree.{name}":
               f"tff_canary.stats.correlated.{name}"
           for name in ("tree_accounting", "tree_audit", "tree_noise",
                        "tree_simulation", "tree_targets")},
        **{f"tff_canary.stats.{old}.tree_statistics":
               "tff_canary.stats.correlated.gls_statistics"
           for old in ("tree", "correlated")},
        # Split: the Gaussian queries are mechanisms.gaussian.planted_bugs
        # (the old path's ClipBugQuery and NoiseReuseQuery still resolve).
        "tff_canary.federated.audit.planted_bugs":
            "tff_canary.mechanisms.ddp.planted_bugs",
        # The harness by job: data and tasks, training, writing a run.
        "tff_canary.harness.running.datasets":
            "tff_canary.harness.data.datasets",
        "tff_canary.harness.running.synthetic":
            "tff_canary.harness.data.synthetic",
        "tff_canary.harness.running.tasks":
            "tff_canary.harness.data.tasks",
        "tff_canary.harness.running.experiment":
            "tff_canary.harness.runner.experiment",
        "tff_canary.harness.running.training":
            "tff_canary.harness.runner.training",
        "tff_canary.harness.running.resume":
            "tff_canary.harness.runner.resume",
        "tff_canary.harness.running.dp_fedavg":
            "tff_canary.harness.runner.dp_fedavg",
        "tff_canary.harness.running.client_insertion":
            "tff_canary.harness.runner.client_insertion",
        "tff_canary.harness.running.planted_bug_runs":
            "tff_canary.harness.runner.planted_bug_runs",
        "tff_canary.harness.running.round_metrics":
            "tff_canary.harness.writing.round_metrics",
        "tff_canary.harness.running.run_writer":
            "tff_canary.harness.writing.run_writer",
        "tff_canary.harness.running.release_manager":
            "tff_canary.harness.writing.release_manager",
        "tff_canary.harness.running.run_results":
            "tff_canary.harness.writing.run_results",
        "tff_canary.harness.running.loop_settings":
            "tff_canary.harness.writing.loop_settings",
        # One package per mechanism (tff_canary.mechanisms): its NumPy and
        # TFF halves, aggregation or query, noise check and planted bugs;
        # the cosine and correlated families beside them.
        "tff_canary.harness.mechanisms.protocol":
            "tff_canary.mechanisms.protocol",
        "tff_canary.harness.mechanisms.registry":
            "tff_canary.mechanisms.registry",
        "tff_canary.harness.mechanisms.records":
            "tff_canary.mechanisms.records",
        "tff_canary.harness.mechanisms.section":
            "tff_canary.mechanisms.section",
        "tff_canary.harness.mechanisms.canary_claim":
            "tff_canary.mechanisms.canary_claim",
        "tff_canary.harness.mechanisms.analytical_epsilons":
            "tff_canary.mechanisms.analytical_epsilons",
        "tff_canary.harness.mechanisms.gaussian":
            "tff_canary.mechanisms.gaussian.spec",
        "tff_canary.harness.mechanisms.ddp":
            "tff_canary.mechanisms.ddp.spec",
        "tff_canary.harness.mechanisms.ddp_claim":
            "tff_canary.mechanisms.ddp.claim",
        "tff_canary.harness.mechanisms.tree":
            "tff_canary.mechanisms.tree.spec",
        "tff_canary.harness.mechanisms.matrix":
            "tff_canary.mechanisms.matrix.spec",
        "tff_canary.harness.mechanisms.banded":
            "tff_canary.mechanisms.banded.spec",
        "tff_canary.harness.mechanisms.blt":
            "tff_canary.mechanisms.blt.spec",
        "tff_canary.harness.reporting.cosine_report":
            "tff_canary.mechanisms.cosine.report",
        "tff_canary.harness.reporting.plots":
            "tff_canary.mechanisms.cosine.plots",
        "tff_canary.harness.reporting.epsilon_plot":
            "tff_canary.mechanisms.epsilon_plot",
        "tff_canary.harness.reporting.tree_report":
            "tff_canary.mechanisms.correlated.report",
        "tff_canary.harness.running.mechanism_tff":
            "tff_canary.mechanisms.protocol_tff",
        "tff_canary.harness.running.gaussian_tff":
            "tff_canary.mechanisms.gaussian.tff",
        "tff_canary.harness.running.ddp_tff":
            "tff_canary.mechanisms.ddp.tff",
        "tff_canary.harness.running.tree_tff":
            "tff_canary.mechanisms.tree.tff",
        "tff_canary.harness.running.matrix_tff":
            "tff_canary.mechanisms.matrix.tff",
        "tff_canary.harness.running.gaussian_planted":
            "tff_canary.mechanisms.gaussian.planted",
        "tff_canary.harness.running.ddp_planted":
            "tff_canary.mechanisms.ddp.planted",
        "tff_canary.harness.running.tree_planted":
            "tff_canary.mechanisms.tree.planted",
        "tff_canary.harness.running.matrix_planted":
            "tff_canary.mechanisms.matrix.planted",
        "tff_canary.harness.running.planted_model":
            "tff_canary.mechanisms.planted_model",
        "tff_canary.federated.audit.ddp_noise_check":
            "tff_canary.mechanisms.ddp.noise_check",
        "tff_canary.federated.audit.planted_tree_bugs":
            "tff_canary.mechanisms.tree.planted_bugs",
        "tff_canary.federated.audit.planted_matrix_bugs":
            "tff_canary.mechanisms.matrix.planted_bugs",
        "tff_canary.federated.insertion.matrix_factory":
            "tff_canary.mechanisms.matrix.aggregation",
        "tff_canary.federated.insertion.matrix_query":
            "tff_canary.mechanisms.matrix.query",
        "tff_canary.federated.insertion.ddp_chain":
            "tff_canary.mechanisms.ddp.chain",
        # DP-FTRL's tree is its package's ('tree' names only the tree): its
        # query and constructors; the check of correlated noise (tree,
        # banded, BLT) is the correlated family's, and the canary
        # aggregator's own self-test, which picks it, a mechanisms module.
        "tff_canary.federated.insertion.tree_factory":
            "tff_canary.mechanisms.tree.aggregation",
        "tff_canary.federated.audit.tree_noise_check":
            "tff_canary.mechanisms.correlated.noise_check",
        "tff_canary.federated.audit.canary_noise_check":
            "tff_canary.mechanisms.canary_noise_check",
    },
}



def _current(path: str, moves: dict[str, str]) -> str:
  """Where `path` lives now, following a module moved again later."""
  seen = {path}
  while path in moves:
    path = moves[path]
    if path in seen:
      raise ValueError(f"moved_modules: {path} moves in a cycle.")
    seen.add(path)
  return path


_ALL_MOVES = {old: new for moves in MOVED_IN.values()
              for old, new in moves.items()}
# The one table the hook reads: old dotted path -> its current dotted path.
MOVED_MODULES: dict[str, str] = {
    old: _current(new, _ALL_MOVES) for old, new in _ALL_MOVES.items()}


def new_path(old: str) -> Optional[str]:
  """The new dotted path of module `old`, or None if it did not move.

  A submodule of a moved package moves with it, listed or not (so that no
  second copy of a module is made under the old package's name).
  """
  if old in MOVED_MODULES:
    return MOVED_MODULES[old]
  parent, _, child = old.rpartition(".")
  new_parent = new_path(parent) if parent else None
  return f"{new_parent}.{child}" if new_parent else None


def deprecation_message(old: str, new: str) -> str:
  return (f"{old} moved to {new}; the old path will be removed in the next "
          "release")


class _AliasLoader(importlib.abc.Loader):
  """Loads an old path as the module of its new path (one object, two names)."""

  def __init__(self, new: str):
    self._new = new

  def create_module(self, spec):
    return None  # A placeholder, replaced in sys.modules by exec_module.

  def exec_module(self, module):
    old = module.__spec__.name
    # stacklevel=2 names the frame above this one that is not the import
    # system's own (warnings skips importlib._bootstrap frames): the user's
    # import line.
    warnings.warn(deprecation_message(old, self._new), DeprecationWarning,
                  stacklevel=2)
    # The import system returns whatever sys.modules holds for the name once
    # exec_module is done (importlib._bootstrap._load_unlocked), so the old
    # name binds the new module itself, and its __spec__ stays its own.
    sys.modules[old] = importlib.import_module(self._new)


class MovedModuleFinder(importlib.abc.MetaPathFinder):
  """Finds the old paths of MOVED_MODULES (first on sys.meta_path)."""

  finds_moved_modules = True

  def find_spec(self, fullname: str, path: Optional[Sequence[str]],
                target=None):
    if not fullname.startswith("tff_canary."):
      return None
    new = new_path(fullname)
    if new is None:
      return None
    # A real module under the old path wins over the table. (Under an old
    # package that is an alias, `path` is the new package's: nothing real.)
    parent = sys.modules.get(fullname.rpartition(".")[0])
    parent_is_real = getattr(parent, "__name__", None) == fullname.rpartition(
        ".")[0]
    if parent_is_real and importlib.machinery.PathFinder.find_spec(
        fullname, path) is not None:
      return None
    return importlib.util.spec_from_loader(fullname, _AliasLoader(new))


def install() -> None:
  """Puts MovedModuleFinder first on sys.meta_path (once)."""
  if not any(getattr(finder, "finds_moved_modules", False)
             for finder in sys.meta_path):
    sys.meta_path.insert(0, MovedModuleFinder())


def changelog_table(release: str) -> str:
  """The markdown table of the modules moved by `release` (old -> new)."""
  if release not in MOVED_IN:
    raise ValueError(f"release must be one of {list(MOVED_IN)}, got "
                     f"{release!r}.")
  rows = ["| old path | new path |", "| --- | --- |"]
  rows += [f"| `{old}` | `{MOVED_MODULES[old]}` |"
           for old in sorted(MOVED_IN[release])]
  return "\n".join(rows)


def changelog_blocks() -> str:
  """Every release's table between its markers, as docs/changelog.md has it."""
  return "\n\n".join(f"<!-- moved-modules:begin {release} -->\n"
                     f"{changelog_table(release)}\n"
                     f"<!-- moved-modules:end {release} -->"
                     for release in MOVED_IN)
