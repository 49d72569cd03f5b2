"""Each planted DP bug in a real TFF run, caught (or not) by the tool (issue 10).

`tff_canary.harness.runner.planted_bug_runs.run` trains a 2-layer MLP
(d = 2410) with a `tff.learning` process for a few rounds and applies the
audit (95%) and the noise self-test. The runs here are small (20
participants, 4 rounds, 100 coin-flipped candidates, so about 12 canary
clients a round) to keep the file near a minute; `experiments/planted_bugs.py` is the full-size table.

Seeds: the central-DP runs are deterministic (seeded data, canaries and
`seeded_query` noise). TFF's distributed Skellam query and its DFT rotation
seed themselves from `tf.timestamp()`, so the DDP runs are not: their
assertions are ones whose failure probability is stated in a comment.
"""

from __future__ import annotations

import dataclasses
import sys
import types
import warnings

import numpy as np
import pytest
import tensorflow as tf
import tensorflow_federated as tff
from tensorflow_federated.python.aggregators import discretization
from tensorflow_federated.python.aggregators import distributed_dp

import experiment_scripts
from tff_canary.federated.audit import noise_check
from tff_canary.harness.runner import planted_bug_runs as runs
from tff_canary.mechanisms import protocol_tff
from tff_canary.mechanisms import registry
from tff_canary.mechanisms.ddp import chain as ddp_chain
from tff_canary.mechanisms.ddp import noise_check as ddp_noise_check
from tff_canary.mechanisms.ddp import planted_bugs
from tff_canary.mechanisms.gaussian import planted as gaussian_planted
from tff_canary.mechanisms.gaussian import planted_bugs as gaussian_planted_bugs
from tff_canary.mechanisms.gaussian import spec as gaussian
from tff_canary.mechanisms.gaussian import tff as gaussian_tff
from tff_canary.stats.accounting import ddp_parameters

pytestmark = pytest.mark.tff

SMALL = dict(clients_per_round=20, num_rounds=4, num_candidates=100, seed=3)


@pytest.fixture(scope="module", name="clip_runs")
def fixture_clip_runs():
  return {mode: runs.run(runs.BugRunConfig(bug="clip", bug_size=10.0,
                                           mode=mode, **SMALL))
          for mode in ("client", "server")}


def _second_draw_if_flagged(draw, flagged):
  """[draw()], or two draws when the first is `flagged`: for the unseeded
  DDP checks, whose chance flags a second, independent draw tells apart
  from a tool that always flags."""
  draws = [draw()]
  if flagged(draws[0]):
    draws.append(draw())
  return draws


def test_clip_bug_is_refuted_by_canary_clients_not_server_canaries(
    clip_runs):
  client, server = clip_runs["client"], clip_runs["server"]
  # The claim is z = 4's epsilon (0.93 at 1e-5); clipping at 10 C makes the
  # effective noise multiplier 0.4. Seeded run: deterministic.
  assert client.verdict.refuted, client
  assert client.detected
  # Server-side canaries enter at the C the query reports: no refutation,
  # and the noise itself is right, so the self-test passes too.
  assert not server.verdict.refuted, server
  assert server.noise_check.passed and client.noise_check.passed
  assert not server.detected


def test_correct_central_aggregator_is_not_refuted():
  run = runs.run(runs.BugRunConfig(**SMALL))  # seeded: deterministic
  assert not run.verdict.refuted, run
  assert run.noise_check.passed, run
  assert not run.detected


