"""The registry of DP mechanisms: the one place their names are spelled.

`MECHANISMS` maps each name (the experiments' `--aggregator`, config.json's
`aggregator`) to the module of its NumPy half, a `protocol.Mechanism`; that
module names its TFF half (`Mechanism.tff_half`). Adding a mechanism is its
two modules and one line here; nothing else in the package branches on a
name (tests/test_mechanism_names.py reads the code for it;
docs/guide/mechanisms.md).
"""

from __future__ import annotations

import importlib
from typing import Any

from tff_canary.stats import validation

MECHANISMS = {
    "gaussian": "tff_canary.harness.mechanisms.gaussian",  # DP-FedAvg
    "ddp": "tff_canary.harness.mechanisms.ddp",  # TFF's distributed DP
    "tree": "tff_canary.harness.mechanisms.tree",  # DP-FTRL's tree
    "banded": "tff_canary.harness.mechanisms.banded",  # banded DP-FTRL
    "blt": "tff_canary.harness.mechanisms.blt",  # BLT DP-FTRL
}
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
  module = importlib.import_module(MECHANISMS[name])
  mechanism = module.MECHANISM
  if mechanism.name != name:
    raise ValueError(f"{MECHANISMS[name]}.MECHANISM is named "
                     f"{mechanism.name!r}, registered as {name!r}.")
  return mechanism


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
      raise ValueError(f"{MECHANISMS[name]}.MECHANISM ({name!r}) declares no "
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


__all__ = ["DEFAULT", "MECHANISMS", "get", "helps", "names", "of_config",
           "setting_keys", "settings"]
