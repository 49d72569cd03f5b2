"""How a canary aggregator was built: its named constructor and arguments.

A `CanaryDPFactory` keeps the record so that it can build itself again with
other canaries (`CanaryDPFactory.without_canaries`, for the noise
self-test). `remembered` marks a named constructor (a classmethod) whose
call is recorded. The checks of the arguments the insertion modules share
are here too, each with one message.
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
import types
from typing import Any, Callable, Mapping, Optional

import tensorflow_federated as tff

from tff_canary.stats import validation
from tff_canary.stats.canaries import canary_config


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


def as_canaries(value: Any, name: str = "canaries"
                ) -> canary_config.CanaryConfig:
  """`value` if it is a `CanaryConfig`, else TypeError naming `name`."""
  if not isinstance(value, canary_config.CanaryConfig):
    raise TypeError(f"{name} must be a tff_canary.stats.canaries."
                    f"canary_config.CanaryConfig, got {validation.show(value)}.")
  return value


def orthogonal(canaries: Any, seed: int) -> bool:
  """Whether `canaries` (None or a CanaryConfig of `seed`) are orthogonal."""
  if canaries is None:
    return False
  if as_canaries(canaries).seed != seed:
    raise ValueError(f"canaries.seed = {canaries.seed} but canary_seed = "
                     f"{seed}: pass the same seed.")
  return canaries.directions == "orthogonal"


def as_unweighted_factory(value: Any, name: str,
                          default: Optional[Callable[[], Any]] = None) -> Any:
  """`value` (`default()` for None, if given) if it is a TFF
  `UnweightedAggregationFactory`; else TypeError naming `name`."""
  if value is None and default is not None:
    value = default()
  if not isinstance(value, tff.aggregators.UnweightedAggregationFactory):
    raise TypeError(f"{name} must be a tff.aggregators."
                    "UnweightedAggregationFactory, got "
                    f"{validation.show(value)}.")
  return value


__all__ = ["Construction", "as_canaries", "as_unweighted_factory",
           "orthogonal", "remembered"]
