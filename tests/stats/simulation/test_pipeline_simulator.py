"""Tests of stats.pipeline_simulator (and stats.discrete_noise's Skellam).

Single runs at fixed seeds: each planted bug must show in the component that
the module docstring says sees it, and not in the others; the rates over many
seeds are measured by bench/pipeline_audit.py, not here.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from tff_canary.stats.simulation import pipeline_simulator as sim

Z = 4.0  # claim epsilon ~ 1 at delta 1e-5 with 16 bits


def one_round(config, vectors, seed=0):
  rng = np.random.default_rng(seed)
  return sim.pipeline_round(rng, config, config.parameters(), vectors)


def unit(rng, rows, dim):
  g = rng.standard_normal((rows, dim))
  return g / np.linalg.norm(g, axis=1, keepdims=True)


def test_without_noise_the_round_is_the_clipped_sum_up_to_rounding():
  config = sim.PipelineConfig(noise_multiplier=0.0, bits=22, dim=256,
                              participants=8)
  rng = np.random.default_rng(1)
  vectors = unit(rng, 8, 256) * np.array([[0.5], [3.0]] * 4)
  out, wrapped = one_round(config, vectors)
  norms = np.linalg.norm(vectors, axis=1, keepdims=True)
  clipped = (vectors * np.minimum(1.0, 1.0 / norms)).sum(axis=0)
  gamma = config.parameters().gamma
  # Randomized rounding moves each coordinate by less than gamma per client.
  assert wrapped == 0
  assert np.max(np.abs(out - clipped)) < 8 * gamma
  assert np.max(np.abs(out - clipped)) > 0  # it does round


def test_the_clip_bug_lets_a_large_update_through():
  # Noise multiplier 1 gives the modulus room for a 10 C update (with no
  # noise the scale is sized for C and the bug's update would wrap); the
  # projection on the update's direction is its clipped norm + N(0, 1).
  rng = np.random.default_rng(2)
  direction = unit(rng, 1, 512)
  for bug, expected in (("none", 1.0), ("clip", 10.0)):
    config = sim.PipelineConfig(noise_multiplier=1.0, bits=20, dim=512,
                                participants=1, bug=bug, bug_size=10.0)
    out, wrapped = one_round(config, direction * 100.0)
    assert wrapped == 0
    assert abs(out @ direction[0] - expected) < 4.0  # 4 noise stds


def test_noise_std_is_the_claim_and_falls_with_the_shortfall():
  zeros = np.zeros((40, 4096))
  for k in (1.0, 4.0):
    bug = "shortfall" if k > 1 else "none"
    config = sim.PipelineConfig(noise_multiplier=2.0, bug=bug, bug_size=k)
    out, _ = one_round(config, zeros)
    # Claimed central std z C = 2; the shortfall leaves 1/sqrt(k) of it.
    # 4096 values: the std's sampling error is ~1.1%, so 5% is > 4 SEs.
    assert np.std(out) == pytest.approx(2.0 / math.sqrt(k), rel=0.05)


def test_discrete_gaussian_shares_sum_to_the_claimed_std():
  config = sim.PipelineConfig(noise_multiplier=2.0, participants=5,
                              mechanism="distributed_dgauss", dim=4096)
  out, _ = one_round(config, np.zeros((5, 4096)))
  p = config.parameters()
  assert np.std(out) == pytest.approx(p.total_noise_std() / p.scale,
                                      rel=0.05)


def test_reuse_repeats_the_first_tensors_noise():
  config = sim.PipelineConfig(noise_multiplier=2.0, bug="reuse", dim=1024)
  out, _ = one_round(config, np.zeros((40, 1024)))
  np.testing.assert_array_equal(out[:512], out[512:])
  fine = sim.PipelineConfig(noise_multiplier=2.0, dim=1024)
  out, _ = one_round(fine, np.zeros((40, 1024)))
  assert abs(np.corrcoef(out[:512], out[512:])[0, 1]) < 0.2


def test_modular_wrapping_keeps_the_range_and_counts():
  # A small modclip_prob budget is exceeded by huge aligned client values.
  config = sim.PipelineConfig(noise_multiplier=0.5, bits=8, dim=64,
                              participants=40, modclip_prob=0.3)
  p = config.parameters()
  vectors = np.ones((40, 64)) / 8.0  # every client at the clip, aligned
  out, wrapped = one_round(config, vectors)
  assert wrapped > 0
  assert np.all(np.abs(out * p.scale) <= p.modulus / 2)


def test_conditional_rounding_respects_the_threshold():
  config = sim.PipelineConfig(noise_multiplier=1.0, bits=8, dim=1024,
                              beta=math.exp(-0.5), participants=40)
  p = config.parameters()
  rng = np.random.default_rng(4)
  scaled = unit(rng, 40, 1024) * p.scale
  rounded = sim._round(rng, scaled, p.inflated_l2 * p.scale)  # pylint: disable=protected-access
  assert np.all(np.linalg.norm(rounded, axis=1) <= p.inflated_l2 * p.scale)
  # Unconditional rounding is unbiased: the mean of many roundings is x.
  many = np.mean([sim._round(rng, scaled[:1], None) for _ in range(2000)],  # pylint: disable=protected-access
                 axis=0)
  # Each coordinate's mean of 2000 Bernoullis has std <= 0.5/sqrt(2000).
  assert np.max(np.abs(many - scaled[:1])) < 6 * 0.5 / math.sqrt(2000)


@pytest.fixture(scope="module")
def runs():
  out = {}
  for mode in sim.MODES:
    for bug, size in (("none", 1.0), ("clip", 10.0), ("shortfall", 4.0),
                      ("reuse", 1.0)):
      config = sim.PipelineConfig(noise_multiplier=Z, mode=mode, bug=bug,
                                  bug_size=size, dim=2048)
      out[mode, bug] = sim.simulate(config, seed=3)
  return out


@pytest.mark.parametrize("mode", sim.MODES)
def test_the_correct_pipeline_is_not_refuted(runs, mode):
  run = runs[mode, "none"]
  assert not run.detected, str(run)
  assert run.claimed.epsilon == pytest.approx(1.05, abs=0.1)


def test_only_client_canaries_see_the_clip_bug(runs):
  assert runs["client", "clip"].verdict.refuted
  assert runs["client", "clip"].noise_check.passed
  assert not runs["server", "clip"].verdict.refuted
  assert not runs["server", "clip"].detected


@pytest.mark.parametrize("mode", sim.MODES)
def test_the_self_test_sees_the_shortfall_and_the_reuse(runs, mode):
  assert "variance" in runs[mode, "shortfall"].noise_check.rejected_families()
  assert "prefix" in runs[mode, "reuse"].noise_check.rejected_families()
  assert not runs[mode, "reuse"].verdict.refuted  # canaries do not see it


def test_simulate_is_reproducible():
  config = sim.PipelineConfig(noise_multiplier=Z, dim=512, num_rounds=4,
                              num_candidates=100, participants=20)
  a, b = sim.simulate(config, 5), sim.simulate(config, 5)
  assert a.epsilon_all.epsilon == b.epsilon_all.epsilon
  assert a.verdict.largest_bound == b.verdict.largest_bound


@pytest.mark.parametrize("kwargs,error,match", [
    (dict(mode="edge"), ValueError, "mode"),
    (dict(bug="typo"), ValueError, "bug"),
    (dict(bug_size=0.5), ValueError, "bug_size"),
    (dict(dim=101), ValueError, "dim"),
    (dict(canary_norm=0.5), ValueError, "canary_norm"),
    (dict(num_rounds=0), ValueError, "num_rounds"),
    (dict(delta=0.0), ValueError, "delta"),
])
def test_bad_config(kwargs, error, match):
  with pytest.raises(error, match=match):
    sim.PipelineConfig(noise_multiplier=1.0, **kwargs)


def test_too_few_participants_for_the_canaries():
  config = sim.PipelineConfig(noise_multiplier=1.0, participants=5,
                              num_rounds=2, num_candidates=100, dim=256)
  with pytest.raises(ValueError, match="participants"):
    sim.simulate(config, 0)
  with pytest.raises(TypeError, match="config"):
    sim.simulate({"noise_multiplier": 1.0}, 0)
