"""A Flower run's directory: what `ServerSideCanaries` kept, as a TFF run's files.

`write_run` turns a finished Flower run (issue 36; the wrapper,
`tff_canary.mechanisms.gaussian.flower.ServerSideCanaries`, kept every
round's scores in memory) into the run directory a TFF run writes
(docs/guide/report.md, "The run directory"), so that
`python -m tff_canary report DIR` and `harness.reporting.report.
build_report` read it as they read a TFF run's:

  * config.json: the keys `run_writer.RunWriter` writes for a user's loop
    (`run_dir.REQUIRED_CONFIG`), `writer` "flower", Flower's version;
  * ledger.json: one DpEvent per round as the round really was
    (`ServerSideCanaries.release_event`: the noise Flower added against the
    clip and the weight share it used, `gaussian.flower_claim`; with
    adaptive clipping not the z the user gave);
  * flower_accountant.json: Flower's own accountant's ε beside it, or why
    it does not apply (`flower_claim.accountant_record`;
    `harness.reporting.flower_notes` shows it);
  * noise_check.json: the noise self-test of the run's DP strategy
    (`gaussian.flower_noise_check`, run here unless given or turned off),
    with the rounds whose `np.random` state before the noise repeated;
  * participation.npz, initial_weights.npy and final_weights.npy (flat,
    in the canaries' coordinates);
  * the cosine table (cosines.npz, cosines.csv): the round cosines' max and
    schedule sums the wrapper kept, as the TFF half's `orthogonal_table`
    takes them from the aggregator's state, and the final model's cosines,
    of w_T - w_0 (Flower's sign: the canaries enter along +c_j);
  * metrics.csv (each round's clip, canaries and replies), then report.json,
    report.md and the plots;
  * for canary clients (`flower_clients.CanaryClients`, whose `insertion`
    is "clients"), config.json's `insertion` and `canary_norm` and
    canary_outcomes.json (its `outcomes`), as a TFF client-mode run's.

It asks the wrapper (its `canaries`, `rounds`, `statistics`, `flat`,
`final_cosines`, `release_event`); importing it needs no TensorFlow, and
Flower only when the noise self-test or the accountant's record is asked
for (both are, by default: a Flower run's directory needs Flower).
"""

from __future__ import annotations

import importlib.metadata
import os
from typing import Any, Optional

import numpy as np

import tff_canary
from tff_canary.harness.recording import run_dir as run_dir_lib
from tff_canary.harness.reporting import flower_notes
from tff_canary.harness.reporting import report as report_lib
from tff_canary.stats import atomic_files
from tff_canary.stats import validation
from tff_canary.stats.accounting import ledger as ledger_lib
from tff_canary.stats.canaries import cosine_table
from tff_canary.stats.canaries import orthogonal_canaries


def _settings(delta, num_clients, task, seed) -> dict[str, Any]:
  """The loop's own settings, checked as `loop_settings.LoopSettings`
  checks them (delta defaults to num_clients^-1.1, the paper's)."""
  if num_clients is not None:
    num_clients = validation.as_int(num_clients, "num_clients", minimum=1)
  if delta is None and num_clients is None:
    raise ValueError("give delta, or num_clients for the default delta = "
                     "num_clients^-1.1; got neither.")
  delta = validation.as_open_unit(
      num_clients ** -1.1 if delta is None else delta, "delta")
  if not isinstance(task, str) or not task:
    raise TypeError(f"task must be a non-empty str, got "
                    f"{validation.show(task)}.")
  if seed is not None:
    seed = validation.as_int(seed, "seed", minimum=0)
  return dict(delta=delta, num_clients=num_clients, sampling=None,
              task=task, seed=seed)


def _check_rounds(strategy) -> list[Any]:
  """The wrapper's rounds, refused unless every round of the canary
  schedule was released and scored (Flower's rounds 1..R, in order)."""
  canaries = strategy.canaries
  rounds = [r for r in strategy.rounds
            if r.schedule_round < canaries.num_rounds]
  done = [r.schedule_round for r in rounds]
  if done != list(range(canaries.num_rounds)):
    missing = sorted(set(range(canaries.num_rounds)) - set(done))
    raise ValueError(
        f"strategy released and scored schedule rounds {done[:10]}"
        f"{' ...' if len(done) > 10 else ''} of the canaries' "
        f"{canaries.num_rounds}; missing {missing[:10]} (Flower's rounds "
        f"{[r + 1 for r in missing[:10]]}; skipped without a release: "
        f"{list(strategy.skipped_rounds)}): the canaries scheduled there "
        "would count as inserted without entering. Write a run whose every "
        "scheduled round was released.")
  return rounds


def _versions() -> dict[str, str]:
  return {"flwr": importlib.metadata.version("flwr"),
          "tff_canary": tff_canary.__version__}


