"""nested_search.find_first: depth first, the node itself first, any nesting."""

import collections

from tff_canary.federated.structures import nested_search

Point = collections.namedtuple("Point", ["seed", "schedule"])


def test_finds_the_first_node_depth_first_in_every_container():
  deep = Point(1, 2)
  later = Point(3, 4)
  tree = collections.OrderedDict(
      a=[0, {"inner": (5, deep)}], b=later)
  found = nested_search.find_first(tree, lambda n: isinstance(n, Point))
  assert found is deep  # before `later`: depth first, in order


def test_the_node_itself_counts_and_none_when_absent():
  point = Point(1, 2)
  assert nested_search.find_first(point, lambda n: isinstance(n, Point)) is point
  assert nested_search.find_first([1, (2, {"x": 3})],
                                lambda n: isinstance(n, Point)) is None


def test_leaves_have_no_children():
  assert nested_search.children("abc") == []
  assert nested_search.children(3.0) == []
  assert nested_search.children(Point(1, 2)) == [1, 2]
