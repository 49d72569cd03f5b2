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


# One concept per module: a module that grows past this holds two.
MAX_LINES = 450


def test_no_module_is_over_the_size_limit():
  sizes = {str(p.relative_to(PACKAGE.parent)): len(p.read_text().splitlines())
           for p in PACKAGE.rglob("*.py")}
  assert len(sizes) > 20
  over = {p: n for p, n in sizes.items() if n > MAX_LINES}
  assert not over, f"over {MAX_LINES} lines: {over}"


def test_the_readme_architecture_lists_every_module_in_its_layer():
  # The README's Architecture tree is the newcomer's map: a module added,
  # moved or renamed without it fails here.
  readme = (PACKAGE.parent / "README.md").read_text(encoding="utf-8")
  section = readme[readme.index("## Architecture"):]
  tree = section[section.index("```\n") + 4:]
  tree = tree[:tree.index("```")]
  listed, layer = {}, None
  for line in tree.splitlines():
    indent = len(line) - len(line.lstrip())
    name = line.split()[0] if line.strip() else ""
    if indent == 2 and name.endswith("/"):
      layer = name.rstrip("/")
    elif indent == 4 and layer:
      listed.setdefault(layer, set()).add(name)
  actual = {layer: {p.stem for p in layer_modules(layer)} - {"__init__"}
            for layer in FORBIDDEN}
  assert listed == actual
