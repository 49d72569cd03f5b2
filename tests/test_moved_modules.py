"""Old import paths of moved modules keep working for one release.

Each import test runs in a fresh interpreter (the hook's effect is on
sys.modules, which this process shares with other tests) and imports only
statistics modules, so no TensorFlow is loaded.
"""

import json
import pathlib
import re
import subprocess
import sys
import textwrap

import pytest

from project.test_layers import imported_modules
from tff_canary import moved_modules

REPO = pathlib.Path(__file__).resolve().parent.parent
CHANGELOG = REPO / "docs" / "changelog.md"
# The previous layout's moves in the statistics layer: TF-free to import.
STATS_MOVES = {old: new
               for old, new in moved_modules.MOVED_IN["842ba1e"].items()
               if old.startswith("tff_canary.stats.")}


def run(code: str) -> dict:
  """Runs `code` in a fresh interpreter; returns the JSON it prints last."""
  proc = subprocess.run([sys.executable, "-c", textwrap.dedent(code)],
                        capture_output=True, text=True, timeout=120,
                        cwd=REPO)
  assert proc.returncode == 0, proc.stderr[-3000:]
  return json.loads(proc.stdout.splitlines()[-1])


def module_file(dotted: str) -> pathlib.Path | None:
  """The file of module or package `dotted` in this checkout, or None."""
  path = REPO.joinpath(*dotted.split("."))
  for candidate in (path.with_suffix(".py"), path / "__init__.py"):
    if candidate.is_file():
      return candidate
  return None


def test_old_paths_give_the_new_module_with_a_warning():
  # Every moved statistics module, in both import forms; each warning is
  # attributed to the importing line (here "<string>"), not to the hook.
  result = run(f"""
      import importlib, json, sys, warnings
      moves = {STATS_MOVES!r}
      out = {{}}
      for old, new in moves.items():
        parent, _, name = old.rpartition(".")
        with warnings.catch_warnings(record=True) as caught:
          warnings.simplefilter("always")
          exec(f"import {{old}} as by_import")
          exec(f"from {{parent}} import {{name}} as by_from")
        out[old] = dict(
            same=by_import is by_from is importlib.import_module(new),
            name=by_import.__name__, spec=by_import.__spec__.name,
            in_sys=sys.modules[old] is sys.modules[new],
            warnings=[(w.category.__name__, str(w.message), w.filename)
                      for w in caught])
      print(json.dumps(out))
      """)
  assert set(result) == set(STATS_MOVES)
  for old, new in STATS_MOVES.items():
    got = result[old]
    assert got["same"] and got["in_sys"], old
    assert got["name"] == got["spec"] == new, old
    # The first import warns; the second finds the module already imported.
    assert got["warnings"][0] == [
        "DeprecationWarning", f"{old} moved to {new}; the old path will be "
        "removed in the next release", "<string>"], (old, got["warnings"])


def test_user_code_sees_the_warning_by_default():
  # Python shows DeprecationWarning by default only when it is attributed to
  # __main__: the warning must point at the user's line, not at the hook.
  # Line 3 takes a name out of an old module (`from OLD import name`).
  code = ("import tff_canary.stats.canary_config\n"
          "from tff_canary.stats import ledger\n"
          "from tff_canary.stats.cosine_table import CosineTable\n"
          "from tff_canary.stats.canaries import cosine_table\n"
          "print(CosineTable is cosine_table.CosineTable)\n")
  proc = subprocess.run([sys.executable, "-c", code], capture_output=True,
                        text=True, timeout=120, cwd=REPO)
  assert proc.returncode == 0, proc.stderr[-3000:]
  assert proc.stdout.split() == ["True"]
  for line, old, new in [
      (1, "stats.canary_config", "stats.canaries.canary_config"),
      (2, "stats.ledger", "stats.accounting.ledger"),
      (3, "stats.cosine_table", "stats.canaries.cosine_table")]:
    assert (f"<string>:{line}: DeprecationWarning: tff_canary.{old} moved to "
            f"tff_canary.{new}; the old path will be removed in the next "
            "release") in proc.stderr, (line, proc.stderr)


