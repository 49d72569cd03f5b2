"""Distributed DP's planted bugs as a user would write them: a buggy DDP chain.

Issue 10's DDP bug class, an ordinary user-side `tff.aggregators` factory
(no TFF or tensorflow_privacy module is patched); what each run of it shows:
docs/guide/distributed-dp.md ("Each bug once in a real TFF run"). The
Gaussian mechanism's are `tff_canary.mechanisms.gaussian.planted_bugs`.

* `ddp_sum_factory(parameters)`: TFF's `DistributedDpSumFactory` chain
  (`tff_canary.mechanisms.ddp.chain`) with a bug planted: the
  shortfall (parameters of `expected_clients_per_round` = k x the clients
  that take part, so the sum carries 1/sqrt(k) of the claimed noise std),
  `clip_factor` (clients clipped at `clip_factor` x C, the query's integer
  norm bounds raised to match, since TFF's DDP queries assert them, while
  the scale, the shares and the claim stay C's) or `share_reuse`
  (`ShareReuseSkellamQuery`: each client's share for the second half of its
  rotated integer vector repeats the first half's;
  `ddp_noise_check.check_ddp_noise` finds it).

`tests/harness/runner/test_planted_bug_runs.py` checks that the chain's state holds the
real factory's scale, norm bounds and local std.
"""

from __future__ import annotations

import dataclasses
import importlib
import math
import warnings

import tensorflow as tf
import tensorflow_federated as tff
import tensorflow_privacy as tfp

from tff_canary.federated.runtime import worker_guard
from tff_canary.mechanisms.ddp import chain as ddp_chain
from tff_canary.stats import validation
from tff_canary.stats.accounting import ddp_parameters

worker_guard.install()


class ShareReuseSkellamQuery(tfp.DistributedSkellamSumQuery):
  """Each client's share for the second half of its vector repeats the first
  half's (module docstring)."""

  def add_noise_to_sample(self, local_stddev, record):
    parent = super()

    def add(v):
      flat = tf.reshape(v, [-1])
      half = tf.size(flat) // 2
      noise = parent.add_noise_to_sample(local_stddev, tf.zeros_like(
          flat[:half]))
      pad = tf.zeros([tf.size(flat) - 2 * half], v.dtype)
      return v + tf.reshape(tf.concat([noise, noise, pad], 0), tf.shape(v))

    return tf.nest.map_structure(add, record)


def ddp_query(parameters: ddp_parameters.DdpParameters, *,
              share_reuse: bool = False,
              clip_factor: float = 1.0) -> tfp.DPQuery:
  """TFF's distributed query for `parameters` (integer domain;
  `ddp_chain.ddp_query` without a bug).

  `share_reuse`: `ShareReuseSkellamQuery` instead (Skellam only).
  `clip_factor`: the query's norm bounds are those of a clip at
  `clip_factor` x C (TFF's formulas, `ddp_parameters`), the noise that of C.
  """
  factor = validation.as_positive(clip_factor, "clip_factor")
  if factor != 1.0:
    inflated = ddp_parameters.inflated_l2_bound(
        factor * parameters.l2_clip, parameters.gamma, parameters.beta,
        parameters.padded_dim)
    l2 = (inflated + ddp_parameters.NORM_LEEWAY) * parameters.scale
    parameters = dataclasses.replace(
        parameters, l2_sensitivity=l2,
        l1_sensitivity=math.ceil(l2 * min(math.sqrt(parameters.padded_dim),
                                          l2)))
  if not share_reuse:
    return ddp_chain.ddp_query(parameters)
  if parameters.mechanism != "distributed_skellam":
    raise ValueError("share_reuse needs mechanism 'distributed_skellam', "
                     f"got {parameters.mechanism!r}.")
  return ShareReuseSkellamQuery(l1_norm_bound=parameters.l1_sensitivity,
                                l2_norm_bound=parameters.l2_sensitivity,
                                local_stddev=parameters.scaled_local_std)


def ddp_sum_factory(parameters: ddp_parameters.DdpParameters, *,
                    share_reuse: bool = False, clip_factor: float = 1.0
                    ) -> tff.aggregators.UnweightedAggregationFactory:
  """`ddp_chain.ddp_sum_factory` (TFF's `DistributedDpSumFactory` chain with
  a plain sum for SecAgg), with a bug planted.

  Args:
    parameters: `ddp_parameters.ddp_parameters(...)` for the factory as told
      (its `clients_per_round` is `expected_clients_per_round`; a shortfall
      bug is parameters for more clients than take part).
    share_reuse: plant the reuse defect in the noise shares
      (`ShareReuseSkellamQuery`).
    clip_factor: plant the clip bug (module docstring): clients clipped at
      `clip_factor` x C, the query's norm bounds set to match.

  Returns:
    An unweighted SUM factory (wrap it in `tff.aggregators.
    UnweightedMeanFactory(value_sum_factory=...)` for a mean). Its `create`
    must run eagerly, as the original's.
  """
  if not isinstance(parameters, ddp_parameters.DdpParameters):
    raise TypeError("parameters must be a tff_canary.stats.accounting.ddp_parameters."
                    f"DdpParameters, got {validation.show(parameters)}.")
  clip = validation.as_positive(clip_factor, "clip_factor") * (
      parameters.l2_clip)
  return ddp_chain.ddp_sum_factory(
      parameters, clip=clip,
      query=ddp_query(parameters, share_reuse=share_reuse,
                      clip_factor=clip_factor))


# The Gaussian mechanism's planted queries, which the old
# `federated.audit.planted_bugs` (this module's old path) held too.
_GAUSSIAN_QUERIES = ("ClipBugQuery", "NoiseReuseQuery")


def __getattr__(name: str):
  """`ClipBugQuery` and `NoiseReuseQuery` through the old path
  `federated.audit.planted_bugs` (one module then, two now), for
  one release (docs/changelog.md)."""
  if name in _GAUSSIAN_QUERIES:
    new = "tff_canary.mechanisms.gaussian.planted_bugs"
    warnings.warn(f"{__name__}.{name} is {new}.{name}.", DeprecationWarning,
                  stacklevel=2)
    return getattr(importlib.import_module(new), name)
  raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = ["ShareReuseSkellamQuery", "ddp_query", "ddp_sum_factory"]
