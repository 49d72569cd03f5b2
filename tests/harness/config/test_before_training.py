"""What a DP-FTRL command is told before training: the audit's reach
against the claim (a warning naming the candidates needed), and a claim that
cannot be computed (refused), both from the settings alone (no TensorFlow).
"""

from __future__ import annotations

import ast
import pathlib
import re
import warnings

import pytest

import repo_paths
from tff_canary.harness.config import experiment_config
from tff_canary.harness.config import model_sizes
from tff_canary.harness.config import preflight

ROOT = repo_paths.REPO
GUIDE = ROOT / "docs" / "guide" / "experiments.md"


def _script_defaults() -> dict:
  """experiments/emnist.py's flag defaults (its `define_flags` call)."""
  tree = ast.parse((ROOT / "experiments" / "emnist.py").read_text())
  (call,) = [node for node in ast.walk(tree) if isinstance(node, ast.Call)
             and getattr(node.func, "attr", "") == "define_flags"]
  return {k.arg: ast.literal_eval(k.value) for k in call.keywords
          if k.arg != "output_dir"}


def _planned(**flags):
  """The reach of `experiments/emnist.py` with these flags, as
  `experiment.run_experiment` computes it before training (synthetic
  EMNIST's sizes)."""
  config = experiment_config.ExperimentConfig(**{**_script_defaults(),
                                                 **flags})
  resolved = experiment_config.resolve(
      config, config.num_clients or experiment_config.default_num_clients(
          config), model_sizes.task_dim(config.task))
  canaries = experiment_config.run_canaries(resolved.values,
                                            resolved.canary_schedule)
  return preflight.audit_reach(
      config, num_rounds=resolved.num_rounds,
      rounds_per_epoch=resolved.sampler.rounds_per_epoch,
      delta=resolved.values["delta"], inserted=canaries.inserted)


def _value(text):
  for kind in (int, float):
    try:
      return kind(text)
    except ValueError:
      pass
  return text


def test_worst_case_placement_beyond_reach_is_warned_with_the_candidates():
  # The command: a cyclic BLT of 40 rounds, 4 epochs of 10, z = 1
  # (claim 14.97) with the default 80 candidates, which reach 8.37.
  with pytest.warns(preflight.BeyondReachWarning) as caught:
    reach = _planned(aggregator="blt", clip=0.1, sampling="cyclic",
                     presentations=4, noise_multiplier=1.0, num_rounds=40,
                     placement="worst_case")
  assert reach.beyond and reach.candidates == 80
  assert reach.claimed_epsilon == pytest.approx(14.97, abs=0.005)
  text = str(caught[0].message)
  assert text.startswith("--placement=worst_case puts every canary on the "
                         "accounting's worst case so that the audit faces "
                         "the analytical ε = 14.97, but these 80 candidates "
                         "can refute claims up to ε = 8.371")
  assert ("use about 640 candidates (--num_inserted=320 --num_held_out=320)"
          in text)
  # With them the claim is within reach, and nothing is said.
  with warnings.catch_warnings():
    warnings.simplefilter("error", preflight.BeyondReachWarning)
    more = _planned(aggregator="blt", clip=0.1, sampling="cyclic",
                    presentations=4, noise_multiplier=1.0, num_rounds=40,
                    placement="worst_case", num_inserted=320,
                    num_held_out=320, allow_large_canary_fraction=True)
  assert not more.beyond and more.epsilon > more.claimed_epsilon


def test_the_guide_s_worst_case_command_reaches_its_claim():
  text = GUIDE.read_text(encoding="utf-8")
  (command,) = [line for line in text.splitlines()
                if line.startswith("    .venv/bin/python experiments/emnist.py")
                and "--placement=worst_case" in line]
  flags = dict(re.findall(r"--(\w+)=(\S+)", command))
  flags.pop("output_dir", None)  # given as --output_dir DIR
  with warnings.catch_warnings():
    warnings.simplefilter("error", preflight.BeyondReachWarning)
    reach = _planned(**{k: _value(v) for k, v in flags.items()})
  assert not reach.beyond, reach


def test_random_placement_beyond_reach_warns_that_the_estimates_still_run():
  # The cyclic BLT with canaries placed as the clients are.
  with pytest.warns(preflight.BeyondReachWarning,
                    match=r"the report's audit tests the analytical ε = "
                    r"14.97, .* the estimates still run; use about"):
    _planned(aggregator="blt", clip=0.1, sampling="cyclic", presentations=4,
             noise_multiplier=1.0, num_rounds=40)


def test_the_gaussian_audit_has_no_reach_to_warn_of():
  with warnings.catch_warnings():
    warnings.simplefilter("error", preflight.BeyondReachWarning)
    assert _planned() is None


def test_a_non_monotone_blt_without_restarts_is_refused_before_training():
  # Coefficients that rise (a negative output scale) have no structural
  # worst case; enumeration stops at 20 rounds: the claim of 40 cyclic
  # rounds cannot be computed, which the settings alone show.
  settings = dict(aggregator="blt", clip=0.1, sampling="cyclic",
                  presentations=4, num_rounds=40, noise_multiplier=1.0,
                  blt_output_scale="0.5,-0.2", blt_buf_decay="0.9,0.5")
  with pytest.raises(ValueError, match=(
      r"aggregator='blt' \(--aggregator=blt\) with sampling='cyclic' "
      r"\(--sampling=cyclic\) over 40 rounds has no claim: coefficients must "
      r"be nonnegative and non-increasing.*enumeration needs rounds <= 20, "
      r"got 40\..*--sampling=shuffle")):
    _planned(**settings)
  # Restarted every epoch (shuffle) its claim is exact for any strategy, and
  # 20 cyclic rounds are enumerated (their reach is not the point here).
  with warnings.catch_warnings():
    warnings.simplefilter("ignore", preflight.BeyondReachWarning)
    _planned(**dict(settings, sampling="shuffle"))
    _planned(**dict(settings, num_rounds=20))