def test_old_package_maps_its_submodules():
  # A moved package (this release's stats.tree -> stats.correlated), tried on
  # a package that exists on every branch: both import forms give the new
  # package's modules, and no second copy of a module is made under the old
  # package's name.
  result = run("""
      import json, sys, warnings
      from tff_canary import moved_modules
      moved_modules.MOVED_MODULES["tff_canary.stats.old_canaries"] = (
          "tff_canary.stats.canaries")
      with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        import tff_canary.stats.old_canaries.cosine_table as by_import
        from tff_canary.stats.old_canaries import schedules as by_from
      from tff_canary.stats.canaries import cosine_table, schedules
      import tff_canary.stats.old_canaries as old_package
      import tff_canary.stats.canaries as new_package
      copies = [name for name, module in sys.modules.items()
                if getattr(module, "__file__", None) == cosine_table.__file__]
      print(json.dumps(dict(
          package=old_package is new_package,
          cosine_table=by_import is cosine_table,
          schedules=by_from is schedules,
          copies=sorted(set(copies)),
          distinct=len({id(sys.modules[n]) for n in copies}),
          warned=sorted(str(w.message).split()[0] for w in caught))))
      """)
  assert result["package"] and result["cosine_table"] and result["schedules"]
  assert result["distinct"] == 1, result["copies"]
  assert result["warned"] == ["tff_canary.stats.old_canaries",
                              "tff_canary.stats.old_canaries.cosine_table"]


def test_a_real_module_wins_over_the_table():
  # An entry whose old path is still a module (a move half done) must not
  # shadow it: the real module is imported, without a warning.
  result = run("""
      import json, warnings
      from tff_canary import moved_modules
      moved_modules.MOVED_MODULES["tff_canary.stats.validation"] = (
          "tff_canary.stats.canaries.schedules")
      with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        from tff_canary.stats import validation
      print(json.dumps(dict(name=validation.__name__, warnings=len(caught))))
      """)
  assert result == {"name": "tff_canary.stats.validation", "warnings": 0}


def test_the_old_audit_module_names_resolve_on_its_package():
  # tff_canary.stats.audit was a module and is now the package of that name
  # (no table entry can alias it): the package forwards the old module's
  # names to its module `audit`, with the same warning.
  result = run("""
      import json, warnings
      with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        from tff_canary.stats import audit
        from tff_canary.stats.audit import audit as module
        names = audit._OLD_MODULE_NAMES
        same = [getattr(audit, name) is getattr(module, name)
                for name in names]
      try:
        audit.no_such_name
        missing = None
      except AttributeError as e:
        missing = str(e)
      print(json.dumps(dict(names=len(names), same=same, missing=missing,
                            first=str(caught[0].message),
                            where=caught[0].filename,
                            warned=len(caught))))
      """)
  assert result["names"] == 8 and all(result["same"])
  assert result["warned"] == 8 and result["where"] == "<string>"
  assert result["first"] == (
      "tff_canary.stats.audit.AuditVerdict moved to "
      "tff_canary.stats.audit.audit.AuditVerdict; the old path will be "
      "removed in the next release")
  assert "no attribute 'no_such_name'" in result["missing"]


def test_importing_the_package_loads_nothing_from_the_table():
  result = run(f"""
      import json, sys
      import tff_canary
      table = {moved_modules.MOVED_MODULES!r}
      print(json.dumps(dict(
          finder=any(getattr(f, "finds_moved_modules", False)
                     for f in sys.meta_path),
          old=[m for m in table if m in sys.modules],
          new_tff=[m for m in table.values() if m in sys.modules
                   and not m.startswith("tff_canary.stats.")],
          tensorflow=[m for m in sys.modules if m.startswith("tensorflow")])))
      """)
  assert result == {"finder": True, "old": [], "new_tff": [], "tensorflow": []}


def test_no_old_path_is_a_live_module():
  # Passes once this release's moves are merged: an old path that is still a
  # module would win over its table entry (see the test above), so the entry
  # would be dead.
  live = {old: str(module_file(old).relative_to(REPO))
          for old in moved_modules.MOVED_MODULES if module_file(old)}
  assert not live