def test_ddp_shortfall_is_caught_by_the_self_test_and_correct_ddp_is_not():
  shortfall = runs.run(runs.BugRunConfig(bug="shortfall", bug_size=20.0,
                                         aggregator="ddp", **SMALL))
  # Shares for 20 x the participants: the sum's noise std is 1/sqrt(20) =
  # 0.22 of the claim; over 4 x 2410 values the variance test's p-value is
  # ~0 (it resolves the std to +-3%).
  assert not shortfall.noise_check.passed, shortfall
  assert shortfall.detected
  variance = shortfall.noise_check.test("variance[all]")
  assert variance.rejected and variance.statistic < 0.1, variance
  # The correct chain is unseeded (TFF seeds the Skellam noise and the
  # rotation from the clock), so a run of it is flagged by chance now and
  # then: 1000 simulator runs of this configuration (`pipeline_simulator`,
  # 20 participants, 4 rounds, d = 2410, 100 candidates, z = 4) had no
  # refutation (the largest bound reached 0.96 of the claim once) and 4
  # failed self-tests: a flag in about 0.4% of runs, at most 1.2% (one-sided
  # 95% Clopper-Pearson limits, 0.91% + 0.30%; 4000 further self-tests alone
  # failed 5 times). So a second, independent run is drawn when the first is
  # flagged: a correct chain fails this only if both are (< 1.5e-4), while a
  # tool that flags correct DDP fails it every time.
  draws = _second_draw_if_flagged(
      lambda: runs.run(runs.BugRunConfig(aggregator="ddp", **SMALL)),
      flagged=lambda run: run.detected)
  assert not draws[-1].detected, [str(run) for run in draws]


def test_noise_reuse_fails_the_self_test_and_not_the_audit():
  run = runs.run(runs.BugRunConfig(bug="reuse", **SMALL))  # seeded
  assert not run.noise_check.passed, run
  assert run.noise_check.test("prefix[tensor0,tensor1]").rejected
  # Each coordinate's noise has the claimed law: canaries see nothing.
  assert not run.verdict.refuted, run


def test_noise_reuse_query_repeats_one_draw_in_every_tensor():
  query = gaussian_planted_bugs.NoiseReuseQuery(1.0, 2.0, noise_seed=5)
  state = query.initial_global_state()
  zeros = [tf.zeros([7, 3]), tf.zeros([4])]
  noised, new_state, event = query.get_noised_result(zeros, state)
  first, second = (np.asarray(x).reshape(-1) for x in noised)
  np.testing.assert_array_equal(second, first[:4])
  assert int(new_state.draw) == 1
  assert float(event.noise_multiplier) == pytest.approx(2.0)


def test_clip_bug_query_clips_at_the_factor_and_claims_c():
  query = gaussian_planted_bugs.ClipBugQuery(1.0, 0.0, noise_seed=5, clip_factor=10.0)
  params = query.derive_sample_params(query.initial_global_state())
  assert float(params) == 1.0  # what the server and the DpEvent believe
  record = query.preprocess_record(params, [tf.constant([30.0, 40.0])])
  np.testing.assert_allclose(np.asarray(record[0]), [6.0, 8.0], rtol=1e-6)


def test_ddp_chain_holds_the_real_factorys_state():
  # DistributedDpSumFactory's own state after initialize(), secure sums
  # included (their states are empty), against the chain with plain sums.
  # Only the rotation seed differs: TFF draws it from the clock.
  value_type = tff.TensorType(np.float32, [2410])
  params = ddp_parameters.ddp_parameters(4.0, 50, 16, 1.0, 2410)
  ours = planted_bugs.ddp_sum_factory(params).create(value_type).initialize()
  with warnings.catch_warnings():
    warnings.simplefilter("ignore")
    real = distributed_dp.DistributedDpSumFactory(
        noise_multiplier=4.0, expected_clients_per_round=50, bits=16,
        l2_clip=1.0).create(value_type).initialize()
  tf.nest.assert_same_structure(ours[0], real[0])
  for a, b in zip(tf.nest.flatten(ours[0]), tf.nest.flatten(real[0])):
    np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
  assert len(ours) == len(real) == 2  # (clip/discretization/DP, rotation)


@pytest.mark.parametrize("kwargs, match", [
    (dict(bug="shortfall"), "planted in the 'ddp'"),
    (dict(aggregator="ddp", mode="server"), "needs aggregator 'gaussian'"),
    (dict(bug_size=0.5), "bug_size must be >= 1"),
    (dict(bug="typo"), "bug"),
    (dict(aggregator="typo"), r"aggregator must be one of \('gaussian', "
                              r"'ddp', 'tree', 'banded', 'blt'\), got "
                              r"'typo'"),
])
def test_bad_config_names_the_argument(kwargs, match):
  with pytest.raises(ValueError, match=match):
    runs.BugRunConfig(**kwargs)