def write_run(output_dir: str | os.PathLike, strategy: Any,
              initial_arrays: Any, final_arrays: Any, *,
              delta: Optional[float] = None,
              num_clients: Optional[int] = None, task: str = "flower",
              seed: Optional[int] = None,
              plots: bool = True,
              noise_check: Any = True) -> report_lib.RunReport:
  """Writes the run directory of a finished Flower run; returns its report.

  Args:
    output_dir: The run directory (created; files in it are replaced).
    strategy: The `ServerSideCanaries` or `CanaryClients` after the run.
    initial_arrays: w_0, the `ArrayRecord` the run started from.
    final_arrays: w_T, the run's final `ArrayRecord` (`Result.arrays`).
    delta: Delta of every epsilon; default num_clients^-1.1.
    num_clients: The population size, if known.
    task: A name for the report's title.
    seed: The loop's own seed, if any (config.json only).
    plots: Draw plots/ too.
    noise_check: True: run the noise self-test of the run's DP strategy
      now (`flower_noise_check.check_flower_noise`, on a copy, np.random's
      state put back); a `FlowerNoiseCheck` the user ran before training;
      False: none (the report says "not run"). Either way with the run's
      repeated RNG states (`FlowerNoiseCheck.with_run_states`).

  Raises:
    ValueError, TypeError: for a bad argument (naming it), or a run whose
      scheduled rounds were not all released (`_check_rounds`).
  """
  settings = _settings(delta, num_clients, task, seed)
  plots = validation.as_bool(plots, "plots")
  rounds = _check_rounds(strategy)
  if not isinstance(noise_check, bool):
    # Imported here: it needs Flower (module docstring).
    from tff_canary.mechanisms.gaussian import flower_noise_check  # pylint: disable=import-outside-toplevel
    if not isinstance(noise_check, flower_noise_check.FlowerNoiseCheck):
      raise TypeError("noise_check must be True, False or a FlowerNoiseCheck "
                      f"(check_flower_noise's), got "
                      f"{validation.show(noise_check)}.")
  canaries, dim = strategy.canaries, strategy.dim
  initial = strategy.flat(initial_arrays).astype(np.float32)
  final = strategy.flat(final_arrays).astype(np.float32)
  ledger = ledger_lib.Ledger([strategy.release_event(r) for r in rounds])
  stats = strategy.statistics()
  table = cosine_table.of_canaries(
      canaries,
      final_cosine=np.clip(strategy.final_cosines(initial_arrays,
                                                  final_arrays), -1.0, 1.0),
      max_cosine=np.clip(stats.max_cosine, -1.0, 1.0),
      max_round=stats.max_round.astype(np.int64), dim=dim,
      rounds_recorded=stats.rounds_scored,
      generator=orthogonal_canaries.GENERATOR,
      unrecorded=np.zeros(canaries.num_canaries, np.int64),
      known_canaries_removed="final_and_all_iterates",
      scheduled_sum=stats.scheduled_sum.astype(np.float64),
      scheduled_rounds=stats.scheduled_rounds.astype(np.int64))
  multipliers = sorted({float(f"{z:.7g}") for z in ledger.noise_multipliers})
  clients = {int(strategy.strategy.num_sampled_clients)}
  insertion = getattr(strategy, "insertion", "server")
  mode = ({} if insertion == "server" else
          dict(canary_norm=float(strategy.canary_norm)))
  rd = run_dir_lib.RunDir(output_dir)
  os.makedirs(rd.path, exist_ok=True)
  rd.save_config(dict(
      settings, data="user", writer="flower", aggregator="gaussian",
      insertion=insertion, **mode, canary_seed=canaries.seed, dim=dim,
      noise_multiplier=(multipliers[0] if len(multipliers) == 1
                        else multipliers),
      clients_per_round=clients.pop(), num_rounds=canaries.num_rounds,
      num_inserted=canaries.num_inserted,
      num_held_out=canaries.num_held_out, assignment=canaries.assignment,
      directions=canaries.directions, schedule=repr(canaries.schedule),
      record_aggregates=False, output_dir=rd.path, versions=_versions()))
  rd.save_ledger(ledger.events)
  if mode:
    scheduled = {r.schedule_round for r in rounds}
    atomic_files.write_json(rd.file(run_dir_lib.CANARY_OUTCOMES), dict(
        canary_norm=mode["canary_norm"],
        outcomes=[o for o in strategy.outcomes
                  if o["round_num"] in scheduled]))
  atomic_files.save_npz(rd.file(run_dir_lib.PARTICIPATION),
                        events=canaries.participation.events)
  atomic_files.save_npy(rd.file(run_dir_lib.INITIAL_WEIGHTS), initial)
  atomic_files.save_npy(rd.file(run_dir_lib.FINAL_WEIGHTS), final)
  rd.save_metrics([dict(round=r.schedule_round, clip=r.clip,
                        canaries_inserted=int(r.inserted_ids.size),
                        clients=r.num_replies) for r in rounds])
  table.save_npz(rd.file(run_dir_lib.COSINES_NPZ))
  table.save_csv(rd.file(run_dir_lib.COSINES_CSV))
  _write_flower_files(rd, strategy, initial_arrays, rounds, ledger,
                      settings, noise_check)
  report = report_lib.build_report(rd.path)
  report_lib.write_report(report, plots=plots)
  return report


def _write_flower_files(rd, strategy, initial_arrays, rounds, ledger,
                        settings, noise_check) -> None:
  """flower_accountant.json and noise_check.json (module docstring)."""
  # Imported here: both need Flower (module docstring).
  from tff_canary.mechanisms.gaussian import flower_claim  # pylint: disable=import-outside-toplevel
  from tff_canary.mechanisms.gaussian import flower_noise_check  # pylint: disable=import-outside-toplevel
  record = flower_claim.accountant_record(
      strategy.strategy, rounds, settings["delta"],
      ledger.epsilon_for_rounds(range(len(rounds)), settings["delta"]),
      settings["num_clients"])
  atomic_files.write_json(rd.file(flower_notes.FLOWER_ACCOUNTANT), record)
  noise_path = rd.file(run_dir_lib.NOISE_CHECK)
  if noise_check is False:
    if os.path.exists(noise_path):
      os.remove(noise_path)  # a previous write's check is not this one's
    return
  check = flower_noise_check.check_run(
      strategy, initial_arrays, None if noise_check is True else noise_check)
  atomic_files.write_json(noise_path, check.as_dict())


__all__ = ["write_run"]
