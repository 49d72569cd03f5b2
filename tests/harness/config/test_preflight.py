"""Refusals before training: a command that cannot work exits at once with
the reason, writing nothing (tff_canary/harness/config/preflight.py)."""

import os
import subprocess
import sys
import time
import warnings

import pytest

import repo_paths
from tff_canary.harness.config import experiment_config
from tff_canary.harness.config import model_sizes
from tff_canary.harness.config import preflight

REPO = str(repo_paths.REPO)
# The refusals come before TensorFlow loads: about 1 s here on a busy 2-core
# machine. 10 s is the bound, and leaves room for a slower machine;
# a refusal that waited for TensorFlow and the model (20+ s) fails it.
LIMIT_S = 10.0


def _refused(tmp_path, *flags):
  out = tmp_path / "run"
  start = time.monotonic()
  proc = subprocess.run(
      [sys.executable, os.path.join(REPO, "experiments", "emnist.py"),
       f"--output_dir={out}", *flags], capture_output=True, text=True,
      timeout=300, cwd=tmp_path)
  elapsed = time.monotonic() - start
  assert proc.returncode == 2, proc.stdout[-2000:] + proc.stderr[-2000:]
  assert elapsed < LIMIT_S, elapsed
  assert not out.exists() and os.listdir(tmp_path) == []  # nothing written
  return proc.stderr


def test_resume_of_a_missing_run_is_refused_at_once(tmp_path):
  err = _refused(tmp_path, "--resume")
  assert "--resume needs an existing run" in err and "does not exist" in err


def test_more_canaries_than_dimensions_is_refused_at_once(tmp_path):
  err = _refused(tmp_path, "--num_inserted=2000000")
  assert "2,000,040 canaries" in err and "d = 1,206,590" in err


def test_ddp_names_every_missing_setting_in_one_message(tmp_path):
  err = _refused(tmp_path, "--aggregator=ddp")
  for flag in ("--insertion=clients", "--noseeded_noise", "--clip="):
    assert flag in err, err
  assert err.count("error:") == 1
  # Orthogonal canaries (the default) need no aggregate from the weights;
  # the paper's do, so server SGD without momentum is named for them.
  assert "--server_momentum=0" not in err
  err = _refused(tmp_path, "--aggregator=ddp", "--directions=gaussian")
  assert "--server_momentum=0" in err and err.count("error:") == 1


def test_recording_with_orthogonal_canaries_is_refused_at_once(tmp_path):
  # Orthogonal canaries (the default) are scored in the round: a request to
  # record the aggregates is an error naming the flag, not silently ignored.
  err = _refused(tmp_path, "--record_aggregates")
  assert ("--record_aggregates (record_aggregates=True) with --directions="
          "orthogonal: orthogonal canaries are scored inside each round") in err
  assert err.count("error:") == 1
  err = _refused(tmp_path, "--record_aggregates", "--directions=orthogonal")
  assert "--record_aggregates" in err


def test_recording_defaults_to_the_directions():
  config = experiment_config.ExperimentConfig
  assert config().record_aggregates is False  # orthogonal: nothing recorded
  assert config(directions="gaussian").record_aggregates is True
  assert config(directions="gaussian",
                record_aggregates=False).record_aggregates is False
  assert config(record_aggregates=False).record_aggregates is False
  with pytest.raises(ValueError, match=r"--record_aggregates \(record_"
                     r"aggregates=True\) with --directions=orthogonal"):
    config(record_aggregates=True)
  with pytest.raises(TypeError, match="record_aggregates must be a bool or "
                     "None, got 'yes'"):
    config(directions="gaussian", record_aggregates="yes")
  # An orthogonal run's config.json of an older version said True (it was
  # ignored); the run resumes under today's resolved False.
  resolved = experiment_config.resolve(config(), 300, 10).values
  experiment_config.check_resumable(dict(resolved, record_aggregates=True),
                                    resolved, "run/config.json")


