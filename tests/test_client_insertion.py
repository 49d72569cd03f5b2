"""The client-insertion mode in the experiments: config, flags, a real run,
recording, ledger and report (tff_canary.harness.client_insertion)."""

import json
import os

import numpy as np
import pytest

from tff_canary.harness import experiment_config
from tff_canary.harness import run_dir
from tff_canary.stats import canary_config

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CLIENTS = dict(insertion="clients", seeded_noise=False, server_momentum=0.0)


def _config(tmp_path, **overrides):
  args = dict(output_dir=str(tmp_path / "run"), **CLIENTS)
  args.update(overrides)
  return experiment_config.ExperimentConfig(**args)


# Config ------------------------------------------------------------------


def test_the_config_defaults_to_server_and_derives_the_canary_norm(tmp_path):
  server = experiment_config.ExperimentConfig(output_dir=str(tmp_path))
  assert server.insertion == "server" and server.canary_norm is None
  clients = _config(tmp_path)
  assert clients.canary_norm == canary_config.DEFAULT_CANARY_NORM == 10.0
  assert _config(tmp_path, canary_norm=2.5).canary_norm == 2.5
  assert experiment_config.INSERTIONS == ("server", "clients")


@pytest.mark.parametrize("kwargs, error, match", [
    (dict(insertion="client"), ValueError,
     r"insertion must be one of \('server', 'clients'\), got 'client'"),
    (dict(insertion=None), ValueError, "insertion must be one of"),
    (dict(canary_norm=0.0), ValueError, "canary_norm must be positive"),
    (dict(canary_norm="big"), TypeError, "canary_norm must be a real number"),
    (dict(insertion="server", canary_norm=3.0), ValueError,
     r"canary_norm = 3.0 is for insertion='clients'"),
    # TFF's own factory cannot take a noise seed.
    (dict(seeded_noise=True), ValueError,
     r"cannot be seeded: got seeded_noise=True"),
    (dict(noise_seed=3), ValueError, r"noise_seed=3"),
    # The aggregate comes from the weights: only server SGD, no momentum.
    (dict(server_momentum=0.9), ValueError,
     r"needs server SGD without momentum.*server_momentum=0.9"),
    (dict(server_optimizer="adam"), ValueError,
     r"server_optimizer='adam'"),
])
def test_bad_client_mode_configs_are_refused(tmp_path, kwargs, error, match):
  with pytest.raises(error, match=match):
    _config(tmp_path, **kwargs)


def test_momentum_is_fine_without_recorded_aggregates(tmp_path):
  config = _config(tmp_path, server_momentum=0.9, record_aggregates=False)
  assert config.server_momentum == 0.9


def test_config_json_round_trip_and_old_files(tmp_path):
  config = _config(tmp_path, canary_norm=4.0)
  values = experiment_config.resolve(config, 300, 10).values
  assert values["insertion"] == "clients" and values["canary_norm"] == 4.0
  assert values["noise_seed"] is None  # TFF's unseeded noise
  again = experiment_config.ExperimentConfig(**{
      k: v for k, v in json.loads(json.dumps(values)).items()
      if k in config.as_dict()})
  assert (again.insertion, again.canary_norm) == ("clients", 4.0)
  assert experiment_config.insertion_of(values) == "clients"
  # A config.json from before the client mode: a server-side run, and it
  # resumes under today's defaults (which write both keys).
  old = experiment_config.resolve(
      experiment_config.ExperimentConfig(output_dir=str(tmp_path)), 300,
      10).values
  saved = {k: v for k, v in old.items()
           if k not in ("insertion", "canary_norm")}
  assert experiment_config.insertion_of(saved) == "server"
  experiment_config.check_resumable(saved, old, "run/config.json")
  with pytest.raises(ValueError, match=r"insertion: 'server' -> 'clients'"):
    experiment_config.check_resumable(saved, dict(old, insertion="clients"),
                                      "run/config.json")
  with pytest.raises(ValueError, match="config.json's insertion must be one"):
    experiment_config.insertion_of({"insertion": "both"})