def test_a_mechanism_s_runs_take_its_config_type():
  with pytest.raises(TypeError, match="runs of aggregator 'tree' take a "
                     "TreeBugRunConfig"):
    runs.BugRunConfig(aggregator="tree", mode="server")


def _register(monkeypatch, name, planted_bugs):
  """Registers a test mechanism `name`: DP-FedAvg's, a package of its own
  (its `spec` and `tff` modules; the TFF half's `planted_bugs` gives
  `planted_bugs`, a `PlantedBugs` or None) and one registry line."""
  package = types.ModuleType(f"test_mechanism_{name}")
  package.__path__ = []
  spec, tff_half = (types.ModuleType(f"{package.__name__}.{half}")
                    for half in ("spec", "tff"))

  mechanism_name = name

  @dataclasses.dataclass(frozen=True)
  class TestMechanism(gaussian.GaussianMechanism):
    name = mechanism_name

  class TestTff(gaussian_tff.GaussianTff):

    def planted_bugs(self):
      return planted_bugs

  spec.MECHANISM = TestMechanism()
  tff_half.TFF_MECHANISM = TestTff()
  for module in (package, spec, tff_half):
    monkeypatch.setitem(sys.modules, module.__name__, module)
  monkeypatch.setitem(registry.MECHANISMS, name, package.__name__)


def test_a_tff_half_finds_the_planted_bugs_beside_it():
  # By its package's `planted` module; a half whose package has none has
  # none (the protocol's own module sits in tff_canary.mechanisms, which
  # holds no `planted` module).
  assert (registry.half("gaussian").planted_bugs()
          is gaussian_planted.PLANTED_BUGS)
  assert registry.half("blt").planted_bugs() is registry.half(
      "banded").planted_bugs()
  assert protocol_tff.TffMechanism().planted_bugs() is None


def test_a_mechanism_without_planted_bugs_is_refused(monkeypatch):
  _register(monkeypatch, "test_plain", None)
  assert "test_plain" not in runs.aggregator_names()
  with pytest.raises(ValueError, match="aggregator 'test_plain' has no "
                     "planted bugs"):
    runs.BugRunConfig(aggregator="test_plain")


def test_a_registered_mechanism_brings_its_planted_bugs(monkeypatch):
  # A test mechanism: DP-FedAvg's TFF half with one more planted bug, its
  # own modules and one registry line; the run's config and the
  # experiment's table find it through the registry alone.

  class TestPlanted(gaussian_planted.GaussianPlanted):
    bugs = ("none", "new_bug")
    modes = ("server",)
    table = (("new_bug", "server"),)

  _register(monkeypatch, "test_planted", TestPlanted())
  assert runs.aggregator_names() == ("gaussian", "ddp", "tree", "banded",
                                     "blt", "test_planted")
  config = runs.BugRunConfig(bug="new_bug", mode="server",
                             aggregator="test_planted")
  assert isinstance(config.planted, TestPlanted)
  assert config.label == "new_bug x1 test_planted server"
  with pytest.raises(ValueError, match="'new_bug' is planted in the "
                     "'test_planted' aggregator, got aggregator 'gaussian'"):
    runs.BugRunConfig(bug="new_bug")
  with pytest.raises(ValueError, match="mode 'client' .* needs aggregator "
                     "'gaussian' or 'ddp', got 'test_planted'"):
    runs.BugRunConfig(aggregator="test_planted")
  script = experiment_scripts.load("planted_bugs", "planted_bugs_script")
  table = script.configs(shortfall_sizes=["2"], clip_factor=10.0)
  assert [c.label for c in table[-2:]] == ["shortfall x2 ddp client",
                                           "new_bug x1 test_planted server"]


