"""A DP-FedAvg experiment with canaries, end to end, into a run directory.

`run_experiment(ExperimentConfig(...))` is what `experiments/emnist.py` and
`experiments/stackoverflow.py` run (they only turn flags into a config,
`tff_canary.harness.config.experiment_config`, which is checked without
TensorFlow); docs/guide/experiments.md ("How a run flows through the
package") shows its steps: load the data and the task (of the config's
`run_settings.DataSettings`), resolve the config once
(`experiment_config.resolve`: the client sampler, the canaries' schedule
and the canaries, checked before training; config.json's `participation` and
participation.npz's `client_counts` record client and canary participation
side by side), build the process (`dp_fedavg`) and test its aggregator's
noise (noise_check.json), start fresh or from the last checkpoint
(`resume`), train (`training`), then write the cosine table and the report
(`run_results.write_results`; a mechanism scored per round, DP-FTRL, has
its saved scores instead; `_after_training`).

Reproducible from the seeds, a run killed at any point and finished with
`resume=True` included (docs/guide/reproducibility.md; what a killed run
leaves: `resume`).
"""

from __future__ import annotations

import os

import numpy as np
import tensorflow_federated as tff

from tff_canary.federated.runtime import worker_guard
from tff_canary.federated.scores import aggregate_recorder
from tff_canary.harness.config import experiment_config
from tff_canary.harness.config import preflight
from tff_canary.harness.config import run_settings
from tff_canary.harness.recording import run_dir as run_dir_lib
from tff_canary.harness.reporting import report as report_lib
from tff_canary.harness.runner import client_insertion
from tff_canary.harness.data import datasets
from tff_canary.harness.runner import dp_fedavg
from tff_canary.harness.writing import loop_settings
from tff_canary.harness.runner import resume
from tff_canary.harness.writing import round_metrics
from tff_canary.harness.writing import run_results
from tff_canary.harness.data import tasks
from tff_canary.harness.runner import training
from tff_canary.mechanisms import protocol_tff
from tff_canary.stats import atomic_files
from tff_canary.stats.canaries import client_sampling

worker_guard.install()


# Canaries beyond the paper's fraction (`preflight.canary_fraction`).
CanaryFractionWarning = preflight.CanaryFractionWarning


