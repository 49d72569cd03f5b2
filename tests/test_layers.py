"""The three layers import in one direction, and the statistics layer is TF-free.

tff_canary/stats      NumPy, SciPy, dp-accounting; imports no other layer
tff_canary/federated  TFF integration; imports stats, never harness
tff_canary/harness    experiment runner, data, run directory, report, plots

These read every module's import statements (ast), so a new module is covered
the day it is added; an import of tensorflow inside a function counts too.
"""

import ast
import pathlib

import pytest

PACKAGE = pathlib.Path(__file__).resolve().parent.parent / "tff_canary"
TF_PACKAGES = ("tensorflow", "tensorflow_federated", "tensorflow_privacy",
               "keras", "jax")
# What each layer may not import (prefixes of absolute module names).
FORBIDDEN = {
    "stats": ("tff_canary.federated", "tff_canary.harness", "absl.flags",
              "matplotlib") + TF_PACKAGES,
    "federated": ("tff_canary.harness", "absl.flags", "matplotlib"),
    "harness": ("absl.flags",),
}


def imported_modules(path: pathlib.Path) -> list[tuple[int, str]]:
  """(line, module) of every import in a file, `from a import b` as a.b too."""
  tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
  found = []
  for node in ast.walk(tree):
    if isinstance(node, ast.Import):
      found.extend((node.lineno, alias.name) for alias in node.names)
    elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
      found.append((node.lineno, node.module))
      found.extend((node.lineno, f"{node.module}.{alias.name}")
                   for alias in node.names)
  return found


def layer_modules(layer: str) -> list[pathlib.Path]:
  return sorted((PACKAGE / layer).glob("*.py"))


@pytest.mark.parametrize("layer", sorted(FORBIDDEN))
def test_layer_imports_point_one_way(layer):
  modules = layer_modules(layer)
  assert len(modules) > 3, f"no modules found under {PACKAGE / layer}"
  bad = []
  for path in modules:
    for line, module in imported_modules(path):
      if any(module == f or module.startswith(f + ".")
             for f in FORBIDDEN[layer]):
        bad.append(f"{path.relative_to(PACKAGE.parent)}:{line} imports {module}")
  assert not bad, "\n".join(bad)


def test_checker_sees_a_forbidden_import(tmp_path):
  # The check above must be able to fail: a function-level import of
  # tensorflow and a `from tff_canary.harness import x` are both found.
  path = tmp_path / "m.py"
  path.write_text("def f():\n  import tensorflow as tf\n"
                  "from tff_canary.harness import report\n")
  names = [m for _, m in imported_modules(path)]
  assert "tensorflow" in names and "tff_canary.harness.report" in names


def test_no_module_outside_the_layers():
  top = sorted(p.name for p in PACKAGE.glob("*.py"))
  assert top == ["__init__.py", "__main__.py"], top
