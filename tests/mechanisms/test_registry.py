"""A mechanism is its modules and one registry line (issue 27).

`registry.MECHANISMS` is the only place mechanism names are spelled
(tests/project/test_mechanism_names.py greps for the rest). Here: the registry's
own checks, and a test mechanism (tests/mechanism_example/, Gaussian
noise with a different claim and one setting of its own) that is added by
one registry line and runs an experiment end to end, with its setting a
config field and its claim in the report, touching nothing else.
"""

import dataclasses
import importlib.util
import json
import os
import pathlib
import re
import subprocess
import sys
import types

import pytest

import repo_paths
from tff_canary.harness.config import experiment_config
from tff_canary.mechanisms import protocol
from tff_canary.mechanisms import registry
from tff_canary.mechanisms.ddp import spec as ddp
from tff_canary.mechanisms.tree import spec as tree
from tff_canary.stats.accounting import gaussian_accounting

TESTS = repo_paths.TESTS
EXPERIMENTS = TESTS.parent / "experiments"


def test_every_registered_mechanism_is_named_as_registered():
  for name in registry.names():
    mechanism = registry.get(name)
    assert isinstance(mechanism, protocol.Mechanism)
    assert mechanism.name == name
    # Its package holds its TFF half (found, not imported: no TensorFlow
    # here).
    assert importlib.util.find_spec(
        f"{registry.MECHANISMS[name]}.tff") is not None, name


def test_every_registered_mechanism_declares_its_own_help_line():
  helps = registry.helps()
  assert tuple(helps) == registry.names()
  for name, text in helps.items():
    assert type(registry.get(name)).__dict__["help"].strip() == text, name
  # Its own: no two mechanisms share a line (a subclass's inherited one).
  assert len(set(helps.values())) == len(helps)


def test_a_mechanism_without_its_own_help_line_is_refused(monkeypatch):
  @dataclasses.dataclass(frozen=True)
  class Unexplained(tree.TreeMechanism):  # would inherit the tree's line
    name = "unexplained"

  _registered(monkeypatch, "unexplained", Unexplained())
  with pytest.raises(ValueError, match=r"test_mechanism_unexplained\.spec\.MECHANISM "
                     r"\('unexplained'\) declares no help line of its own"):
    registry.helps()


def test_an_unknown_mechanism_is_refused_by_name():
  with pytest.raises(ValueError, match="aggregator.*'dp_sgd'"):
    registry.get("dp_sgd")
  with pytest.raises(ValueError, match="config.json's aggregator.*'x'"):
    registry.of_config({"aggregator": "x"})
  with pytest.raises(ValueError, match="aggregator"):
    experiment_config.ExperimentConfig(aggregator="dp_sgd")


def _registered(monkeypatch, key, mechanism):
  """Registers `mechanism` under `key` for one test (a package of its own,
  whose `spec` module holds it)."""
  package = types.ModuleType(f"test_mechanism_{key}")
  package.__path__ = []
  spec = types.ModuleType(f"{package.__name__}.spec")
  spec.MECHANISM = mechanism
  monkeypatch.setitem(sys.modules, package.__name__, package)
  monkeypatch.setitem(sys.modules, spec.__name__, spec)
  monkeypatch.setitem(registry.MECHANISMS, key, package.__name__)


def test_a_setting_two_mechanisms_own_is_refused(monkeypatch):
  @dataclasses.dataclass(frozen=True)
  class Twin(protocol.Mechanism):
    name = "twin"
    settings = dict(ddp_bits=ddp.SETTINGS["ddp_bits"])

  _registered(monkeypatch, "twin", Twin())
  with pytest.raises(ValueError, match="setting 'ddp_bits' of aggregator="
                     "'twin' is another mechanism's too"):
    registry.settings()


def test_a_mechanism_registered_under_another_name_is_refused(monkeypatch):
  @dataclasses.dataclass(frozen=True)
  class Misnamed(protocol.Mechanism):
    name = "gaussian_copy"

  _registered(monkeypatch, "misnamed", Misnamed())
  with pytest.raises(ValueError, match="named 'gaussian_copy', registered as "
                     "'misnamed'"):
    registry.get("misnamed")


def test_a_mechanism_without_a_framework_half_is_refused_by_name(monkeypatch):
  # A package with its NumPy half only: asking for its TFF half names the
  # module it lacks; an unknown framework is refused by name.
  @dataclasses.dataclass(frozen=True)
  class NumpyOnly(protocol.Mechanism):
    name = "numpy_only"

  _registered(monkeypatch, "numpy_only", NumpyOnly())
  assert registry.get("numpy_only").name == "numpy_only"
  with pytest.raises(ValueError, match=r"aggregator 'numpy_only' has no tff "
                     r"half \(test_mechanism_numpy_only\.tff does not exist"):
    registry.half("numpy_only", "tff")
  with pytest.raises(ValueError, match="framework.*'jax'"):
    registry.half("gaussian", "jax")