def run_experiment(config: experiment_config.ExperimentConfig, *,
                   progress: bool = True, log=print) -> report_lib.Report:
  """Runs (or resumes) one experiment; returns its report (module docstring)."""
  if not isinstance(config, experiment_config.ExperimentConfig):
    raise TypeError(f"config must be an ExperimentConfig, got {config!r}.")
  # Before anything loads or is written: --resume without a run, a run
  # without --resume, more canaries than dimensions, a DDP bound too large.
  preflight.check(config)
  rd = run_dir_lib.RunDir(config.output_dir)
  started = rd.exists(run_dir_lib.CONFIG)

  data_settings = run_settings.DataSettings.of(config)
  data = datasets.load(data_settings)  # before anything is written
  task = tasks.build(data_settings, data)
  dim = tasks.num_parameters(task)
  resolved = experiment_config.resolve(
      config, len(data.train.client_ids), dim,
      versions=loop_settings.versions())
  values, sampler = resolved.values, resolved.sampler
  num_rounds = resolved.num_rounds
  # Refused beyond 10% (the scripts refuse it before TensorFlow loads with
  # synthetic data; TFF's data are counted here), a warning beyond 5%.
  preflight.canary_fraction(config, preflight.expected_canary_participations(
      config, resolved.canary_schedule), num_rounds)

  canaries = resolved.canaries
  # What the report's audit can reach with these coins, before training.
  preflight.audit_reach(config, num_rounds=num_rounds,
                        rounds_per_epoch=sampler.rounds_per_epoch,
                        delta=values["delta"], inserted=canaries.inserted)
  client_counts = sampler.counts(num_rounds)
  values["participation"] = client_sampling.participation_summary(
      sampler, num_rounds, canaries.counts()[canaries.inserted],
      canaries.schedule, client_counts=client_counts,
      mismatch=client_sampling.participation_mismatch(
          sampler, num_rounds, config.presentations))
  if started:
    experiment_config.check_resumable(rd.load_config(), values,
                                      rd.file(run_dir_lib.CONFIG))
  process = dp_fedavg.build_process(config, task, dim, canaries,
                                    values["noise_seed"],
                                    sampler.rounds_per_epoch)

  os.makedirs(rd.path, exist_ok=True)
  if not started:
    rd.save_config(values)
  else:
    resume.remove_leftovers(rd)
  atomic_files.save_npz(rd.file(run_dir_lib.PARTICIPATION),
                        events=canaries.participation.events,
                        client_counts=client_counts)
  if not rd.exists(run_dir_lib.NOISE_CHECK):
    result = dp_fedavg.run_noise_check(config, task, values["canary_seed"],
                                       values["noise_seed"],
                                       sampler.rounds_per_epoch)
    atomic_files.write_json(rd.file(run_dir_lib.NOISE_CHECK), result.as_dict())
    log(str(result))
  manager = tff.program.FileProgramStateManager(
      rd.file(run_dir_lib.CHECKPOINTS), keep_total=2)
  state, done = resume.start_state(process, manager, task, config.seed, rd)
  mechanism = config.mechanism
  history = resume.load_history(
      rd, done, ledger=mechanism.records_ledger,
      tree_candidates=(canaries.num_canaries if mechanism.round_scores
                       else None))
  if config.insertion == "clients":
    rounds = client_insertion.ClientRounds(
        config, canaries, dim, client_insertion.load_outcomes(rd, done))
  else:
    rounds = training.ServerRounds(protocol_tff.of(config.mechanism_settings))
  run = training.Run(config, resolved, task, process, rounds,
                     _recorder(canaries, rd, dim, num_rounds, done), rd,
                     manager)
  try:
    if done < num_rounds:
      log(f"{'resuming' if done else 'training'} {config.task} "
          f"({data.source} data, {resolved.num_clients} clients, d={dim}) in "
          f"{rd.path}" + (f" from round {done}" if done else ""))
      state = training.train(run, state, history, progress)
    return _after_training(run, canaries, state, log, progress)
  finally:
    if run.recorder is not None:
      run.recorder.close()


def _recorder(canaries, rd, dim, num_rounds, done):
  """The `AggregateRecorder` of the rounds' aggregates (gaussian canaries),
  or None (orthogonal canaries, or record_aggregates=False)."""
  if not canaries.record_aggregates:
    return None
  path = rd.file(run_dir_lib.AGGREGATES)
  if done and os.path.exists(path):
    return aggregate_recorder.AggregateRecorder.open(path)
  # A fresh start; a file here is from a run killed before round 1.
  return aggregate_recorder.AggregateRecorder(path, dim, num_rounds,
                                              overwrite=True)


def _after_training(run: training.Run, canaries, state, log,
                    progress) -> report_lib.Report:
  """The last step (module docstring); client mode with gaussian canaries
  has no canary aggregator state to check the table against."""
  rd = run.rd
  final = round_metrics.flat_trainable(
      run.process.get_model_weights(state), finite=False)
  if run.config.insertion == "clients" and canaries.directions == "gaussian":
    state = None  # nothing to check it against
  if run.config.mechanism.round_scores:
    atomic_files.save_npy(rd.file(run_dir_lib.FINAL_WEIGHTS), final)
    report = report_lib.build_report(rd.path)
    report_lib.write_report(report)
    return report
  log("computing the canary cosines ...")
  if run.recorder is not None:
    run.recorder.close()
  return run_results.write_results(
      rd, canaries, np.load(rd.file(run_dir_lib.INITIAL_WEIGHTS)), final,
      rd.file(run_dir_lib.AGGREGATES) if run.recorder is not None else None,
      state=state,
      memory_budget_bytes=int(run.config.memory_budget_gb * 1024 ** 3),
      progress=progress)
