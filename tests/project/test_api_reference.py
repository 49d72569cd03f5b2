"""The API reference covers every module, and every dotted name resolves.

docs/api/*.md documents the package with mkdocstrings (`::: module` lines),
one page per subpackage, mirroring the tree; `mkdocs build --strict`
(tests/project/test_docs.py) fails on a `:::` line whose module is gone. This file
checks the other direction: a module added without an API entry fails here.

It also reads every file in the repository for fully qualified names
(`tff_canary.stats.estimators.estimates.epsilon_final`, ...) and checks each
resolves to a module, and to a name defined in it (a function, class or
assignment at module level, or a member of such a class), by reading the
source (ast), without importing TensorFlow. A renamed or removed function
that a docstring, a docs page, a notebook or the README still names fails
here. Names of attributes of objects imported from elsewhere are not checked
past the first level.
"""

import ast
import pathlib
import re
import subprocess
import repo_paths

ROOT = repo_paths.REPO
PACKAGE = ROOT / "tff_canary"
NAME = re.compile(r"tff_canary(?:\.[A-Za-z_][A-Za-z0-9_]*)+")
# Files whose text is read for names.
SUFFIXES = (".py", ".md", ".ipynb", ".yml", ".sh", ".ini")


def _module_file(parts: list[str]) -> pathlib.Path | None:
  path = ROOT.joinpath(*parts)
  if (path / "__init__.py").exists():
    return path / "__init__.py"
  if path.with_suffix(".py").exists():
    return path.with_suffix(".py")
  return None


def _defined(body: list[ast.stmt]) -> set[str]:
  """Names bound at the top of `body` (defs, classes, assignments, imports,
  and the same inside top-level if/try blocks)."""
  names = set()
  for node in body:
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef,
                         ast.ClassDef)):
      names.add(node.name)
    elif isinstance(node, ast.Assign):
      names.update(n.id for t in node.targets for n in ast.walk(t)
                   if isinstance(n, ast.Name))
    elif isinstance(node, ast.AnnAssign) and isinstance(node.target,
                                                        ast.Name):
      names.add(node.target.id)
    elif isinstance(node, (ast.Import, ast.ImportFrom)):
      names.update((a.asname or a.name).split(".")[0] for a in node.names)
    elif isinstance(node, (ast.If, ast.Try)):
      inner = list(node.body) + list(node.orelse)
      for handler in getattr(node, "handlers", []):
        inner += handler.body
      names |= _defined(inner)
  return names


def resolves(name: str) -> bool:
  """Whether a dotted tff_canary name is a module, or a name defined in one
  (one level into a class defined there)."""
  parts = name.split(".")
  for k in range(len(parts), 0, -1):
    path = _module_file(parts[:k])
    if path is None:
      continue
    rest = parts[k:]
    if not rest or rest[0].startswith("__"):
      return True
    tree = ast.parse(path.read_text(encoding="utf-8"))
    if rest[0] not in _defined(tree.body):
      return False
    if len(rest) == 1:
      return True
    for node in tree.body:
      if isinstance(node, ast.ClassDef) and node.name == rest[0]:
        return rest[1].startswith("__") or rest[1] in _defined(node.body)
    return True  # an object imported from elsewhere: not checked further
  return False


def repository_files() -> list[pathlib.Path]:
  listed = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True,
                          text=True, check=True).stdout.split()
  return [ROOT / f for f in listed
          if f.endswith(SUFFIXES) and not f.startswith("requirements/")
          and (ROOT / f).is_file()]


def test_every_module_is_in_the_api_reference():
  documented = set()
  for page in (ROOT / "docs" / "api").rglob("*.md"):
    documented.update(re.findall(r"^::: (tff_canary[\w.]*)\s*$",
                                 page.read_text(encoding="utf-8"), re.M))
  modules = set()
  for path in PACKAGE.rglob("*.py"):
    if path.name in ("__init__.py", "__main__.py"):
      continue
    modules.add(".".join(path.relative_to(ROOT).with_suffix("").parts))
  assert len(modules) > 60
  assert modules - documented == set(), "modules missing from docs/api"


# Files that name old module paths and old names on purpose: the table of
# moved modules, its tests, and the changelog (a record of what was renamed).
# tests/test_moved_modules.py checks that every new path of the table exists.
OLD_NAMES_ON_PURPOSE = ("tff_canary/moved_modules.py",
                        "tests/test_moved_modules.py", "docs/changelog.md")


def test_every_dotted_name_in_the_repository_resolves():
  unresolved = set()
  files = repository_files()
  assert len(files) > 100
  for path in files:
    if path.name == "test_api_reference.py":  # its examples of what fails
      continue
    if path.relative_to(ROOT).as_posix() in OLD_NAMES_ON_PURPOSE:
      continue
    for name in NAME.findall(path.read_text(encoding="utf-8")):
      if not resolves(name):
        unresolved.add(f"{path.relative_to(ROOT)}: {name}")
  assert not unresolved, "\n".join(sorted(unresolved))


def test_the_resolver_rejects_what_does_not_exist():
  # The check above must be able to fail: a removed function, a module that
  # is gone, a missing class member.
  assert resolves("tff_canary.stats.estimators.estimates.epsilon_final")
  assert resolves("tff_canary.stats.results.EpsilonEstimate.epsilon")
  assert not resolves("tff_canary.stats.estimators.estimates.no_such_name")
  assert not resolves("tff_canary.stats.estimates.epsilon_final")
  assert not resolves("tff_canary.stats.results.EpsilonEstimate.no_member")
