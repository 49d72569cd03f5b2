"""The TF-free noise check (`tff_canary.stats.noise.noise_stats`, `noise_tests`).

Every planted pattern below is a defect a real noise implementation could
have; each test fails if the family meant to catch it loses its power (a
wrong null dimension, a one-sided p-value, a missed offset, a test skipped
for small tensors), and the calibration test fails if a p-value is not valid
under correct noise.
"""

import collections
import dataclasses
import json
import math
import os

import numpy as np
import pytest

from tff_canary.stats.noise import noise_stats
from tff_canary.stats.noise import noise_tests

NAMES = ("w1", "b1", "w2", "b2")
SHAPES = ((784, 128), (128,), (128, 5), (5,))
STD = (0.01, 0.02, 0.015, 0.01)  # per round, like a moving adaptive clip


def clean(seed, shapes=SHAPES, stds=STD):
  rng = np.random.default_rng([seed, 11])
  return [[(rng.standard_normal(int(np.prod(s))) * sd).astype(np.float32)
           for s in shapes] for sd in stds]


def check(noise, stds=STD, **kwargs):
  return noise_stats.check_noise(noise, stds, tensor_names=NAMES, **kwargs)


def test_correct_noise_passes():
  result = check(clean(0))
  assert result.passed and not result.failures and not result.degenerate
  assert str(result).startswith("noise check passed: 4 rounds x 4 tensors "
                                "(d=101125)")
  assert set(t.family for t in result.tests) == set(noise_tests.FAMILIES) - {
      "zero"}
  assert 0 < result.std_resolution < 0.01


def test_false_alarms_and_p_values_are_calibrated():
  # Small shapes (fast) with a 1-element and a short tensor. 300 seeds: at
  # level 0.001 the expected number of false alarms is 0.3, and P[Binomial(
  # 300, 0.001) >= 3] = 0.004, so 3 or more means the level does not hold.
  # Each family's p-values must be uniform: the fraction below 0.05 over all
  # its tests (900 to 9000 per family; tests within a trial are nearly
  # independent) must be within 0.05 +- 0.025, 3.4 standard errors at 900
  # tests (seeds fixed: measured 0.037 to 0.048); a wrong null dimension or
  # a one-sided p-value moves it far out.
  shapes = ((30, 40), (40,), (40, 7), (7,), (1,))
  below = collections.Counter()
  total = collections.Counter()
  alarms = 0
  for seed in range(300):
    result = noise_stats.check_noise(clean(seed, shapes), STD, seed=seed)
    alarms += not result.passed
    for t in result.tests:
      total[t.family] += 1
      below[t.family] += t.p_value < 0.05
  assert alarms <= 2
  for family in ("variance", "mean", "prefix", "rounds", "lag1"):
    assert total[family] >= 900, family
    assert abs(below[family] / total[family] - 0.05) < 0.025, family
  # 300 Gaussianity tests: 15 +- 3.8 below 0.05 expected.
  assert below["gaussian"] <= 30
  # By chance, consecutive float32 pairs essentially never repeat.
  assert below["reuse"] == 0


def rejected(result):
  return set(result.rejected_families())


def test_prefix_reuse_of_every_tensor_fails():
  # The reviewed bug: one seed for every tensor, so each is a prefix of w1.
  noise = clean(1)
  for r in noise:
    r[1], r[2], r[3] = r[0][:128].copy(), r[0][:640].copy(), r[0][:5].copy()
  result = check(noise)
  assert not result.passed
  assert {"prefix", "reuse"} <= rejected(result)
  assert result.test("prefix[w1,b1]").rejected
  assert result.test("prefix[w1,b2]").rejected
  assert "FAILED" in str(result) and "prefix" in str(result)


def test_prefix_reuse_of_a_5_element_tensor_alone_fails():
  noise = clean(2)
  for r in noise:
    r[3] = r[0][:5].copy()
  result = check(noise)
  assert not result.passed
  assert result.test("prefix[w1,b2]").rejected
  assert result.test("prefix[w1,b2]").statistic == pytest.approx(1.0)


