"""The client sampler and the canary schedule derived from it (NumPy only)."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest

from tff_canary.stats.canaries import client_sampling

from tff_canary.stats.canaries import schedules
from tff_canary.stats.canaries.client_sampling import ClientSampler


def _realize(schedule, n=300, seed=0):
  return schedule.realize(seed, np.arange(n))


def test_module_imports_no_tensorflow():
  code = ("import sys; import tff_canary.stats.canaries.client_sampling; "
          "assert 'tensorflow' not in sys.modules, 'TF imported'")
  subprocess.run([sys.executable, "-c", code], check=True)


def test_sampler_draws_what_the_experiments_always_drew():
  # The experiments' sampler moved here from experiment.py; a frozen copy of
  # the old code pins the clients of every round (a changed stream would
  # change every run's clients and break resuming old runs).
  def old(round_num, n, k, sampling, seed):
    if sampling == "shuffle":
      epoch, index = divmod(round_num, max(1, n // k))
      order = np.random.default_rng([seed, 0xC11E, epoch]).permutation(n)
      return order[index * k:(index + 1) * k]
    rng = np.random.default_rng([seed, 0xC11E, round_num])
    count = rng.binomial(n, min(1.0, k / n))
    return np.sort(rng.choice(n, size=count, replace=False))

  for sampling in ("shuffle", "per_round"):
    sampler = ClientSampler(103, 10, sampling, seed=4)
    for r in range(25):
      np.testing.assert_array_equal(sampler.clients(r),
                                    old(r, 103, 10, sampling, 4))


@pytest.mark.parametrize("sampling", ["shuffle", "per_round"])
def test_counts_are_the_rounds_clients(sampling):
  sampler = ClientSampler(57, 8, sampling, seed=2)
  expected = np.zeros(57, int)
  for r in range(23):
    expected[sampler.clients(r)] += 1
  np.testing.assert_array_equal(sampler.counts(23), expected)


def test_paper_emnist_setting_canaries_take_part_every_epoch():
  # The paper's EMNIST: 3400 clients, 101 per round, 15 epochs. Clients take
  # part once per epoch of 3400 // 101 = 33 rounds, so canaries must take
  # part 15 times, once in each epoch (the old schedule gave them 1).
  sampler = ClientSampler(3400, 101, "shuffle", seed=0)
  num_rounds = 15 * sampler.rounds_per_epoch
  schedule = client_sampling.canary_schedule(sampler, num_rounds)
  assert schedule == schedules.ShuffledEpochs(495, 33, partial_last_epoch=True)
  part = _realize(schedule)
  np.testing.assert_array_equal(part.counts(300), np.full(300, 15))
  for cid in (0, 150, 299):
    np.testing.assert_array_equal(part.rounds_of(cid) // 33, np.arange(15))
  clients = sampler.counts(num_rounds)
  # 3333 of the 3400 clients take part in each epoch (the last 67 of each
  # permutation sit it out): exact mean 15 * 3333 / 3400.
  assert clients.max() == 15 and clients.mean() == pytest.approx(15 * 3333 / 3400)
  # Presentations equal to the epochs agree; anything else is refused.
  assert client_sampling.canary_schedule(sampler, num_rounds, 15) == schedule
  with pytest.raises(ValueError, match=r"presentations = 1 contradicts.*15 "
                     r"whole epochs.*--allow_participation_mismatch"):
    client_sampling.canary_schedule(sampler, num_rounds, 1)


def test_per_round_sampling_rate_equals_the_clients():
  sampler = ClientSampler(400, 20, "per_round", seed=0)
  schedule = client_sampling.canary_schedule(sampler, 60)
  assert schedule == schedules.PerRoundSampling(60, 20 / 400)
  assert schedule.probability == sampler.rate
  # Presentations equal to a client's expected participations (60 x 0.05 =
  # 3) agree; 1 is refused.
  assert client_sampling.canary_schedule(sampler, 60, 3) == schedule
  with pytest.raises(ValueError, match=r"presentations = 1 contradicts.*3 "
                     "times in expectation"):
    client_sampling.canary_schedule(sampler, 60, 1)


def test_a_partial_last_epoch_is_shared_by_clients_and_canaries():
  # 100 clients, 10 per round: epochs of 10 rounds; 25 rounds are 2 epochs
  # and half of a third. Exactly half the clients take part a third time
  # (5 rounds x 10 of 100), and each canary with probability 5 / 10.
  sampler = ClientSampler(100, 10, "shuffle", seed=1)
  counts = sampler.counts(25)
  assert set(counts) == {2, 3} and (counts == 3).sum() == 50
  part = _realize(client_sampling.canary_schedule(sampler, 25), n=4000)
  canary = part.counts(4000)
  assert set(canary) == {2, 3}
  # Binomial(4000, 0.5) / 4000 has sd 0.0079; 0.04 is 5 sd (fixed seed).
  assert abs((canary == 3).mean() - 0.5) < 0.04
  assert part.events[:, 0].max() < 25
  # Fewer rounds than one epoch: at most once, with probability 25 / 40.
  small = ClientSampler(400, 10, "shuffle", seed=1)
  part = _realize(client_sampling.canary_schedule(small, 25), n=4000)
  # Binomial(4000, 0.625) / 4000 has sd 0.0077; 0.04 is 5 sd.
  assert part.counts(4000).max() == 1
  assert abs(part.counts(4000).mean() - 25 / 40) < 0.04
  assert small.counts(25).max() == 1 and small.counts(25).sum() == 250


def test_allowed_mismatch_gives_exactly_the_presentations():
  sampler = ClientSampler(3400, 101, "shuffle")
  schedule = client_sampling.canary_schedule(sampler, 495, 1,
                                             allow_mismatch=True)
  assert schedule == schedules.ShuffledEpochs(495, 495)
  np.testing.assert_array_equal(_realize(schedule).counts(300), 1)
  with pytest.raises(ValueError, match="presentations = 600 exceeds num_rounds"):
    client_sampling.canary_schedule(sampler, 495, 600, allow_mismatch=True)


@pytest.mark.parametrize("kwargs, error, match", [
    (dict(num_clients=5, clients_per_round=6), ValueError,
     r"clients_per_round = 6 exceeds num_clients = 5.*rate.*1.2 > 1"),
    (dict(num_clients=5, clients_per_round=0), ValueError, "clients_per_round"),
    (dict(num_clients=5, clients_per_round=2, sampling="poisson"), ValueError,
     "sampling"),
    (dict(num_clients=5.0, clients_per_round=2), TypeError, "num_clients"),
])
def test_bad_sampler(kwargs, error, match):
  with pytest.raises(error, match=match):
    ClientSampler(**kwargs)


def test_summary_and_line():
  sampler = ClientSampler(330, 22, "shuffle", seed=0)  # 15 rounds per epoch
  schedule = client_sampling.canary_schedule(sampler, 45)
  counts = _realize(schedule).counts(300)
  summary = client_sampling.participation_summary(sampler, 45, counts,
                                                  schedule)
  assert summary["clients"] == dict(count=330, min=3, max=3, mean=3.0)
  assert summary["canaries"]["min"] == summary["canaries"]["max"] == 3
  assert summary["epochs"] == 3 and summary["mismatch"] is None
  assert client_sampling.describe(summary) == (
      "clients took part 3 times each (3 epochs of 15 rounds), canaries 3 "
      "times each (once per epoch)")
  allowed = client_sampling.canary_schedule(sampler, 45, 1,
                                            allow_mismatch=True)
  mismatch = client_sampling.participation_mismatch(sampler, 45, 1)
  summary = client_sampling.participation_summary(
      sampler, 45, _realize(allowed).counts(300), allowed, mismatch=mismatch)
  line = client_sampling.describe(summary)
  assert line.startswith("PARTICIPATION MISMATCH (allowed by "
                         "--allow_participation_mismatch): clients took part "
                         "3 times each (3 epochs of 15 rounds), canaries 1 "
                         "time each")
  poisson = ClientSampler(200, 10, "per_round", seed=0)
  schedule = client_sampling.canary_schedule(poisson, 20)
  summary = client_sampling.participation_summary(
      poisson, 20, _realize(schedule).counts(300), schedule)
  assert "Poisson sampling at rate 0.05 per round" in client_sampling.describe(
      summary) and summary["epochs"] is None


def test_summary_takes_the_client_counts_it_is_given():
  # The experiment passes the counts it saves to participation.npz, so the
  # sampler runs once; given counts are used, and checked.
  sampler = ClientSampler(330, 22, "shuffle", seed=0)
  schedule = client_sampling.canary_schedule(sampler, 45)
  canary_counts = _realize(schedule).counts(300)
  given = client_sampling.participation_summary(
      sampler, 45, canary_counts, schedule,
      client_counts=sampler.counts(45))
  assert given == client_sampling.participation_summary(
      sampler, 45, canary_counts, schedule)
  skewed = sampler.counts(45)
  skewed[0] = 7
  assert client_sampling.participation_summary(
      sampler, 45, canary_counts, schedule,
      client_counts=skewed)["clients"]["max"] == 7
  with pytest.raises(ValueError, match=r"client_counts must have one count "
                     r"per client \(330\), got 329"):
    client_sampling.participation_summary(sampler, 45, canary_counts, schedule,
                                          client_counts=skewed[1:])
  with pytest.raises(ValueError, match=r"client_counts\[0\] = -7.0"):
    client_sampling.participation_summary(sampler, 45, canary_counts, schedule,
                                          client_counts=-skewed)
