"""Outside the registry no code branches on a mechanism's name (issue 27).

`tff_canary/mechanisms/registry.py` is the one place the names of
the DP mechanisms (`registry.names()`) are
spelled for the code to act on. Everywhere else in tff_canary/, experiments/
and bench/ the code asks the mechanism (its NumPy half, its TFF half), never
its name. This reads every module's syntax tree (`ast`) and flags:

  * a comparison (==, !=, in, not in) with a string constant equal to a
    registered name, or with a tuple/list/set of string constants holding
    one (`aggregator == "ddp"`, `name in ("gaussian", "ddp")`);
  * a `match` case on such a constant;
  * a dict literal keyed by two or more registered names (a dispatch table);
  * a `Literal[...]` type holding two or more registered names (a type
    that lists the mechanisms), or one when what it types is named
    "aggregator" or "mechanism" (`aggregator: Literal["tree"]`). One name
    alone in a Literal of other words is another word: the noise
    self-test's test families include a "gaussian" (shape) test.

Not flagged: docstrings and comments (not code; the tree has none of
comments, and a docstring is no comparison), keyword arguments and
assignments (`aggregator="ddp"` names a mechanism, it does not branch on
one), and the canary DIRECTIONS, whose "gaussian" is not the mechanism: a
comparison, case or Literal is skipped when the source of what it is about
(the other operand, the match subject, the annotated or assigned target)
mentions "direction". The checker's own tests below show each rule flags
what it should and nothing else.
"""

from __future__ import annotations

import ast
import functools
import pathlib

import pytest

import repo_paths
from tff_canary.mechanisms import registry

ROOT = repo_paths.REPO
SCANNED = ("tff_canary", "experiments", "bench")
# The one place the names are spelled (its keys are the registry).
REGISTRY = "tff_canary/mechanisms/registry.py"
COMPARISONS = (ast.Eq, ast.NotEq, ast.In, ast.NotIn)
EXEMPT_WORD = "direction"
# What a Literal holding one registered name must type to be flagged.
MECHANISM_WORDS = ("aggregator", "mechanism")


def _strings(node: ast.AST) -> list[str]:
  """The string constants a node spells: itself, or a tuple/list/set's."""
  if isinstance(node, ast.Constant) and isinstance(node.value, str):
    return [node.value]
  if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
    return [s for e in node.elts for s in _strings(e)]
  return []


def _about_directions(source: str, node: ast.AST) -> bool:
  segment = ast.get_source_segment(source, node) or ""
  return EXEMPT_WORD in segment.lower()


def _is_literal(node: ast.AST) -> bool:
  value = node.value if isinstance(node, ast.Subscript) else None
  return (isinstance(value, ast.Name) and value.id == "Literal") or (
      isinstance(value, ast.Attribute) and value.attr == "Literal")


def _literal_owner(parents: dict, node: ast.AST) -> ast.AST | None:
  """What a `Literal[...]` types: the assigned or annotated target, or the
  argument; None at a function's return."""
  while node in parents:
    node = parents[node]
    if isinstance(node, ast.AnnAssign):
      return node.target
    if isinstance(node, ast.Assign):
      return node.targets[0]
    if isinstance(node, ast.arg):
      return node
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
      return None
  return None


def _owner_mentions(source: str, owner: ast.AST | None,
                    words: tuple[str, ...]) -> bool:
  if owner is None:
    return False
  if isinstance(owner, ast.arg):
    text = owner.arg
  else:
    text = ast.get_source_segment(source, owner) or ""
  return any(word in text.lower() for word in words)


def violations(source: str, names: tuple[str, ...]) -> list[tuple[int, str]]:
  """(line, what) of every branch on one of `names` in Python `source`."""
  tree = ast.parse(source)
  parents = {child: node for node in ast.walk(tree)
             for child in ast.iter_child_nodes(node)}
  found = []
  for node in ast.walk(tree):
    if isinstance(node, ast.Compare):
      operands = [node.left] + node.comparators
      for op, left, right in zip(node.ops, operands, operands[1:]):
        if not isinstance(op, COMPARISONS):
          continue
        for spelled, other in ((left, right), (right, left)):
          hit = sorted(set(_strings(spelled)) & set(names))
          if hit and not _about_directions(source, other):
            found.append((node.lineno, f"compares with {hit}: "
                          f"{ast.get_source_segment(source, node)}"))
    elif isinstance(node, ast.Match):
      if _about_directions(source, node.subject):
        continue
      for case in node.cases:
        hit = sorted({p.value.value for p in ast.walk(case.pattern)
                      if isinstance(p, ast.MatchValue)
                      and isinstance(p.value, ast.Constant)
                      and p.value.value in names})
        if hit:
          found.append((case.pattern.lineno, f"match case on {hit}"))
    elif isinstance(node, ast.Dict):
      keys = sorted({k.value for k in node.keys
                     if isinstance(k, ast.Constant) and k.value in names})
      if len(keys) >= 2:
        found.append((node.lineno, f"dict keyed by {keys}"))
    elif isinstance(node, ast.Subscript) and _is_literal(node):
      hit = sorted(set(s for n in ast.walk(node.slice) for s in _strings(n))
                   & set(names))
      owner = _literal_owner(parents, node)
      if hit and not _owner_mentions(source, owner, (EXEMPT_WORD,)) and (
          len(hit) >= 2 or _owner_mentions(source, owner, MECHANISM_WORDS)):
        found.append((node.lineno, f"Literal of {hit}"))
  return sorted(set(found))


