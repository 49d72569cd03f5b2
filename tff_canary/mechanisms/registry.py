"""The registry of DP mechanisms: the one place their names are spelled.

`MECHANISMS` maps each name (the experiments' `--aggregator`, config.json's
`aggregator`) to its package: the package's `spec` module holds its NumPy
half (`MECHANISM`, a `protocol.Mechanism`), and its module of each
framework in `FRAMEWORKS` (today `tff`: `TFF_MECHANISM`, a
`protocol_tff.TffMechanism`) that framework's half. Adding a mechanism is
its package and one line here; nothing else in the package branches on a
name (tests/project/test_mechanism_names.py reads the code for it;
docs/guide/mechanisms.md).
"""

from __future__ import annotations

import importlib
from typing import Any

from tff_canary.stats import validation

MECHANISMS = {
    "gaussian": "tff_canary.mechanisms.gaussian",  # DP-FedAvg
    "ddp": "tff_canary.mechanisms.ddp",  # TFF's distributed DP
    "tree": "tff_canary.mechanisms.tree",  # DP-FTRL's tree
    "banded": "tff_canary.mechanisms.banded",  # banded DP-FTRL
    "blt": "tff_canary.mechanisms.blt",  # BLT DP-FTRL
}
# The module of a mechanism's package that holds its NumPy half, and its
# halves by framework: (module, attribute).
SPEC = ("spec", "MECHANISM")
FRAMEWORKS = {"tff": ("tff", "TFF_MECHANISM")}
# The mechanism of a config.json without the key (written before the DDP
# aggregator), and of the experiments by default.
DEFAULT = "gaussian"


def names() -> tuple[str, ...]:
  """Every registered mechanism's name, in registry order."""
  return tuple(MECHANISMS)


def get(name: str, what: str = "aggregator"):
  """The NumPy half (`protocol.Mechanism`) of mechanism `name` (`what`
  names it in the refusal of an unknown name)."""
  name = validation.as_choice(name, what, names())
  module, attribute = SPEC
  mechanism = getattr(importlib.import_module(f"{MECHANISMS[name]}.{module}"),
                      attribute)
  if mechanism.name != name:
    raise ValueError(f"{_where(name, *SPEC)} is named "
                     f"{mechanism.name!r}, registered as {name!r}.")
  return mechanism


def half(name: str, framework: str = "tff"):
  """The `framework` half of mechanism `name` (for "tff" a
  `protocol_tff.TffMechanism`); a mechanism without one is refused."""
  name = validation.as_choice(name, "aggregator", names())
  framework = validation.as_choice(framework, "framework", tuple(FRAMEWORKS))
  module, attribute = FRAMEWORKS[framework]
  found = module_if_any(MECHANISMS[name], module)
  if found is None:
    raise ValueError(f"aggregator {name!r} has no {framework} half "
                     f"({MECHANISMS[name]}.{module} does not exist).")
  return getattr(found, attribute)


def module_if_any(package: str, module: str):
  """The module `package.module`, or None when the package has none (an
  import that fails inside that module is raised as it is)."""
  path = f"{package}.{module}"
  try:
    return importlib.import_module(path)
  except ModuleNotFoundError as error:
    if error.name != path:
      raise
    return None


def _where(name: str, module: str, attribute: str) -> str:
  return f"{MECHANISMS[name]}.{module}.{attribute}"


def of_config(values: dict[str, Any]):
  """The mechanism of a config.json's `values` (`DEFAULT` when the key is
  missing or None: files written before the DDP aggregator)."""
  return get(values.get("aggregator") or DEFAULT, "config.json's aggregator")


def helps() -> dict[str, str]:
  """Every mechanism's line of `--aggregator`'s help (`Mechanism.help`), by
  name, in registry order; a mechanism that declares none of its own (an
  inherited line would describe another mechanism) is an error."""
  out = {}
  for name in names():
    mechanism = get(name)
    text = type(mechanism).__dict__.get("help")
    if not isinstance(text, str) or not text.strip():
      raise ValueError(f"{_where(name, *SPEC)} ({name!r}) declares no "
                       "help line of its own (Mechanism.help), which "
                       "--aggregator's help shows.")
    out[name] = text.strip()
  return out


def settings() -> dict[str, Any]:
  """Every mechanism's settings (`protocol.Setting` by config.json key), in
  registry order; a key two mechanisms own is an error."""
  out = {}
  for name in names():
    for key, setting in get(name).settings.items():
      if key in out:
        raise ValueError(f"setting {key!r} of aggregator={name!r} is "
                         "another mechanism's too.")
      out[key] = setting
  return out


def setting_keys() -> tuple[str, ...]:
  """Every mechanism's settings keys (config.json keys), in order."""
  return tuple(settings())


__all__ = ["DEFAULT", "FRAMEWORKS", "MECHANISMS", "SPEC", "get", "half",
           "helps", "module_if_any", "names", "of_config", "setting_keys",
           "settings"]