def test_a_config_without_the_key_is_the_default_mechanism():
  assert registry.of_config({}).name == registry.DEFAULT
  assert registry.of_config({"aggregator": None}).name == registry.DEFAULT


def test_each_setting_is_a_config_field_owned_by_one_mechanism():
  fields = experiment_config.ExperimentConfig.__dataclass_fields__
  for key in registry.setting_keys():
    assert key in fields and fields[key].default is None, key


# One line in the registry; the experiment, config.json, the flags' fields
# and the report are the package's own. A subprocess, so the registry line
# is added before the config class is built (as it is in registry.py).
SCRIPT = """
import json, sys
sys.path.insert(0, sys.argv[1])
from tff_canary.mechanisms import registry
registry.MECHANISMS["scaled_claim_gaussian"] = "mechanism_example"
from tff_canary.harness.config import experiment_config
try:
  experiment_config.ExperimentConfig(claim_noise_scale=2.0)
except ValueError as e:
  refused = str(e)
from tff_canary.harness.runner import experiment
config = experiment_config.ExperimentConfig(
    aggregator="scaled_claim_gaussian", claim_noise_scale=2.0,
    output_dir=sys.argv[2], num_rounds=2, clients_per_round=8,
    examples_per_client=4, num_inserted=4, num_held_out=4, eval_every=0,
    checkpoint_every=1, eval_examples=16, allow_large_canary_fraction=True,
    noise_multiplier=0.5, clip=0.1)
import small_model  # the tests' small CNN: the claim is what is tested
with small_model.emnist_cnn():
  report = experiment.run_experiment(config, progress=False,
                                     log=lambda m: None)
print(json.dumps(dict(refused=refused, claim=report.claim,
                      headline=report.terminal_text())))
"""


@pytest.mark.tff  # imports TensorFlow when it runs
def test_a_new_mechanism_is_its_package_and_one_registry_line(tmp_path):
  out = tmp_path / "run"
  proc = subprocess.run(
      [sys.executable, "-c", SCRIPT, str(TESTS), str(out)],
      capture_output=True, text=True, timeout=600,
      env=dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3"))
  assert proc.returncode == 0, proc.stderr[-3000:]
  result = json.loads(proc.stdout.strip().splitlines()[-1])
  assert result["refused"] == ("claim_noise_scale=2.0 is for aggregator="
                               "'scaled_claim_gaussian'; got aggregator="
                               "'gaussian'.")
  config = json.loads((out / "config.json").read_text())
  assert config["aggregator"] == "scaled_claim_gaussian"
  assert config["claim_noise_scale"] == 2.0
  saved = json.loads((out / "report.json").read_text())
  # The claim is the test mechanism's: z x 2 = 1.0, one participation.
  expected = gaussian_accounting.gaussian_epsilon(1.0, config["delta"])
  assert saved["analytical"]["one participation"] == pytest.approx(
      expected, rel=1e-12)
  assert result["claim"].startswith("analytical ε (scaled claim) (")
  assert saved["claim"] == result["claim"]
  # The rest is the package's own report, with the run's noise self-test.
  assert saved["noise_check"]["passed"] in (True, False)
  assert "analytical ε" in result["headline"]


# The experiments' --help with the test mechanism registered by its one line
# (before the flags are defined, as in registry.py).
HELP_SCRIPT = """
import runpy, sys
sys.path[:0] = [sys.argv[1], sys.argv[2]]
from tff_canary.mechanisms import registry
registry.MECHANISMS["scaled_claim_gaussian"] = "mechanism_example"
sys.argv = [sys.argv[3], "--help"]
runpy.run_path(sys.argv[0], run_name="__main__")
"""


def _flag_help(text, flag):
  """The help of `--flag` in the experiments' --help, whitespace joined."""
  block = re.search(rf"^  --{flag}: (.*?)(?=^  --|^\S|\Z)", text,
                    re.M | re.S)
  assert block, flag
  return " ".join(block[1].split())


def test_a_registered_mechanism_has_its_line_in_the_experiments_help():
  script = EXPERIMENTS / "emnist.py"
  proc = subprocess.run(
      [sys.executable, "-c", HELP_SCRIPT, str(TESTS), str(EXPERIMENTS),
       str(script)], capture_output=True, text=True, timeout=120)
  assert proc.returncode == 0, proc.stderr[-3000:]
  shown = _flag_help(proc.stdout, "aggregator")
  sys.path.insert(0, str(TESTS))
  try:
    from mechanism_example import spec as mechanism_example  # pylint: disable=g-import-not-at-top
  finally:
    sys.path.remove(str(TESTS))
  lines = dict(registry.helps(),
               scaled_claim_gaussian=mechanism_example.MECHANISM.help)
  # Every mechanism's own line, in registry order, the new one last.
  expected = "The DP aggregator, one of: " + " ".join(
      f"{name}: {text}" for name, text in lines.items())
  assert shown == expected + " (default: 'gaussian')"
  assert _flag_help(proc.stdout, "claim_noise_scale") == (
      "The claim's noise multiplier over the real one.")
