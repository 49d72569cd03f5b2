"""How a canary aggregator was built: its named constructor and arguments.

A `CanaryDPFactory` keeps the record so that it can build itself again with
other canaries (`CanaryDPFactory.without_canaries`, for the noise
self-test). `remembered` marks a named constructor (a classmethod) whose
call is recorded, `recorded` a plain function that builds the factory (a
mechanism's own constructor, such as DP-FTRL's
`tff_canary.mechanisms.tree.aggregation.tree_aggregation`). The checks of the
arguments the insertion modules share are here too, each with one message.
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
    constructor: The name of the named constructor (a classmethod) or of
      the plain function (`function`), or None for the class itself.
    arguments: Every argument as given, by name, except `canaries` (read
      only).
    function: None, or the plain function that built the factory
      (`recorded`), which `build` calls instead of the class.
  """

  constructor: Optional[str]
  arguments: Mapping[str, Any]
  function: Optional[Callable[..., Any]] = None

  def __post_init__(self):
    object.__setattr__(self, "arguments",
                       types.MappingProxyType(dict(self.arguments)))

  def build(self, cls: type, canaries: Any, **changed: Any) -> Any:
    """The factory built again by the same constructor of `cls` (or the
    same `function`), with `canaries` and the `changed` arguments."""
    arguments = dict(self.arguments, **changed)
    if self.function is not None:
      make = self.function
    elif self.constructor is None:
      make = cls
    else:
      make = getattr(cls, self.constructor)
    return make(canaries=canaries, **arguments)


def _recording(constructor: Callable[..., Any], of_class: bool
               ) -> Callable[..., Any]:
  """`constructor` that records its call in the factory it returns; with
  `of_class`, its first argument (`cls`) is not recorded and `build` finds
  it again by name on the class, else `build` calls the function itself."""
  signature = inspect.signature(constructor)
  skipped = {"canaries"}
  if of_class:
    skipped.add(next(iter(signature.parameters)))  # cls

  @functools.wraps(constructor)
  def build(*args, **kwargs):
    built = constructor(*args, **kwargs)
    arguments = signature.bind(*args, **kwargs).arguments
    built._construction = Construction(  # pylint: disable=protected-access
        constructor.__name__,
        {k: v for k, v in arguments.items() if k not in skipped},
        function=None if of_class else build)
    return built

  return build


def remembered(constructor: Callable[..., Any]) -> classmethod:
  """A named constructor (a function of `cls` and its arguments, returning
  the factory) as a classmethod that records its call in the factory's
  `construction`."""
  return classmethod(_recording(constructor, of_class=True))


def recorded(function: Callable[..., Any]) -> Callable[..., Any]:
  """A plain function that returns a factory (keyword argument `canaries`),
  recording its call in the factory's `construction`, so that
  `CanaryDPFactory.without_canaries` builds it again through `function`."""
  return _recording(function, of_class=False)


def noise_arguments(noise_multiplier: Any, clients_per_round: Any
                    ) -> tuple[float, float]:
  """(z >= 0, clients_per_round > 0), checked: every constructor's."""
  return (validation.as_nonnegative(noise_multiplier, "noise_multiplier"),
          validation.as_positive(clients_per_round, "clients_per_round"))


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
           "noise_arguments", "orthogonal", "recorded", "remembered"]