@pytest.mark.parametrize("fields, num_clients, dim", [
    (dict(), 300, 10),
    (dict(epochs=2, num_rounds=None, directions="gaussian", seed=3), 300, 10),
    (dict(data="tff", delta=1e-6, noise_seed=7), 3383, 1000),
    (dict(insertion="clients", seeded_noise=False, server_momentum=0.0,
          aggregator="ddp", clip=0.1, ddp_bits=18), 300, 1000),
    (dict(aggregator="tree", clip=0.1, num_rounds=12), 300, 10),
])
def test_a_config_json_gives_back_its_config(fields, num_clients, dim):
  # config.json -> ExperimentConfig.from_json -> resolve gives config.json
  # again: one spec from the flags or from the file.
  config = experiment_config.ExperimentConfig(**fields)
  values = experiment_config.resolve(config, num_clients, dim,
                                     versions={"tff_canary": "0"}).values
  spec = experiment_config.ExperimentConfig.from_json(dict(
      values, participation={"num_rounds": values["num_rounds"]}))
  again = experiment_config.resolve(spec, num_clients, dim,
                                    versions={"tff_canary": "0"}).values
  assert again == values
  assert spec.epochs == config.epochs and spec.num_clients == (
      values["num_clients"] if config.data == "synthetic" else None)


def test_an_older_config_json_reads_as_a_server_side_gaussian_run():
  values = experiment_config.resolve(experiment_config.ExperimentConfig(),
                                     300, 10).values
  older = {k: v for k, v in values.items()
           if k not in ("insertion", "canary_norm", "aggregator",
                        "ddp_mechanism", "ddp_bits", "ddp_beta",
                        "ddp_rotation")}
  spec = experiment_config.ExperimentConfig.from_json(older)
  assert spec.as_dict() == experiment_config.ExperimentConfig.from_json(
      values).as_dict()
  assert (spec.insertion, spec.aggregator, spec.ddp_bits) == (
      "server", "gaussian", None)
  with pytest.raises(ValueError, match="aggregator must be one of"):
    experiment_config.ExperimentConfig.from_json(dict(values,
                                                      aggregator="both"))


def test_resume_of_a_directory_without_a_run(tmp_path):
  config = experiment_config.ExperimentConfig(output_dir=str(tmp_path),
                                              resume=True)
  with pytest.raises(ValueError, match="holds no run"):
    preflight.check(config)
  (tmp_path / "config.json").write_text("{}")
  preflight.check(config)  # a run to resume: no refusal here


def test_canaries_up_to_the_models_dimension_pass():
  dim = model_sizes.task_dim("emnist")
  preflight.check(experiment_config.ExperimentConfig(
      num_inserted=dim - 10, num_held_out=10))
  with pytest.raises(ValueError, match="more than the emnist model"):
    preflight.check(experiment_config.ExperimentConfig(
        num_inserted=dim - 10, num_held_out=11))


def _ddp(**kw):
  return experiment_config.ExperimentConfig(
      task="stackoverflow", aggregator="ddp", insertion="clients",
      seeded_noise=False, server_momentum=0.0, noise_multiplier=0.1, **kw)


def test_a_ddp_bound_beyond_int32_is_refused_with_the_bits_that_fit():
  # StackOverflow's d = 4,050,748 at noise multiplier 0.1 and 20 bits: TFF's
  # scale hits its cap 1e6, so the integer L1 bound is about clip x 1e6 x
  # sqrt(d): 2.0e9 at clip 1 (inside int32), 4.0e9 at clip 2 (outside).
  preflight.check(_ddp(clip=1.0, ddp_bits=20))
  with pytest.raises(ValueError, match=r"int32 limit .* use --ddp_bits=\d+ "
                     "or fewer") as refused:
    preflight.check(_ddp(clip=2.0, ddp_bits=20))
  bits = int(str(refused.value).split("--ddp_bits=")[-1].split()[0])
  preflight.check(_ddp(clip=2.0, ddp_bits=bits))  # the advice works


def test_canary_fraction_needs_a_flag_beyond_ten_percent():
  config = experiment_config.ExperimentConfig(clients_per_round=50)
  # The main job: 48 canary participations beside 50 clients x 80 rounds
  # (1.2%): neither a warning nor a refusal.
  with warnings.catch_warnings():
    warnings.simplefilter("error")
    assert preflight.canary_fraction(config, 48, 80) == pytest.approx(
        48 / 4048)
  with pytest.warns(preflight.CanaryFractionWarning, match="5.9%"):
    preflight.canary_fraction(config, 250, 80)
  with pytest.raises(ValueError, match="--allow_large_canary_fraction"):
    preflight.canary_fraction(config, 2000, 80)  # 33%
  allowed = experiment_config.ExperimentConfig(
      clients_per_round=50, allow_large_canary_fraction=True)
  with pytest.warns(preflight.CanaryFractionWarning):
    preflight.canary_fraction(allowed, 2000, 80)