def test_scaled_and_negated_prefix_reuse_fails():
  # Scaled (b1 = -w1[:128] with the right std, b2 = 0.3 w1[:5]): exact bit
  # reuse up to sign catches the negated one, the prefix cosine both.
  noise = clean(3)
  for r in noise:
    r[1] = -r[0][:128]
    r[3] = np.float32(0.3) * r[0][:5]
  result = check(noise)
  assert result.test("prefix[w1,b1]").rejected
  assert result.test("prefix[w1,b1]").statistic == pytest.approx(-1.0)
  assert result.test("prefix[w1,b2]").rejected
  assert result.test("reuse").rejected


@pytest.mark.parametrize("tensor, offset, length", [
    (1, 1000, 128), (3, 777, 5), (3, 3, 2)])
def test_slice_reuse_at_a_nonzero_offset_fails(tensor, offset, length):
  # Not a prefix, so the prefix cosine sees nothing; only exact reuse at any
  # offset can catch it. (3, 3, 2): a 2-value slice in every round, 4
  # repeats against ~0.004 by chance.
  noise = clean(4)
  for r in noise:
    r[tensor][:length] = r[0][offset:offset + length]
  result = check(noise)
  assert not result.passed
  assert result.test("reuse").rejected
  assert result.test("reuse").statistic >= 4 * (length - 1)
  assert f", {NAMES[tensor]}[" in result.test("reuse").detail  # an example
  assert not result.test(f"prefix[w1,{NAMES[tensor]}]").rejected


def test_slice_reuse_across_rounds_fails():
  noise = clean(5)
  noise[2][2][100:300] = noise[0][0][5000:5200]
  result = check(noise)
  assert result.test("reuse").rejected


@pytest.mark.parametrize("factor", [0.1, 10.0, 0.99])
def test_wrong_std_fails(factor):
  # 0.99: a 1% error on 404,500 values is 6.4 standard errors of the
  # pooled variance (sqrt(2/n) = 0.22%), beyond the resolution (~0.5%).
  noise = [[x * np.float32(factor) for x in r] for r in clean(6)]
  result = check(noise)
  assert "variance" in rejected(result)
  assert result.test("variance[all]").rejected


@pytest.mark.parametrize("factor, passed", [(0.1, False), (0.99, False),
                                            (1.02, True), (10.0, True)])
def test_only_less_noise_than_claimed_fails(factor, passed):
  # More noise than claimed costs utility, not privacy (distributed DP's
  # rounding adds some): its variance test is still rejected, but it is a
  # note, not a failure. Less noise fails. 1.02 on 404,500 values is 9
  # standard errors of the pooled variance, far beyond the resolution.
  noise = [[x * np.float32(factor) for x in r] for r in clean(6)]
  result = check(noise)
  assert result.test("variance[all]").rejected
  assert result.passed == passed and result.verdict == (
      "passed" if passed else "failed")
  if passed:
    assert result.notes[0].startswith("more noise than claimed")
    assert "costs utility, not privacy" in str(result)
    assert result.as_dict()["verdict"] == "passed"
  else:
    assert not result.notes and "FAILED" in str(result)


def test_more_noise_does_not_hide_reuse():
  noise = [[x * np.float32(3.0) for x in r] for r in clean(2)]
  for r in noise:
    r[1] = r[0][:r[1].size].copy()
  result = check(noise)
  assert not result.passed and "prefix" in rejected(result)


def test_one_round_with_wrong_std_fails():
  noise = clean(7)
  noise[2] = [x * np.float32(1.2) for x in noise[2]]
  result = check(noise)
  assert result.test("variance[round 2]").rejected
  assert not result.test("variance[round 1]").rejected


@pytest.mark.parametrize("scaled", [False, True])
def test_same_noise_every_round_fails(scaled):
  base = clean(8)[0]
  stds = STD if scaled else (STD[0],) * 4
  noise = [[x * np.float32(sd / STD[0]) for x in base] for sd in stds]
  result = check(noise, stds)
  assert "rounds" in rejected(result)
  assert result.test("rounds[w1:0,3]").rejected
  assert result.test("rounds[all:1,2]").statistic == pytest.approx(1.0)


