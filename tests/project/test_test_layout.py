"""The tests mirror the package (issue 35, item 4).

A test of `tff_canary/<layer>/<folder>/<module>.py` is
`tests/<layer>/<folder>/test_<module>.py`; tests of experiments/ scripts are
in `tests/experiments/`, and tests of the repository as a whole (docs, README,
layers, install, the smoke runs of every script) in `tests/project/`. The
shared helpers (fake runs, script runs, the test mechanism) stay in tests/.
"""

import repo_paths

TESTS = repo_paths.TESTS
PACKAGE = repo_paths.REPO / "tff_canary"
HELPER_FOLDERS = {"mechanism_example"}  # the test mechanism, a package


def _test_folders():
  return sorted({p.parent for p in TESTS.rglob("test_*.py")} - {TESTS})


def test_every_test_folder_mirrors_a_package_folder():
  wrong = []
  for folder in _test_folders():
    rel = folder.relative_to(TESTS)
    if rel.parts[0] in ("experiments", "project"):
      ok = len(rel.parts) == 1
    else:
      ok = (PACKAGE / rel / "__init__.py").is_file()
    if not ok:
      wrong.append(str(rel))
  assert not wrong, f"test folders with no package folder of that name: {wrong}"


def test_each_test_folder_is_a_package():
  # So that files of the same name in two folders (test_planted_bugs.py of
  # the tree and of the matrix mechanisms) are two modules, with tests/ on
  # sys.path for the helpers.
  missing = []
  for folder in _test_folders():
    while folder != TESTS:
      if not (folder / "__init__.py").is_file():
        missing.append(str(folder.relative_to(TESTS)))
      folder = folder.parent
  assert not missing, sorted(set(missing))


def test_a_test_named_after_a_module_sits_beside_its_mirror():
  # test_<module>.py, where <module> is a module of some package folder,
  # belongs in that folder's mirror (not, say, a stats module's test under
  # federated/).
  modules = {}
  for path in PACKAGE.rglob("*.py"):
    if path.name != "__init__.py":
      modules.setdefault(path.stem, set()).add(path.parent.relative_to(PACKAGE))
  misplaced = []
  for path in TESTS.rglob("test_*.py"):
    rel = path.parent.relative_to(TESTS)
    homes = modules.get(path.stem[len("test_"):], set())
    if (homes and rel.parts and rel.parts[0] not in ("experiments", "project")
        and rel not in homes):
      misplaced.append(f"{path.relative_to(TESTS)} (module in "
                       f"{sorted(map(str, homes))})")
  assert not misplaced, misplaced


def test_only_top_level_modules_have_their_test_at_the_top():
  top = sorted(p.name for p in TESTS.glob("test_*.py"))
  assert all((PACKAGE / name[len("test_"):]).is_file() for name in top), top