def _ddp_check(rotation, mechanism="distributed_skellam", share_reuse=False):
  """The rotated-domain self-test of a 20-client chain (z = 4, 16 bits, d =
  2410 before padding) on its default value, 4 rounds."""
  params = ddp_parameters.ddp_parameters(4.0, 20, 16, 1.0, 2410,
                                         mechanism=mechanism,
                                         rotation=rotation)
  return ddp_noise_check.check_ddp_noise(
      planted_bugs.ddp_sum_factory(params, share_reuse=share_reuse), params)


@pytest.mark.parametrize("rotation", ["dft", "hd"])
@pytest.mark.parametrize("mechanism",
                         ["distributed_skellam", "distributed_dgauss"])
def test_ddp_rotated_self_test_passes_the_correct_chain(rotation, mechanism):
  # TFF seeds the shares and the rotation from the clock, so each check is a
  # fresh draw: on correct noise it fails with probability at most its level,
  # 0.001 (Holm; the sums' std, 8380 integer units, is far above
  # MIN_INTEGER_STD, where the Gaussian-shape test against the continuous
  # normal had no false alarm in 300 simulated sums). A second, independent
  # check is drawn when the first fails: a correct chain fails this with
  # probability about 1e-6, a check that always flags every time.
  checks = _second_draw_if_flagged(lambda: _ddp_check(rotation, mechanism),
                                   flagged=lambda check: not check.passed)
  assert checks[-1].passed, [str(c) for c in checks]
  check = checks[-1]
  assert check.rotation == rotation and check.num_repeats == 1
  # Back in the basis the shares were added in, the noise is on the integer
  # lattice (TF's float32 FFT leaves the DFT 0.13 from it at this scale, the
  # Hadamard transform 0.001; off the lattice it would be 0.289).
  assert check.on_lattice, check
  assert check.lattice_rms < (0.2 if rotation == "dft" else 0.01), check


@pytest.mark.parametrize("rotation", ["dft", "hd"])
def test_ddp_share_reuse_is_caught_in_the_rotated_domain(rotation):
  # The reuse is exact in the rotated domain: each round's second half equals
  # its first (the sum of the clients' repeated shares), so the halves'
  # cosine is 1 (p = 0) and every consecutive pair repeats (p = 0), whatever
  # the clock's seeds; deterministic up to TF's float32 rounding, which the
  # lattice check shows is far from mattering here.
  check = _ddp_check(rotation, share_reuse=True)
  assert not check.passed, check
  names = check.check.tensor_names
  prefix = check.test(f"prefix[{names[0]},{names[1]}]")
  assert prefix.rejected and prefix.statistic > 0.999, prefix
  reuse = check.test("reuse")
  assert reuse.rejected and reuse.statistic > 1000, reuse
  # Each coordinate still has the claimed variance: only the structure fails.
  # Not "the variance test does not reject": that test counts the 9,640
  # values as independent, but the reuse makes each round's second half a
  # copy of its first, so only 4,820 are: its z is sqrt(2) too large and it
  # rejects correct variance far more often than its level (a fresh-clone CI
  # saw 1.065, p = 1e-5, which is 3.2 SE of the true spread). The ratio's SE
  # over 4,820 independent values is sqrt(2 / 4820) = 0.020, so 0.1 is 4.9 SE
  # (a false failure about 1e-6); a reuse that also scaled the noise, e.g.
  # half the shares (ratio 0.5) or twice (2.0), fails it.
  variance = check.test("variance[all]")
  assert abs(variance.statistic - 1.0) < 0.1, variance


def test_ddp_share_reuse_passes_the_released_noise_self_test():
  # Why the rotated domain: as released (after TFF's inverse DFT) the reused
  # shares are spread over every coordinate with the claimed variance and no
  # coordinate repeating another, so the released-domain self-test (4
  # rounds, the chain as configured) passes. On correct DDP noise it fails
  # about 0.1-0.4% of the time (see the shortfall test above), so a second,
  # independent check is drawn when the first fails.
  params = ddp_parameters.ddp_parameters(4.0, 20, 16, 1.0, 2410)
  checks = _second_draw_if_flagged(
      lambda: noise_check.check_aggregation_noise(
          planted_bugs.ddp_sum_factory(params, share_reuse=True),
          tff.types.to_type([(np.float32, [2410])]), num_clients=20,
          claimed_std=ddp_chain.claimed_std(params)),
      flagged=lambda check: not check.passed)
  assert checks[-1].passed, checks


