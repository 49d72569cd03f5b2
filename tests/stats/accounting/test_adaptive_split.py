"""Tests of tff_canary.stats.accounting.adaptive_split: TFF's adaptive-clipping split.

The comparison with TFF's own `adaptive_clip_noise_params` is in
tests/stats/accounting/test_ledger.py, with everything else that imports TFF.
"""

from __future__ import annotations

import pytest

from tff_canary.stats.accounting.adaptive_split import adaptive_clipping_event
from tff_canary.stats.accounting.adaptive_split import adaptive_clipping_noise_multipliers
from tff_canary.stats.accounting.effective_noise import effective_noise_multiplier


def test_adaptive_split_recovers_total_noise_multiplier():
  for z in (0.05, 0.3, 1.0, 2.5):
    for clients in (50.0, 100.0, 1000.0):
      if z >= 2 * 0.05 * clients:
        continue
      value_z, count_std = adaptive_clipping_noise_multipliers(
          z, clients)
      assert count_std == 0.05 * clients
      assert value_z > z
      effective = (value_z**-2 + (2 * count_std)**-2)**-0.5
      assert effective == pytest.approx(z, rel=1e-12)
      event = adaptive_clipping_event(z, clients)
      assert effective_noise_multiplier(event) == pytest.approx(
          z, rel=1e-12)


def test_adaptive_split_degenerate_and_refused():
  assert adaptive_clipping_noise_multipliers(0.0, 10) == (0.0, 0.0)
  assert adaptive_clipping_noise_multipliers(0.0, 10, 3.0) == (
      0.0, 3.0)
  with pytest.raises(ValueError, match="clipped_count_stddev=0.5"):
    adaptive_clipping_noise_multipliers(1.0, 10)
  with pytest.raises(ValueError, match="clipped_count_stddev=0.0"):
    adaptive_clipping_noise_multipliers(0.1, 100, 0.0)
  with pytest.warns(UserWarning, match="value query needs"):
    value_z, _ = adaptive_clipping_noise_multipliers(0.99, 10.0)
  assert value_z / 0.99 >= 2
