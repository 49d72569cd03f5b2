"""Outside its package no code probes a mechanism's type or attributes (issue 35).

The protocols (`tff_canary.mechanisms.protocol.Mechanism`,
`protocol_tff.TffMechanism`) declare everything their callers use, so the
callers (the harness, the federated building blocks, experiments/ and
bench/) ask, never test what a mechanism is. This reads every module's
syntax tree (`ast`) outside `tff_canary/mechanisms/` and flags:

  * `isinstance(x, T)` or `issubclass(x, T)` where T (or one of a tuple of
    T) is reached through a name imported from `tff_canary.mechanisms` (a
    mechanism's class, its claim's, its aggregation's);
  * `hasattr(x, "...")` or `getattr(x, "...", default)` where the source of
    x names a mechanism, its claim, its noise, its section or its half
    (`mechanism`, `claim`, `noise`, `section`, `half`): asking whether a
    mechanism has something instead of declaring it.

Not flagged: a check of an argument's type that refuses a wrong one
(`if not isinstance(config, BugRunConfig): raise TypeError(...)`, argument
validation, not a probe), and checks of TFF's or tensorflow_privacy's
structures, which are no mechanism's. `KNOWN` lists the files allowed a
probe for now (none: DP-FTRL's tree query and its noise check, which made
the last ones, live in `tff_canary/mechanisms/`), so that a new one fails
here. The checker's own tests below show each rule flags what it should.
"""

from __future__ import annotations

import ast
import pathlib

import pytest
import repo_paths

ROOT = repo_paths.REPO
SCANNED = ("tff_canary", "experiments", "bench")
INSIDE = "tff_canary/mechanisms/"
WORDS = ("mechanism", "claim", "noise", "section", "half")
# Files outside the mechanisms' packages allowed probes: file -> how many.
KNOWN = {}


def _imported_from_mechanisms(tree: ast.AST) -> set[str]:
  """Local names bound to something imported from tff_canary.mechanisms."""
  names = set()
  for node in ast.walk(tree):
    if isinstance(node, ast.ImportFrom) and (node.module or "").startswith(
        "tff_canary.mechanisms"):
      names.update(a.asname or a.name for a in node.names)
    elif isinstance(node, ast.Import):
      names.update((a.asname or a.name).split(".")[0] for a in node.names
                   if a.name.startswith("tff_canary.mechanisms"))
  return names


def _root(node: ast.AST) -> str | None:
  while isinstance(node, ast.Attribute):
    node = node.value
  return node.id if isinstance(node, ast.Name) else None


def _refuses(parents: dict, node: ast.AST) -> bool:
  """`node` is the test of `if not node: raise TypeError(...)`."""
  negation = parents.get(node)
  branch = parents.get(negation)
  return (isinstance(negation, ast.UnaryOp)
          and isinstance(negation.op, ast.Not)
          and isinstance(branch, ast.If) and branch.test is negation
          and isinstance(branch.body[0], ast.Raise)
          and "TypeError" in ast.unparse(branch.body[0]))


def probes(source: str) -> list[tuple[int, str]]:
  """(line, what) of each probe of a mechanism in `source`."""
  tree = ast.parse(source)
  imported = _imported_from_mechanisms(tree)
  parents = {child: node for node in ast.walk(tree)
             for child in ast.iter_child_nodes(node)}
  found = []
  for node in ast.walk(tree):
    if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)):
      continue
    if _refuses(parents, node):
      continue
    name, args = node.func.id, node.args
    if name in ("isinstance", "issubclass") and len(args) == 2:
      kinds = args[1].elts if isinstance(args[1], ast.Tuple) else [args[1]]
      hit = [ast.unparse(k) for k in kinds if _root(k) in imported]
      if hit:
        found.append((node.lineno, f"{name}(..., {', '.join(hit)})"))
    elif name in ("hasattr", "getattr") and len(args) >= 2 and (
        name == "hasattr" or len(args) == 3):
      subject = ast.unparse(args[0]).lower()
      if any(word in subject for word in WORDS):
        found.append((node.lineno, f"{name}({ast.unparse(args[0])}, "
                      f"{ast.unparse(args[1])})"))
  return sorted(found)


def scanned_files() -> list[pathlib.Path]:
  return sorted(p for folder in SCANNED for p in (ROOT / folder).rglob("*.py")
                if not p.relative_to(ROOT).as_posix().startswith(INSIDE))


def test_no_caller_probes_a_mechanism():
  bad, counts = [], {}
  for path in scanned_files():
    rel = path.relative_to(ROOT).as_posix()
    found = probes(path.read_text(encoding="utf-8"))
    counts[rel] = len(found)
    if found and rel not in KNOWN:
      bad += [f"{rel}:{line}: {what}" for line, what in found]
  assert not bad, "\n".join(bad)
  # The known ones stay known: no new probe hides in their files, and a
  # probe removed leaves no stale entry.
  assert {rel: counts.get(rel, 0) for rel in KNOWN} == KNOWN


def test_the_scan_reads_the_callers_not_the_packages():
  files = {p.relative_to(ROOT).as_posix() for p in scanned_files()}
  assert "tff_canary/harness/reporting/report.py" in files
  assert "experiments/planted_bugs.py" in files
  assert not any(f.startswith(INSIDE) for f in files)


@pytest.mark.parametrize("snippet", [
    "from tff_canary.mechanisms.tree import spec\n"
    "if isinstance(mechanism, spec.TreeMechanism): pass",
    "from tff_canary.mechanisms.matrix import aggregation as a\n"
    "ok = isinstance(q, (int, a.MatrixAggregation))",
    "from tff_canary.mechanisms import protocol\n"
    "issubclass(kind, protocol.Mechanism)",
    "if hasattr(claim, 'sensitivity'): pass",
    "if hasattr(mechanism, 'round_noise'): pass",
    "rule = getattr(noise, 'participation_rule', None)",
])
def test_the_checker_flags_a_probe(snippet):
  assert probes(snippet)


@pytest.mark.parametrize("snippet", [
    "from tff_canary.stats.canaries import canary_config\n"
    "isinstance(c, canary_config.CanaryConfig)",
    "if hasattr(output, 'metrics'): pass",
    "value = getattr(mechanism, 'name')",  # no default: an attribute read
    "from tff_canary.mechanisms import registry\nregistry.get('x')",
    "from tff_canary.mechanisms import planted_runs\n"
    "if not isinstance(config, planted_runs.BugRunConfig):\n"
    "  raise TypeError('config must be a BugRunConfig')",
])
def test_the_checker_lets_other_checks_be(snippet):
  assert not probes(snippet)
