"""Which test files run on which stack, read from their import lines.

`needs_tensorflow`: in an environment without TensorFlow (the core install,
noxfile.py's `flower` session) tests/conftest.py leaves out the
test files whose module-level imports reach a TensorFlow package: directly,
or through the tests' helper modules (tests/*.py) and tff_canary's own
modules, followed to the end. Imports inside functions are not followed (a
report path may load TensorFlow on demand, and needs none to import); a
test that needs TensorFlow at run time without importing it at module level
carries the `tff` marker instead, which that session deselects.

`needs_flower`: the same for Flower (flwr, and Ray, which its simulation
engine runs on): the TFF environment (TFF 0.87 pins NumPy 1.25, Flower
needs 1.26 or later) leaves out the Flower half's test files, and the
Flower environment (requirements/lock-flower.txt) has no TensorFlow, so
`needs_tensorflow` leaves the TFF ones out there.

`statistics_files`: the statistics layer's tests (their only tff_canary
imports are tff_canary.stats and the top-level estimators) and the report
command's, which the `flower` session runs by default: each stack's own
numbers, not the experiments' scripts again.
"""

from __future__ import annotations

import ast
import pathlib

TESTS = pathlib.Path(__file__).resolve().parent
REPO = TESTS.parent
TF_PACKAGES = ("tensorflow", "tensorflow_federated", "tensorflow_privacy",
               "keras", "jax")
FLOWER_PACKAGES = ("flwr", "ray")


def _module_level_imports(path: pathlib.Path) -> list[str]:
  """Absolute module names imported outside functions (`from a import b`
  as a and a.b; under `if`/`try` at module level too)."""
  found = []
  pending = list(ast.parse(path.read_text(encoding="utf-8")).body)
  while pending:
    node = pending.pop()
    if isinstance(node, ast.Import):
      found.extend(alias.name for alias in node.names)
    elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
      found.append(node.module)
      found.extend(f"{node.module}.{alias.name}" for alias in node.names)
    elif isinstance(node, (ast.If, ast.Try, ast.With)):
      pending.extend(ast.iter_child_nodes(node))
  return found


def _source(module: str) -> pathlib.Path | None:
  """The file of a tff_canary module or a tests/ helper, else None."""
  parts = module.split(".")
  if parts[0] == "tff_canary":
    base = REPO.joinpath(*parts)
    for path in (base.with_suffix(".py"), base / "__init__.py"):
      if path.is_file():
        return path
    return None
  path = TESTS.joinpath(*parts).with_suffix(".py")  # a helper or a test file
  return path if path.is_file() else None


_KNOWN: dict[tuple[pathlib.Path, tuple[str, ...]], bool] = {}


def _reaches(path: pathlib.Path, packages: tuple[str, ...]) -> bool:
  key = (path, packages)
  if key not in _KNOWN:
    _KNOWN[key] = False  # while it is being read: an import cycle ends here
    _KNOWN[key] = any(_import_reaches(module, packages)
                      for module in _module_level_imports(path))
  return _KNOWN[key]


def _import_reaches(module: str, packages: tuple[str, ...]) -> bool:
  parts = module.split(".")
  if parts[0] in packages:
    return True
  # a.b.c imports the packages a and a.b first.
  sources = (_source(".".join(parts[:i])) for i in range(1, len(parts) + 1))
  return any(s is not None and _reaches(s, packages) for s in sources)


def needs_tensorflow(path: str | pathlib.Path) -> bool:
  """Whether importing the test file `path` imports a TensorFlow package."""
  return _reaches(pathlib.Path(path).resolve(), TF_PACKAGES)


def needs_flower(path: str | pathlib.Path) -> bool:
  """Whether importing the test file `path` imports Flower (or Ray)."""
  return _reaches(pathlib.Path(path).resolve(), FLOWER_PACKAGES)


# The report command (`python -m tff_canary report`), the install itself
# (TF-free imports, bytecode) and the two stacks' agreement: the rest of
# what the core install promises.
CORE_INSTALL_FILES = ("project/test_install_without_tf.py",
                      "project/test_package.py",
                      "harness/reporting/test_report.py",
                      "project/test_stack_agreement.py")


def _imports_only_statistics(path: pathlib.Path) -> bool:
  ours = [m for m in _module_level_imports(path)
          if m.split(".")[0] == "tff_canary"]
  return bool(ours) and all(
      m == "tff_canary" or m.startswith("tff_canary.stats")
      or m.startswith("tff_canary.") and m.count(".") == 1
      and _source(m) is None  # `from tff_canary import epsilon_final`
      for m in ours)


def statistics_files() -> list[str]:
  """tests/**/test_*.py of the statistics layer and the report command, as
  paths relative to the repository."""
  return [str(path.relative_to(REPO))
          for path in sorted(TESTS.rglob("test_*.py"))
          if not needs_tensorflow(path) and (
              path.relative_to(TESTS).as_posix() in CORE_INSTALL_FILES
              or _imports_only_statistics(path))]