def test_correlated_neighbours_fail():
  noise = clean(9)
  for r in noise:
    r[0] = ((r[0][:-1] + r[0][1:]) / np.sqrt(2)).astype(np.float32)
    r[0] = np.append(r[0], r[0][0])
  result = check(noise)
  assert result.test("lag1[w1]").rejected


def test_non_gaussian_noise_fails():
  # Uniform noise with the right variance: KS distance ~0.05 from N(0, 1),
  # sqrt(20000) x 0.05 = 7 gives p ~ 1e-40.
  rng = np.random.default_rng(10)
  noise = [[(rng.uniform(-1, 1, int(np.prod(s))) * math.sqrt(3) * sd
             ).astype(np.float32) for s in SHAPES] for sd in STD]
  result = check(noise)
  assert "gaussian" in rejected(result)
  assert not result.test("variance[all]").rejected


def test_biased_noise_fails():
  noise = [[x + np.float32(0.02 * sd) for x in r]
           for r, sd in zip(clean(11), STD)]
  result = check(noise)
  assert result.test("mean[w1]").rejected


def test_zero_noise_is_degenerate():
  zeros = [[np.zeros(int(np.prod(s)), np.float32) for s in SHAPES]] * 2
  result = check(zeros, 0.0)
  assert result.passed and result.degenerate
  assert "degenerate" in str(result) and "exactly zero" in str(result)
  assert json.loads(json.dumps(result.as_dict(), allow_nan=False))[
      "std_resolution"] is None
  zeros[1] = [x.copy() for x in zeros[1]]
  zeros[1][3][2] = 1e-9
  result = check(zeros, [0.0, 0.0])
  assert not result.passed and result.degenerate
  assert result.test("zero[round 1]").rejected
  assert "1 values are nonzero" in result.failures[0]


def test_a_round_claimed_zero_must_be_zero():
  noise = clean(12)
  stds = list(STD)
  stds[1] = 0.0
  result = check(noise, stds)
  assert not result.passed and not result.degenerate
  assert result.test("zero[round 1]").rejected
  noise[1] = [np.zeros_like(x) for x in noise[1]]
  assert check(noise, stds).passed


def test_result_is_frozen_and_serializable():
  result = check(clean(13), level=0.01, seed=3, subsample=500)
  with pytest.raises(dataclasses.FrozenInstanceError):
    result.passed = False
  data = json.loads(json.dumps(result.as_dict()))
  assert data["level"] == 0.01 and data["seed"] == 3
  assert data["tensor_sizes"] == [100352, 128, 640, 5]
  assert data["summary"] == str(result)
  assert len(data["tests"]) == len(result.tests)
  assert result.test("gaussian").detail.endswith("500 standardized values "
                                                 "from N(0, 1)")
  with pytest.raises(KeyError, match="no test named 'nope'"):
    result.test("nope")


@pytest.mark.parametrize("noise, stds, kwargs, error, match", [
    (np.zeros((2, 3)), 1.0, {}, TypeError, "noise must be a sequence"),
    ([], 1.0, {}, ValueError, r"noise must hold at least one round"),
    ([[np.zeros(3)], [np.zeros(4)]], 1.0, {}, ValueError,
     r"noise\[1\] has \(4,\)"),
    ([[np.array([1.0, np.nan])]], 1.0, {}, ValueError,
     r"noise\[0\]\[0\]\[1\] = nan"),
    ([[np.array(["a"])]], 1.0, {}, TypeError, r"noise\[0\]\[0\] must hold"),
    ([[np.ones(3)]], -1.0, {}, ValueError, r"claimed_std\[0\] must be "
     r"nonnegative, got -1.0"),
    ([[np.ones(3)]] * 2, [1.0], {}, ValueError, r"one value per round \(2\)"),
    ([[np.ones(3)]], "1", {}, TypeError, "claimed_std"),
    ([[np.ones(3)]], 1.0, dict(level=0.0), ValueError, "level"),
    ([[np.ones(3)]], 1.0, dict(subsample=5), ValueError, "subsample"),
    ([[np.ones(3)]], 1.0, dict(tensor_names=["a", "b"]), ValueError,
     "tensor_names must be 1 strings"),
    ([[np.ones(3)], [np.ones(3)]], 1.0, dict(seed=-1), ValueError, "seed"),
])
def test_bad_input_names_the_argument(noise, stds, kwargs, error, match):
  with pytest.raises(error, match=match):
    noise_stats.check_noise(noise, stds, **kwargs)