def test_ddp_share_reuse_run_is_caught_by_the_self_test():
  # The planted-bug run: the self-test now looks in the rotated domain.
  run = runs.run(runs.BugRunConfig(bug="reuse", aggregator="ddp", **SMALL))
  assert run.detected and not run.noise_check.passed, run
  assert "prefix" in run.noise_check.check.rejected_families(), run
  assert run.row()["self-test"] == "FAILED" and run.row()["caught"] == "yes"


@pytest.mark.parametrize("clip_factor", [1.0, 10.0])
def test_ddp_clip_bug_lets_clients_in_at_the_factor_with_the_claims_noise(
    clip_factor):
  # Noise multiplier 0: the result is the clipped client, rounded. Rounding
  # moves each of the 2410 coordinates by at most 1/scale (scale ~ 1e3 or
  # more here), so the norm by at most sqrt(2410)/scale < 0.05.
  params = ddp_parameters.ddp_parameters(0.0, 5, 16, 1.0, 2410)
  chain = planted_bugs.ddp_sum_factory(params, clip_factor=clip_factor)
  process = chain.create(tff.TensorType(np.float32, [2410]))
  client = np.zeros(2410, np.float32)
  client[0] = 100.0
  out = process.next(process.initialize(), [client]).result
  assert np.linalg.norm(np.asarray(out)) == pytest.approx(clip_factor,
                                                          abs=0.05)
  assert np.sqrt(2410) / params.scale < 0.05
  query = planted_bugs.ddp_query(params, clip_factor=clip_factor)
  state = query.initial_global_state()
  # The noise (and so the claim) is C's; the asserted bound is the clip's.
  assert float(state.local_stddev) == pytest.approx(params.scaled_local_std)
  assert float(state.l2_norm_bound) == pytest.approx(
      clip_factor * params.l2_sensitivity, rel=0.01)


def test_share_reuse_query_repeats_each_share_between_the_halves():
  query = planted_bugs.ShareReuseSkellamQuery(
      l1_norm_bound=10**6, l2_norm_bound=10**4, local_stddev=50.0)
  noised = np.asarray(query.add_noise_to_sample(
      50.0, tf.zeros([11], tf.int32)))
  # Halves of the first 10 values equal; the odd last value gets none.
  np.testing.assert_array_equal(noised[:5], noised[5:10])
  assert noised[10] == 0 and np.any(noised[:5] != 0)


def test_tff_ddp_query_fails_a_round_whose_client_exceeds_its_bound():
  # Why the DDP clip bug also raises the query's bounds: TFF's distributed
  # Skellam query asserts each record's integer L1 and L2 norms. Clipped at
  # 10 C against the bounds for C (the chain of `ddp_sum_factory` with only
  # the clip changed), the round fails on whichever assertion the graph runs
  # first (both orders seen: the two asserts have no control dependency).
  params = ddp_parameters.ddp_parameters(4.0, 5, 16, 1.0, 100)
  nested = tff.aggregators.DifferentiallyPrivateFactory(
      query=planted_bugs.ddp_query(params),
      record_aggregation_factory=tff.aggregators.SumFactory())
  nested = discretization.DiscretizationFactory(
      inner_agg_factory=nested, scale_factor=params.scale, stochastic=True,
      prior_norm_bound=1.0)
  nested = tff.aggregators.clipping_factory(clipping_norm=10.0,
                                            inner_agg_factory=nested)
  process = tff.aggregators.DiscreteFourierTransformFactory(
      inner_agg_factory=nested).create(tff.TensorType(np.float32, [100]))
  client = np.zeros(100, np.float32)
  client[0] = 100.0
  with pytest.raises(Exception, match=r"(L1|Global L2) norm exceeds"):
    process.next(process.initialize(), [client])