def test_every_new_path_is_a_module():
  # Passes once this release's moves (harness/{config,running,recording,
  # reporting}/, stats/correlated/) are merged.
  missing = [new for new in moved_modules.MOVED_MODULES.values()
             if module_file(new) is None]
  assert not missing


def test_the_repository_imports_no_old_path():
  # The package, its scripts and tests import modules by their new paths
  # (an old path works, but warns every user who runs the code). Old paths
  # that are still modules are test_no_old_path_is_a_live_module's.
  found = []
  for folder in ("tff_canary", "bench", "experiments", "tests"):
    for path in sorted((REPO / folder).rglob("*.py")):
      if path.name == "test_moved_modules.py":
        continue
      for line, name in imported_modules(path):
        if name in moved_modules.MOVED_MODULES and not module_file(name):
          found.append(f"{path.relative_to(REPO)}:{line}: {name}")
  assert not found


def test_the_changelog_lists_the_table():
  # docs/changelog.md holds, between its markers, exactly the table this
  # module generates for each group (moved_modules.changelog_blocks()).
  page = CHANGELOG.read_text(encoding="utf-8")
  for release in moved_modules.MOVED_IN:
    block = re.search(f"<!-- moved-modules:begin {re.escape(release)} -->\n"
                      f"(.*?)\n<!-- moved-modules:end {re.escape(release)} -->",
                      page, re.S)
    assert block, f"no moved-modules block for {release} in {CHANGELOG}"
    assert block.group(1) == moved_modules.changelog_table(release), (
        f"paste the {release} block of moved_modules.changelog_blocks() into "
        "docs/changelog.md")
  for old, new in moved_modules.MOVED_MODULES.items():
    assert f"| `{old}` | `{new}` |" in page


@pytest.mark.tff  # imports TensorFlow when it runs
def test_a_renamed_name_works_for_one_release_and_says_where_it_went():
  # tree_factory.AdaptiveTreeClip is adaptive_clip.AdaptiveClip (both
  # adaptive clips use it): the old name gives the same class, warning, on
  # the old module path too (now mechanisms.tree.aggregation).
  from tff_canary.federated.insertion import adaptive_clip  # pylint: disable=g-import-not-at-top
  from tff_canary.mechanisms.tree import aggregation  # pylint: disable=g-import-not-at-top
  with pytest.warns(DeprecationWarning, match="moved to tff_canary.mechanisms"
                    r"\.tree\.aggregation"):
    from tff_canary.federated.insertion import tree_factory  # pylint: disable=g-import-not-at-top
  assert tree_factory is aggregation
  with pytest.warns(DeprecationWarning, match="adaptive_clip.AdaptiveClip"):
    old = tree_factory.AdaptiveTreeClip
  assert old is adaptive_clip.AdaptiveClip
  with pytest.raises(AttributeError, match="no attribute 'NoSuchName'"):
    tree_factory.NoSuchName  # pylint: disable=pointless-statement


@pytest.mark.tff  # imports TensorFlow when it runs
def test_the_tree_checks_old_names_give_the_correlated_ones():
  # federated.audit.tree_noise_check is mechanisms.correlated.noise_check,
  # its check and result renamed for the family they serve (tree, banded,
  # BLT): the old names give the same objects, warning.
  from tff_canary.mechanisms.correlated import noise_check  # pylint: disable=g-import-not-at-top
  with pytest.warns(DeprecationWarning, match="correlated.noise_check"):
    from tff_canary.federated.audit import tree_noise_check  # pylint: disable=g-import-not-at-top
  assert tree_noise_check is noise_check
  with pytest.warns(DeprecationWarning, match="check_correlated_noise"):
    assert noise_check.check_tree_noise is noise_check.check_correlated_noise
  with pytest.warns(DeprecationWarning, match="CorrelatedNoiseCheck"):
    assert noise_check.TreeNoiseCheck is noise_check.CorrelatedNoiseCheck
  with pytest.raises(AttributeError, match="no attribute 'NoSuchName'"):
    noise_check.NoSuchName  # pylint: disable=pointless-statement