def test_duplicate_tensor_names_are_refused():
  with pytest.raises(ValueError, match="distinct"):
    noise_stats.check_noise([[np.ones(3), np.ones(2)]], 1.0,
                            tensor_names=["a", "a"])


def test_the_report_shows_the_verdict(tmp_path):
  # The experiment writes noise_check.json before training; the TF-free
  # report carries it (report.json key, one line in report.md and the table).
  from fake_runs import make_run  # pylint: disable=g-import-not-at-top
  from tff_canary.stats import atomic_files  # pylint: disable=g-import-not-at-top
  from tff_canary.harness.reporting import report
  from tff_canary.harness.recording import run_dir
  path = make_run(tmp_path / "run")
  assert report.build_report(path).noise_check is None
  noise = clean(14)
  for r in noise:
    r[3] = r[0][:5].copy()
  result = check(noise)
  atomic_files.write_json(os.path.join(path, run_dir.NOISE_CHECK),
                          result.as_dict())
  r = report.build_report(path)
  line = str(result)
  assert r.noise_check["passed"] is False and r.noise_check_line() == line
  assert line in r.table_text().splitlines()
  assert f"**{line}**" in r.to_markdown().splitlines()
  report.write_report(r, plots=False)
  data = json.load(open(os.path.join(path, run_dir.REPORT_JSON)))
  assert data["noise_check"]["summary"] == str(result)
  with open(os.path.join(path, run_dir.NOISE_CHECK), "w") as f:
    f.write("{broken")
  with pytest.raises(run_dir.RunDirError, match="noise_check.json is not "
                     "valid JSON"):
    report.build_report(path)


def test_std_resolution_is_the_error_detected_half_the_time():
  # The summary's "resolves the std to ±r": a std off by a factor 1 + r is
  # caught by variance[all] with probability about 1/2 (by construction of
  # r from the Bonferroni critical value c, about 4 sd of the statistic),
  # 1 + 2r almost always (mean c beyond the threshold), 1 + r/4 rarely (3c/4
  # short of it). Forty seeds each: the 1/2 case has sd 0.08, so [0.25,
  # 0.75] is 3 sd either side; an r off by 2x in either direction fails.
  shapes = ((200, 50), (50,))
  resolution = noise_stats.check_noise(clean(0, shapes), STD).std_resolution
  rates = {}
  for multiple in (0.25, 1.0, 2.0):
    hits = 0
    for seed in range(40):
      noise = [[x * np.float32(1 + multiple * resolution) for x in r]
               for r in clean(100 + seed, shapes)]
      hits += noise_stats.check_noise(noise, STD).test(
          "variance[all]").rejected
    rates[multiple] = hits / 40
  assert rates[0.25] <= 0.05 and rates[2.0] >= 0.95, rates
  assert 0.25 <= rates[1.0] <= 0.75, rates


def test_noise_stats_does_not_import_tensorflow():
  # The statistics layer is NumPy/SciPy only (the report reads its results
  # without TensorFlow); fails if any import pulls TF in.
  import subprocess  # pylint: disable=g-import-not-at-top
  import sys  # pylint: disable=g-import-not-at-top
  code = ("import sys, tff_canary.stats.noise.noise_stats\n"
          "bad = [m for m in ('tensorflow', 'tensorflow_federated') "
          "if m in sys.modules]\n"
          "sys.exit(bool(bad))\n")
  proc = subprocess.run([sys.executable, "-c", code], capture_output=True,
                        text=True, timeout=120)
  assert proc.returncode == 0, proc.stderr[-2000:]
