"""How a canary aggregator was built: its named constructor and arguments.

A `CanaryDPFactory` keeps the record so that it can build itself again with
other canaries: the noise self-test (`tff_canary.federated.audit.self_test`)
runs the same aggregator with none (`CanaryDPFactory.without_canaries`).
`remembered` marks a named constructor (a classmethod) whose call is
recorded; `CanaryDPFactory(...)` itself records its own arguments.
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
import types
from typing import Any, Callable, Mapping, Optional


@dataclasses.dataclass(frozen=True)
class Construction:
  """A factory's constructor and the arguments it was called with.

  Attributes:
    constructor: The name of the named constructor (a classmethod), or None
      for the class itself.
    arguments: Every argument as given, by name, except `canaries` (read
      only).
  """

  constructor: Optional[str]
  arguments: Mapping[str, Any]

  def __post_init__(self):
    object.__setattr__(self, "arguments",
                       types.MappingProxyType(dict(self.arguments)))

  def build(self, cls: type, canaries: Any, **changed: Any) -> Any:
    """The factory built again by the same constructor of `cls`, with
    `canaries` and the `changed` arguments."""
    arguments = dict(self.arguments, **changed)
    make = cls if self.constructor is None else getattr(cls, self.constructor)
    return make(canaries=canaries, **arguments)


def remembered(constructor: Callable[..., Any]) -> classmethod:
  """A named constructor (a function of `cls` and its arguments, returning
  the factory) as a classmethod that records its call in the factory's
  `construction`."""
  signature = inspect.signature(constructor)

  @functools.wraps(constructor)
  def build(cls, *args, **kwargs):
    built = constructor(cls, *args, **kwargs)
    arguments = signature.bind(cls, *args, **kwargs).arguments
    first = next(iter(signature.parameters))  # cls
    built._construction = Construction(  # pylint: disable=protected-access
        constructor.__name__,
        {k: v for k, v in arguments.items() if k not in (first, "canaries")})
    return built

  return classmethod(build)


__all__ = ["Construction", "remembered"]
