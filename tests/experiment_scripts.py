"""The scripts of experiments/, as files to run and as modules to test."""

import importlib.util
import pathlib

EXPERIMENTS = pathlib.Path(__file__).resolve().parents[1] / "experiments"


def path(name: str) -> pathlib.Path:
  """experiments/<name>.py."""
  return EXPERIMENTS / f"{name}.py"


def load(name: str, module_name: str):
  """experiments/<name>.py imported as `module_name` (its
  `if __name__ == "__main__":` part is not run)."""
  spec = importlib.util.spec_from_file_location(module_name, path(name))
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  return module