def scanned_files() -> list[pathlib.Path]:
  return sorted(p for folder in SCANNED for p in (ROOT / folder).rglob("*.py")
                if p.relative_to(ROOT).as_posix() != REGISTRY)


@functools.cache
def all_violations() -> dict[str, list[tuple[int, str]]]:
  names = registry.names()
  out = {}
  for path in scanned_files():
    found = violations(path.read_text(encoding="utf-8"), names)
    if found:
      out[path.relative_to(ROOT).as_posix()] = found
  return out


def test_no_code_outside_the_registry_branches_on_a_mechanism_name():
  found = all_violations()
  assert not found, "\n".join(
      f"{path}:{line}: {what}" for path, lines in found.items()
      for line, what in lines)


def test_the_scan_covers_the_three_folders():
  files = {p.relative_to(ROOT).as_posix() for p in scanned_files()}
  assert REGISTRY not in files
  for path in ("tff_canary/harness/runner/planted_bug_runs.py",
               "experiments/planted_bugs.py", "bench/ftrl_audit.py"):
    assert path in files


NAMES = ("gaussian", "ddp", "tree")


@pytest.mark.parametrize("snippet", [
    "if config.aggregator == 'ddp': pass",
    "if 'tree' != config.aggregator: pass",
    "ok = name in ('gaussian', 'ddp')",
    "ok = name not in ['tree']",
    "ok = name in {'ddp', 'other'}",
    "ok = 0 < x == 'gaussian'",  # a chained comparison
    "match name:\n  case 'ddp' | 'other':\n    pass",
    "match name:\n  case 'tree':\n    pass",
    "table = {'gaussian': f, 'ddp': g}",
    "Aggregator = Literal['gaussian', 'ddp']",
    "def f(aggregator: typing.Literal['tree'] = 'tree'): pass",
    "Mechanism = Literal['ddp', 'other']",
])
def test_the_checker_flags_a_branch_on_a_name(snippet):
  assert violations(snippet, NAMES), snippet


@pytest.mark.parametrize("snippet", [
    # Canary directions' "gaussian" is not the mechanism.
    "if config.directions == 'gaussian': pass",
    "if canaries.directions in ('gaussian', 'orthogonal'): pass",
    "ok = 'gaussian' == direction_kind",
    "match self.directions:\n  case 'gaussian':\n    pass",
    "Directions = Literal['gaussian', 'orthogonal']",
    "directions: Literal['gaussian', 'orthogonal'] = 'gaussian'",
    "def f(directions: Literal['gaussian', 'orthogonal']): pass",
    # One name among other words in a Literal is a word (noise_tests.py).
    "Family = Literal['zero', 'variance', 'gaussian']",
    "def f(family: Literal['gaussian', 'lag1']): pass",
    # Naming a mechanism is not branching on it.
    "config = Config(aggregator='ddp')",
    "name = 'gaussian'",
    "label = f'{name} tree'",
    # Docstrings and comments are not code.
    "def f():\n  '''if aggregator == \"ddp\": the chain.'''\n",
    "x = 1  # if aggregator == 'ddp'",
    # One name in a dict is no dispatch table; other strings are no names.
    "d = {'gaussian': 1, 'orthogonal': 2}",
    "if bug == 'shortfall': pass",
    "if mode in ('client', 'server'): pass",
    "if name < 'ddp': pass",  # an ordering, not a branch on the name
])
def test_the_checker_passes_what_is_not_a_branch_on_a_name(snippet):
  assert not violations(snippet, NAMES), violations(snippet, NAMES)


def test_the_direction_rule_is_about_the_other_operand_only():
  # The same comparison flagged once "direction" leaves the other operand,
  # even with "direction" elsewhere on the line.
  assert not violations("ok = canary_direction == 'gaussian'", NAMES)
  assert violations("ok = aggregator == 'gaussian' and directions", NAMES)
  assert violations("ok = (aggregator == 'gaussian', 'direction')", NAMES)


def test_the_checker_reports_the_line():
  source = "x = 1\n\nif aggregator == 'tree':\n  pass\n"
  assert [line for line, _ in violations(source, NAMES)] == [3]
