"""Finding a node in a nested structure (TFF states and metrics).

TFF nests the parts a caller needs at depths that depend on the composition
(e.g. the DP aggregator's state sits under a zeroing wrapper's `inner_agg`),
so the package looks them up by what they are, not by where they are.
NumPy only; no TensorFlow import.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Callable


def children(node: Any) -> list[Any]:
  """The direct children of a mapping, named tuple, list or tuple (else [])."""
  if isinstance(node, Mapping):
    return list(node.values())
  if hasattr(node, "_asdict"):
    return list(node._asdict().values())
  if isinstance(node, (list, tuple)):
    return list(node)
  return []


def find_first(tree: Any, predicate: Callable[[Any], bool]) -> Any:
  """The first node, depth first (the node itself first), with predicate(node)
  true; None if there is none."""
  if predicate(tree):
    return tree
  for child in children(tree):
    found = find_first(child, predicate)
    if found is not None:
      return found
  return None


__all__ = ["children", "find_first"]
