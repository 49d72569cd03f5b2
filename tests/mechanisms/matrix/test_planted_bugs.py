"""Matrix-factorization DP-FTRL's planted bugs in TFF, and their audit.

`matrix_planted_bugs` writes each bug of `planted_strategies` as a user-side
subclass of `matrix_query.MatrixFactorizationQuery`. First, each query's
released noise is checked against the NumPy description of the bug,
`planted_strategies.planted_noise`, applied to the same seeded fresh noise
(float32 recurrences against float64 products: |w| ~ 1, errors ~ 1e-6, so
atol 2e-5). Then `planted_bug_runs.run` runs a BLT run
(`matrix_planted.MatrixBugRunConfig`: 3 epochs x 16 rounds, 512 fair-coin
orthogonal candidates, d = 1024, z = 1, fixed seeds) per bug and audits it
with `tree_audit.audit_ftrl`; every outcome is fixed by the seeds and the
comments say how far each is from its threshold.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from tff_canary.harness.runner import planted_bug_runs as runs
from tff_canary.mechanisms.matrix import planted as matrix_planted
from tff_canary.mechanisms.matrix import planted_bugs as matrix_planted_bugs
from tff_canary.stats.matrix import blt as blt_lib
from tff_canary.stats.matrix import toeplitz
from mechanisms.matrix import test_query as query_tests  # pylint: disable=g-bad-import-order

pytestmark = pytest.mark.tff

STRATEGIES = {"banded": dict(coefficients=toeplitz.square_root_coefficients(3)),
              "blt": dict(strategy=blt_lib.blt([0.3, 0.15], [0.9, 0.4]))}
ARGUMENTS = {"buffers_reset": [dict(reset_every=1), dict(reset_every=2)],
             "coefficient_scale": [dict(factor=0.5), dict(factor=3.0)],
             "noise_reuse": [dict(lag=3), dict(lag=7)], "none": [{}]}


@pytest.mark.parametrize("kind", STRATEGIES)
@pytest.mark.parametrize("bug, arguments", [
    (bug, a) for bug, each in ARGUMENTS.items() for a in each])
def test_each_query_releases_the_planted_noise(kind, bug, arguments):
  rounds, clip, z, seed = 12, 0.5, 2.0, 7
  aggregation = matrix_planted_bugs.PlantedMatrixAggregation(
      z, clip, restart_every=5, noise_seed=seed, bug=bug,
      **STRATEGIES[kind], **arguments)
  released, _ = query_tests._released_rows(
      aggregation.sum_query(query_tests.SPECS), rounds)
  xi = query_tests._fresh_rows(clip, z, seed, rounds)
  planted = aggregation.released_noise(rounds)
  np.testing.assert_allclose(released, planted.released @ xi, atol=2e-5)
  claimed = aggregation.noise(rounds)
  if bug != "none":  # the claim stays the correct strategy's
    assert np.max(np.abs(released - claimed.released @ xi)) > 0.05


def test_planted_aggregation_refuses_what_it_cannot_plant():
  strategy = STRATEGIES["blt"]
  with pytest.raises(ValueError, match="restart_every and noise_seed"):
    matrix_planted_bugs.PlantedMatrixAggregation(
        1.0, 1.0, restart_every=8, bug="noise_reuse", **strategy)
  with pytest.raises(ValueError, match="reset_every must be below "
                     "restart_every = 8, got 8"):
    matrix_planted_bugs.PlantedMatrixAggregation(
        1.0, 1.0, restart_every=8, noise_seed=1, bug="buffers_reset",
        reset_every=8, **strategy)
  with pytest.raises(ValueError, match="bug"):
    matrix_planted_bugs.PlantedMatrixAggregation(
        1.0, 1.0, restart_every=8, noise_seed=1, bug="missing_level",
        **strategy)
  with pytest.raises(ValueError, match="bug 'noise_reuse' is planted in the "
                     "'banded' or 'blt' aggregator"):
    runs.BugRunConfig(bug="noise_reuse")


# The check bench/matrix_audit.py sees fire for each bug.
EXPECTED = {"buffers_reset": "self-test", "coefficient_scale": "self-test",
            "noise_reuse": "self-test", "double_participation": "contribution"}


@pytest.mark.parametrize("bug", ["none"] + list(EXPECTED))
def test_each_bug_is_caught_by_its_check_and_the_correct_blt_passes(bug):
  result = runs.run(matrix_planted.MatrixBugRunConfig(bug=bug, seed=7))
  audit = result.verdict
  print(result)  # the p-values, for the report (pytest -s)
  if bug == "none":
    # All three checks pass at family-wise level 0.05 (each at 0.05 / 3).
    assert not audit.refuted, str(audit)
    assert result.noise_check.passed and not result.detected
    return
  assert EXPECTED[bug] in audit.caught_by, str(audit)
  # Not marginal: the deciding p-value is below 1e-6, against 0.05 / 3.
  if EXPECTED[bug] == "self-test":
    assert min(t.p_value for t in audit.self_test.tests) < 1e-6
  else:
    assert audit.contribution_p_value < 1e-6
    assert audit.self_test.passed  # the noise is correct


def test_matrix_runs_are_the_correlated_family_s_not_the_tree_s():
  # Banded and BLT compose the correlated family's runs; neither they nor
  # their config subclass the tree's (issue 35), so a matrix config cannot
  # carry a tree run, and has no tree setting (`efficient`).
  from tff_canary.mechanisms.correlated import planted as correlated_planted  # pylint: disable=g-import-not-at-top
  from tff_canary.mechanisms.tree import planted as tree_planted  # pylint: disable=g-import-not-at-top
  assert not issubclass(matrix_planted.MatrixBugRunConfig,
                        tree_planted.TreeBugRunConfig)
  assert not isinstance(matrix_planted.PLANTED_BUGS, tree_planted.TreePlanted)
  assert issubclass(matrix_planted.MatrixBugRunConfig,
                    correlated_planted.CorrelatedBugRunConfig)
  assert "efficient" not in {
      f.name for f in dataclasses.fields(matrix_planted.MatrixBugRunConfig)}
  with pytest.raises(TypeError, match="runs of aggregator 'tree' take a "
                     "TreeBugRunConfig"):
    matrix_planted.MatrixBugRunConfig(aggregator="tree")
