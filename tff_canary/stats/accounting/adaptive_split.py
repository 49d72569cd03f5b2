"""How TFF splits a noise multiplier under adaptive clipping, and its DpEvent.

Adaptive clipping (Andrew et al. 2021, "Differentially Private Learning with
Adaptive Clipping", NeurIPS, arXiv:1905.03871) releases each round the noised
sum of clipped updates and a noised count of unclipped clients, two Gaussian
mechanisms whose composition TFF holds at the total multiplier z
(`adaptive_clipping_noise_multipliers`). Plain Python and dp-accounting; no
TensorFlow.
"""

from __future__ import annotations

import math
import warnings

import dp_accounting

from tff_canary.stats import validation

# TFF's default clipped-count noise, as a fraction of clients per round.
_DEFAULT_CLIPPED_COUNT_FRACTION = 0.05


def adaptive_clipping_noise_multipliers(
    noise_multiplier: float, clients_per_round: float,
    clipped_count_stddev: float | None = None) -> tuple[float, float]:
  """TFF's split of a total noise multiplier under adaptive clipping.

  A NumPy re-derivation of `adaptive_clip_noise_params` in TFF 0.87's
  aggregators/differential_privacy.py, which
  `DifferentiallyPrivateFactory.gaussian_adaptive` uses. The clipped-count
  query (contributions +-1/2, noise std sigma_b) is a Gaussian mechanism with
  multiplier 2 sigma_b; the value query gets z_v with
    z^-2 = z_v^-2 + (2 sigma_b)^-2,  i.e. z_v = (z^-2 - (2 sigma_b)^-2)^(-1/2),
  so that the two compose to exactly z (Andrew et al. 2021; Dong, Roth & Su
  2022, Corollary 3.3). sigma_b defaults to 0.05 * clients_per_round; with
  z = 0 both are 0 (sigma_b keeps a given value). Like TFF, raises if
  z >= 2 sigma_b (no z_v can reach z) and warns if z_v >= 2 z.

  Args:
    noise_multiplier: the total (effective) multiplier z >= 0.
    clients_per_round: the expected number of clients per round, > 0.
    clipped_count_stddev: sigma_b >= 0, or None for TFF's default.

  Returns:
    (value_noise_multiplier, clipped_count_stddev), as TFF returns them.
  """
  noise_multiplier = validation.as_nonnegative(noise_multiplier,
                                               "noise_multiplier")
  clients_per_round = validation.as_positive(clients_per_round,
                                             "clients_per_round")
  if clipped_count_stddev is not None:
    clipped_count_stddev = validation.as_nonnegative(clipped_count_stddev,
                                                     "clipped_count_stddev")
  if noise_multiplier == 0.0:
    return 0.0, 0.0 if clipped_count_stddev is None else clipped_count_stddev
  if clipped_count_stddev is None:
    clipped_count_stddev = _DEFAULT_CLIPPED_COUNT_FRACTION * clients_per_round
  if noise_multiplier >= 2.0 * clipped_count_stddev:
    raise ValueError(
        f"clipped_count_stddev={clipped_count_stddev!r} (default 0.05 * "
        f"clients_per_round) is too small for noise_multiplier="
        f"{noise_multiplier!r}: it must exceed noise_multiplier / 2 = "
        f"{noise_multiplier / 2!r}. Increase clipped_count_stddev or "
        f"clients_per_round, or decrease noise_multiplier.")
  # z_v = (z^-2 - (2 sigma_b)^-2)^(-1/2), written so that no power overflows.
  ratio = noise_multiplier / (2.0 * clipped_count_stddev)
  value_noise_multiplier = noise_multiplier / math.sqrt(1.0 - ratio * ratio)
  if value_noise_multiplier / noise_multiplier >= 2.0:
    warnings.warn(
        f"Adaptive clipping: the value query needs "
        f"{value_noise_multiplier / noise_multiplier:.2f}x the noise of "
        f"noise_multiplier={noise_multiplier!r} (value_noise_multiplier="
        f"{value_noise_multiplier!r}) because clipped_count_stddev="
        f"{clipped_count_stddev!r} is small.")
  return value_noise_multiplier, clipped_count_stddev


def adaptive_clipping_event(
    noise_multiplier: float, clients_per_round: float,
    clipped_count_stddev: float | None = None) -> dp_accounting.DpEvent:
  """The DpEvent TFF's adaptive-clipping DP aggregator records every round.

  `ComposedDpEvent([GaussianDpEvent(z_v), GaussianDpEvent(2 sigma_b)])`, with
  (z_v, sigma_b) from `adaptive_clipping_noise_multipliers`: the value query
  and the clipped-count query (sensitivity 1/2), as tensorflow_privacy's
  `QuantileAdaptiveClipSumQuery.get_noised_result` builds it. Its effective
  noise multiplier is `noise_multiplier`.
  """
  value_noise_multiplier, clipped_count_stddev = (
      adaptive_clipping_noise_multipliers(noise_multiplier, clients_per_round,
                                          clipped_count_stddev))
  return dp_accounting.ComposedDpEvent([
      dp_accounting.GaussianDpEvent(value_noise_multiplier),
      dp_accounting.GaussianDpEvent(2.0 * clipped_count_stddev),
  ])
