"""The four layers import in one direction, and the statistics layer is TF-free.

tff_canary/stats       NumPy, SciPy, dp-accounting; imports no other layer
tff_canary/federated   TFF building blocks; imports stats only
tff_canary/mechanisms  one package per DP mechanism (NumPy half: no TF; TFF
                       half); imports stats and federated, never harness
tff_canary/harness     config (no TF), data, runner, writing, recording (no TF),
                       reporting (no TF)

stats/ and federated/ are split into subpackages by concept (estimators,
bounds, accounting, ...; insertion, scores, runtime, ...); neither the modules
nor the subpackages import each other in a cycle.

These read every module's import statements (ast), so a new module is covered
the day it is added; an import of tensorflow inside a function counts too, and
so does an import under `if TYPE_CHECKING:`.
"""

import ast
import collections
import pathlib
import re

import pytest
import repo_paths

PACKAGE = repo_paths.REPO / "tff_canary"
TF_PACKAGES = ("tensorflow", "tensorflow_federated", "tensorflow_privacy",
               "keras", "jax")
# The harness's folders that need TensorFlow (data, runner, writing).
RUNNERS = ("tff_canary.harness.data", "tff_canary.harness.runner",
           "tff_canary.harness.writing", "tff_canary.harness.running")
# What each layer may not import (prefixes of absolute module names).
FORBIDDEN = {
    "stats": ("tff_canary.federated", "tff_canary.harness", "absl.flags",
              "matplotlib") + TF_PACKAGES,
    "federated": ("tff_canary.harness", "tff_canary.mechanisms", "absl.flags",
                  "matplotlib"),
    "mechanisms": ("tff_canary.harness", "absl.flags"),
    "harness": ("absl.flags",),
    # What a run is, its files and its report need no TensorFlow and no runner
    # (`python -m tff_canary report` and notebooks on saved runs).
    "harness/config": ("tff_canary.federated",) + RUNNERS
                      + ("tff_canary.harness.reporting",) + TF_PACKAGES,
    "harness/recording": ("tff_canary.federated",) + RUNNERS
                         + ("tff_canary.harness.reporting",) + TF_PACKAGES,
    "harness/reporting": ("tff_canary.federated",) + RUNNERS + TF_PACKAGES,
    # Writing a run sits below the runner (which writes through it).
    "harness/writing": ("tff_canary.harness.runner",),
}
# The mechanisms' modules that import no TensorFlow (their NumPy halves, the
# records, the report sections and their figures): what config, recording
# and reporting import of them.
NUMPY_HALVES = ("protocol.py", "registry.py", "records.py", "section.py",
                "epsilon_plot.py", "spec.py", "claim.py", "canary_claim.py",
                "analytical_epsilons.py", "report.py", "plots.py",
                "__init__.py")
NUMPY_FORBIDDEN = ("tff_canary.federated",) + TF_PACKAGES


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
  return sorted((PACKAGE / layer).rglob("*.py"))


def module_name(path: pathlib.Path) -> str:
  """tff_canary/stats/estimators/estimates.py -> its dotted name; a
  package's __init__.py is the package."""
  parts = path.relative_to(PACKAGE.parent).with_suffix("").parts
  return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def import_graph() -> dict[str, set[str]]:
  """Module -> the package's modules it imports (absolute imports; every
  `from a import b` counts as importing a, and a.b when that is a module)."""
  modules = {module_name(p): p for p in PACKAGE.rglob("*.py")}
  graph = {}
  for name, path in modules.items():
    graph[name] = {m for _, m in imported_modules(path)
                   if m in modules and m != name}
  return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
  """The strongly connected components of more than one node (Tarjan)."""
  index, low, stack, on_stack, found = {}, {}, [], set(), []

  def visit(v):
    index[v] = low[v] = len(index)
    stack.append(v)
    on_stack.add(v)
    for w in sorted(graph.get(v, ())):
      if w not in index:
        visit(w)
        low[v] = min(low[v], low[w])
      elif w in on_stack:
        low[v] = min(low[v], index[w])
    if low[v] == index[v]:
      component = []
      while True:
        w = stack.pop()
        on_stack.discard(w)
        component.append(w)
        if w == v:
          break
      if len(component) > 1:
        found.append(sorted(component))

  for v in sorted(graph):
    if v not in index:
      visit(v)
  return found


def subpackage(module: str) -> str:
  """A module -> its subpackage (tff_canary.stats.estimators); a module at a
  layer's top level (tff_canary.stats.results) is its own node."""
  parts = module.split(".")
  if len(parts) >= 3 and (PACKAGE / parts[1] / parts[2]).is_dir():
    return ".".join(parts[:3])
  return module


