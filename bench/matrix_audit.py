"""Does the audit catch a matrix mechanism's planted bugs, and only them?

  .venv/bin/python bench/matrix_audit.py [--trials 200] [--noise_multiplier 2.5]
      [--parts all|restarted|no_restart] [--smoke]

Each trial is one simulated run of matrix-factorization DP-FTRL
(`tff_canary.stats.correlated.tree_simulation`, with the mechanism's noise):
4 epochs of 64 rounds, the strategy restarted every epoch, fair-coin
orthogonal canaries on the claimed noise's worst-case rounds, plus the
mechanism run on zero values for the self-test. Each run is audited
(`tree_audit.audit_ftrl`, family-wise level 0.05) against the claim of the
correct strategy. Strategies: the 4-banded square root
(`toeplitz.square_root_coefficients(4)`) and a 3-buffer BLT fitted to one
participation per epoch (`blt_fit.fit_blt`). Mechanisms: the correct one
(an alarm is a false alarm) and each planted bug (an alarm is a detection):
the generator's buffers never carried between rounds, or reset every 16
rounds; its coefficients c_i, i >= 1, at half their value; the fresh noise
of round t reused at round t + 32 (`planted_strategies`); and a client
counted twice in an epoch (`tree_simulation.simulate`'s
"double_participation").

Then the same strategies with no restart, claimed under at most 4
participations 64 rounds apart in the 256 rounds (`separation.MinSeparation`;
the BLT fitted to that rule), simulated by `separated_simulation`: the
correct mechanism with canaries on the claim's worst-case rounds and with
canaries sampled as clients by a cyclic sampler of period 64, and the
planted bug "the claim's b is larger than the clients' real separation"
(clients every 32 rounds, canaries sampled as they are). The audit
(`tree_audit.audit_ftrl` with the rule's claim, one epoch of 256 rounds and
the "participation" check of the schedules against the rule). The last
line:

  matrix audit: worst detection D, worst false alarm F
"""

from __future__ import annotations

import math
import time

import smoke_mode
# The tree bench's flags and --smoke sizes (one trial, 100 candidates).
from ftrl_audit import SMOKE, audit_parser
from tff_canary.stats.correlated import tree_audit, tree_simulation
from tff_canary.stats.matrix import (blt_fit, planted_strategies,
                                     separated_simulation, separation,
                                     strategy_noise, toeplitz)

DELTA = 1e-5
EPOCHS, ROUNDS_PER_EPOCH = 4, 64
# (row name, planted_strategies bug, its arguments, simulate's bug)
BUGS = [
    ("correct", "none", {}, "none"),
    ("buffers never carried", "buffers_reset", dict(reset_every=1), "none"),
    ("buffers reset every 16", "buffers_reset", dict(reset_every=16), "none"),
    ("c_i (i >= 1) halved", "coefficient_scale", dict(factor=0.5), "none"),
    ("noise reused at t + 32", "noise_reuse", dict(lag=32), "none"),
    ("client twice an epoch", "none", {}, "double_participation"),
]


# No restart: (row name, placement, the clients' period, a bug).
SEPARATED = [
    ("no restart, correct, worst-case canaries", "worst_case", None, False),
    ("no restart, correct, canaries as clients", "clients", None, False),
    ("claim b = 64, clients every 32 rounds", "clients", 32, True),
]
RULE = separation.MinSeparation(rounds=EPOCHS * ROUNDS_PER_EPOCH,
                                participations=EPOCHS,
                                separation=ROUNDS_PER_EPOCH)


def tally(verdicts, trials):
  """The alarm rate of `trials` audits and how often each check fired."""
  alarms, fired = 0, dict.fromkeys(tree_audit.CHECKS, 0)
  for verdict in verdicts:
    alarms += verdict.refuted
    for name in verdict.caught_by:
      fired[name] += 1
  return alarms / trials, fired


def separated_strategies():
  """{name: coefficients over all rounds} for the rule, no restart."""
  fit = blt_fit.fit_blt(rounds=RULE.rounds, participations=RULE.participations,
                        separation=RULE.separation, num_buffers=3)
  return {"banded (4 bands)": toeplitz.square_root_coefficients(4),
          f"BLT ({fit.strategy.num_buffers} buffers)":
              fit.strategy.coefficients(RULE.rounds)}


def run_separated(coefficients, placement, period, *, trials,
                  noise_multiplier, candidates, self_test_dim, seed):
  """The alarm rate, how often each check fired, and the claim."""
  def verdicts():
    for trial in range(trials):
      run = separated_simulation.simulate(
          coefficients, RULE, noise_multiplier=noise_multiplier, delta=DELTA,
          num_candidates=candidates, self_test_dim=self_test_dim,
          placement=placement, client_period=period, seed=seed + trial)
      yield tree_audit.audit_ftrl(
          run.scores, run.schedule, run.inserted, noise=run.noise,
          rounds_per_epoch=RULE.rounds, noise_multiplier=noise_multiplier,
          delta=DELTA, self_test_noise=run.self_test_noise, claim=run.claim,
          participation=RULE)
  return (*tally(verdicts(), trials), RULE.claim(
      coefficients, noise_multiplier=noise_multiplier, delta=DELTA))


