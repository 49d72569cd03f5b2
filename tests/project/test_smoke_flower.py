"""The Flower scripts' `--smoke` runs, in the Flower environment.

tests/project/test_smoke.py runs every bench and experiment script's
`--smoke` in the TFF environment, where a Flower script cannot import;
those listed in its `FLOWER_SCRIPTS` run here instead, with this
environment's Python (the Flower venv's; flwr imported below so that the
TFF environment leaves this file out: tests/conftest.py) and the same
rules (`test_smoke.run_smoke`: exit 0, the last line of `LAST_LINES`,
outputs in a temporary directory, nothing written into the working
directory, no TensorFlow loaded).
"""

from __future__ import annotations

import sys

import flwr  # noqa: F401  pylint: disable=unused-import
import pytest

from project import test_smoke


@pytest.mark.parametrize("name", sorted(test_smoke.FLOWER_SCRIPTS))
def test_flower_smoke(name, tmp_path):
  assert name in test_smoke.LAST_LINES, name
  test_smoke.run_smoke(name, tmp_path, sys.executable, numpy_only=True)
