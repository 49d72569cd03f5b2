"""A run's settings by step (harness/config/run_settings.py): the data
settings are the config's, derived once, frozen."""

import dataclasses

import pytest

from tff_canary.harness.config import experiment_config
from tff_canary.harness.config import run_settings


def _config(tmp_path, **kwargs):
  return experiment_config.ExperimentConfig(output_dir=str(tmp_path),
                                            **kwargs)


def test_data_settings_are_the_configs_with_the_derived_population(tmp_path):
  config = _config(tmp_path, num_rounds=12, clients_per_round=5,
                   presentations=3, examples_per_client=7, seed=9,
                   batch_size=4, client_epochs=2)
  settings = run_settings.DataSettings.of(config)
  # No num_clients given: every client takes part `presentations` times,
  # 5 clients x (12 // 3) rounds per epoch.
  assert settings.num_clients == 20
  assert settings.num_clients == experiment_config.default_num_clients(config)
  assert (settings.task, settings.source) == ("emnist", "synthetic")
  assert (settings.examples_per_client, settings.seed, settings.batch_size,
          settings.client_epochs) == (7, 9, 4, 2)
  assert settings.cache_dir.endswith(".tff")
  with pytest.raises(dataclasses.FrozenInstanceError):
    settings.seed = 1  # frozen: a step cannot change what the next reads


def test_given_clients_and_tff_data_are_kept_as_given(tmp_path):
  given = run_settings.DataSettings.of(_config(tmp_path, num_clients=33, clients_per_round=5))
  assert given.num_clients == 33
  tff_data = run_settings.DataSettings.of(
      _config(tmp_path, data="tff", cache_dir=str(tmp_path / "cache")))
  assert tff_data.source == "tff" and tff_data.num_clients is None
  assert tff_data.cache_dir == str(tmp_path / "cache")