def strategies():
  """{name: coefficients of one epoch}: the banded square root and a BLT."""
  fit = blt_fit.fit_blt(rounds=ROUNDS_PER_EPOCH, participations=1,
                        separation=ROUNDS_PER_EPOCH, num_buffers=3)
  return {"banded (4 bands)": toeplitz.square_root_coefficients(4),
          f"BLT ({fit.strategy.num_buffers} buffers)":
              fit.strategy.coefficients(ROUNDS_PER_EPOCH)}


def run_setting(coefficients, bug, arguments, simulated_bug, *, trials,
                noise_multiplier, candidates, self_test_dim, seed):
  """The alarm rate, how often each check fired, and the claim."""
  rounds = EPOCHS * ROUNDS_PER_EPOCH
  claimed = strategy_noise.strategy_noise(coefficients, rounds,
                                          restart_every=ROUNDS_PER_EPOCH)
  released = planted_strategies.planted_noise(
      coefficients, rounds, restart_every=ROUNDS_PER_EPOCH, bug=bug,
      **arguments)
  setting = tree_simulation.FtrlSetting(
      epochs=EPOCHS, rounds_per_epoch=ROUNDS_PER_EPOCH,
      noise_multiplier=noise_multiplier, num_candidates=candidates,
      self_test_dim=self_test_dim)
  placement = claimed.worst_case_rounds()
  def verdicts():
    for trial in range(trials):
      run = tree_simulation.simulate(setting, bug=simulated_bug,
                                     seed=seed + trial, noise=released,
                                     placement=placement)
      yield tree_audit.audit_ftrl(
          run.scores, run.schedule, run.inserted, noise=claimed,
          rounds_per_epoch=ROUNDS_PER_EPOCH,
          noise_multiplier=noise_multiplier, delta=DELTA,
          self_test_noise=run.self_test_noise)
  return (*tally(verdicts(), trials),
          claimed.claim(noise_multiplier, delta=DELTA))


def main(argv=None):
  parser = audit_parser(__doc__.splitlines()[0])
  parser.add_argument("--parts", choices=("all", "restarted", "no_restart"),
                      default="all",
                      help="the strategies restarted every epoch, the ones "
                      "with no restart, or both")
  args = smoke_mode.parse_args(
      parser, argv, SMOKE, "one trial per setting, 100 candidates")
  start = time.time()
  print(f"{'mechanism':<60} {'alarms':>15}  " +
        "  ".join(f"{c:>13}" for c in tree_audit.CHECKS))
  worst = {"detection": 1.0, "false alarm": 0.0}

  def row(label, rate, fired, is_bug):
    se = math.sqrt(max(rate * (1 - rate), 1e-12) / args.trials)
    print(f"{label:<60} {rate:>8.3f} ± {se:.3f}  " +
          "  ".join(f"{fired[c] / args.trials:>13.3f}"
                    for c in tree_audit.CHECKS), flush=True)
    if is_bug:
      worst["detection"] = min(worst["detection"], rate)
    else:
      worst["false alarm"] = max(worst["false alarm"], rate)

  sizes = dict(trials=args.trials, noise_multiplier=args.noise_multiplier,
               candidates=args.candidates, self_test_dim=args.self_test_dim,
               seed=args.seed)
  if args.parts != "no_restart":
    for strategy, coefficients in strategies().items():
      for name, bug, arguments, simulated_bug in BUGS:
        rate, fired, claim = run_setting(coefficients, bug, arguments,
                                         simulated_bug, **sizes)
        row(f"{name}, {strategy}", rate, fired,
            (bug, simulated_bug) != ("none", "none"))
      print(f"  claim of {strategy}: {claim}")
  if args.parts != "restarted":
    for strategy, coefficients in separated_strategies().items():
      for name, placement, period, bug in SEPARATED:
        rate, fired, claim = run_separated(coefficients, placement, period,
                                           **sizes)
        row(f"{name}, {strategy}", rate, fired, bug)
      print(f"  claim of {strategy}: {claim}")
  print(f"{args.candidates} candidates, {args.trials} trials per row, "
        f"z = {args.noise_multiplier}, {time.time() - start:.0f} s")
  print(f"matrix audit: worst detection {worst['detection']:.3f}, worst "
        f"false alarm {worst['false alarm']:.3f}")


if __name__ == "__main__":
  main()