@pytest.mark.parametrize("layer", sorted(FORBIDDEN))
def test_layer_imports_point_one_way(layer):
  modules = layer_modules(layer)
  assert len(modules) > 1, f"no modules found under {PACKAGE / layer}"
  bad = []
  for path in modules:
    for line, module in imported_modules(path):
      if any(module == f or module.startswith(f + ".")
             for f in FORBIDDEN[layer]):
        bad.append(f"{path.relative_to(PACKAGE.parent)}:{line} imports {module}")
  assert not bad, "\n".join(bad)


def test_the_mechanisms_numpy_halves_import_no_tensorflow():
  # What config, recording and reporting read of a mechanism (its spec,
  # claim, records, report section) needs no TensorFlow and no federated
  # module, directly or through another module of tff_canary.mechanisms.
  graph = import_graph()
  halves = {module_name(p) for p in layer_modules("mechanisms")
            if p.name in NUMPY_HALVES}
  assert "tff_canary.mechanisms.tree.spec" in halves
  bad = []
  for name in sorted(halves):
    path = PACKAGE.parent / (name.replace(".", "/") + ".py")
    if not path.exists():
      path = PACKAGE.parent / name.replace(".", "/") / "__init__.py"
    for line, module in imported_modules(path):
      if any(module == f or module.startswith(f + ".")
             for f in NUMPY_FORBIDDEN):
        bad.append(f"{name}:{line} imports {module}")
    for other in graph[name]:
      if other.startswith("tff_canary.mechanisms.") and other not in halves:
        bad.append(f"{name} imports {other}, which is not a NumPy half")
  assert not bad, "\n".join(bad)


def test_no_module_imports_itself_through_a_cycle():
  graph = import_graph()
  assert len(graph) > 60, "the import graph lost its modules"
  assert cycles(graph) == []


def test_subpackages_import_each_other_without_a_cycle():
  # The subpackages are layers within a layer: accounting and estimators
  # below bounds, bounds below audit, ... Any cycle means a concept split
  # across two of them.
  graph = collections.defaultdict(set)
  for module, imported in import_graph().items():
    for other in imported:
      if subpackage(module) != subpackage(other):
        graph[subpackage(module)].add(subpackage(other))
  assert "tff_canary.stats.estimators" in graph
  assert cycles(dict(graph)) == []


def test_cycle_finder_finds_a_cycle():
  # The two checks above must be able to fail.
  assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [
      ["a", "b", "c"]]
  assert cycles({"a": {"b"}, "b": set()}) == []


def test_checker_sees_a_forbidden_import(tmp_path):
  # The check above must be able to fail: a function-level import of
  # tensorflow and a `from tff_canary.harness import x` are both found.
  path = tmp_path / "m.py"
  path.write_text("def f():\n  import tensorflow as tf\n"
                  "from tff_canary.harness import reporting\n")
  names = [m for _, m in imported_modules(path)]
  assert "tensorflow" in names and "tff_canary.harness.reporting" in names


def test_no_module_outside_the_layers():
  # moved_modules.py is the import hook of old module paths (stdlib only):
  # it belongs to the package's imports, not to a layer.
  top = sorted(p.name for p in PACKAGE.glob("*.py"))
  assert top == ["__init__.py", "__main__.py", "moved_modules.py"], top


# One concept per module: a module that grows past this holds two.
MAX_LINES = 450


def test_no_module_is_over_the_size_limit():
  sizes = {str(p.relative_to(PACKAGE.parent)): len(p.read_text().splitlines())
           for p in PACKAGE.rglob("*.py")}
  assert len(sizes) > 20
  over = {p: n for p, n in sizes.items() if n > MAX_LINES}
  assert not over, f"over {MAX_LINES} lines: {over}"


def listed_tree(text: str) -> set[str]:
  """The paths of a nested Markdown list of `name` / `name/` items (four
  spaces a level), e.g. {"tff_canary/stats/results.py", ...}."""
  paths, stack = set(), []
  for line in text.splitlines():
    item = re.match(r"^( *)- `([^`]+)`", line)
    if not item:
      continue
    depth = len(item.group(1)) // 4
    stack[depth:] = [item.group(2)]
    paths.add("".join(stack).rstrip("/"))
  return paths


def test_the_layout_page_lists_every_module():
  # docs/guide/layout.md is the newcomer's map: a module added, moved or
  # renamed without it fails here (so does a listed module that is gone).
  page = (PACKAGE.parent / "docs" / "guide" / "layout.md").read_text(
      encoding="utf-8")
  listed = {p for p in listed_tree(page) if p.endswith(".py")}
  actual = {str(p.relative_to(PACKAGE.parent)) for p in PACKAGE.rglob("*.py")
            if p.name != "__init__.py"}
  assert len(actual) > 60
  assert listed == actual


def test_listed_tree_reads_nesting():
  assert listed_tree("- `a/`: x\n    - `b.py`: y\n    - `c/`: z\n"
                     "        - `d.py`: w\n- `e.py`\n") == {
                         "a", "a/b.py", "a/c", "a/c/d.py", "e.py"}
