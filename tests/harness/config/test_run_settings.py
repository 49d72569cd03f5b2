"""A run's settings by step (harness/config/run_settings.py): the data
settings are the config's, derived once, frozen; so are the mechanism's
(`ExperimentConfig.mechanism_settings`, `protocol.MechanismSettings`)."""

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


def test_the_mechanism_is_given_its_settings_built_once_frozen(tmp_path):
  config = _config(tmp_path, aggregator="banded", clip=0.1, bands=2,
                   num_rounds=8, clients_per_round=4)
  settings = config.mechanism_settings
  assert settings is config.mechanism_settings  # built once, at construction
  assert (settings.aggregator, settings.insertion, settings.clip,
          settings.noise_multiplier, settings.clients_per_round,
          settings.sampling, settings.num_rounds) == (
              "banded", "server", 0.1, 0.5, 4, "shuffle", 8)
  # Its own settings, resolved, read as attributes; another's are not there.
  assert settings.own == {"bands": 2} and settings.bands == 2
  with pytest.raises(AttributeError, match="blt_buffers"):
    settings.blt_buffers  # pylint: disable=pointless-statement
  with pytest.raises(dataclasses.FrozenInstanceError):
    settings.clip = 1.0
  # The same settings from the run's config.json (the report's), and the
  # mechanism's methods read either alike.
  mechanism = config.mechanism
  assert mechanism.settings_of(config.as_dict()) == settings
  assert mechanism.settings_of(settings) is settings
  assert settings.as_dict()["bands"] == 2
  assert (mechanism.section_settings(settings)
          == mechanism.section_settings(config.as_dict()))


def test_an_older_config_json_reads_with_its_defaults(tmp_path):
  values = _config(tmp_path).as_dict()
  del values["insertion"]
  settings = experiment_config.ExperimentConfig().mechanism.settings_of(
      values)
  assert settings.insertion == "server" and settings.own == {}
