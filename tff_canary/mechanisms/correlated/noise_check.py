"""A noise self-test for noise correlated across rounds (the TFF side).

The correlated-noise family's check: DP-FTRL's tree, banded and BLT.
`check_correlated_noise(aggregator, value_type, noise=...)` builds a FRESH
aggregation process (a `CanaryDPFactory` of correlated noise with no
canaries scheduled, such as `tff_canary.mechanisms.tree.aggregation.
tree_aggregation`'s, TFF's own
`tff.aggregators.DifferentiallyPrivateFactory.tree_aggregation`, any factory
over a tensorflow_privacy tree or matrix query, or a given unweighted
`tff.templates.AggregationProcess`, initialized anew), runs it for
`num_rounds` rounds on clients whose values are all ZERO, so that each
round's result is its noise alone, and tests that noise against the claimed
linear noise (`tff_canary.stats.correlated.linear_noise.LinearNoise`, the
tree's `tree_noise.TreeNoise`; docs/method/dp-ftrl.md).

The claim. Round t's released noise is e_t = sum_k B[t, k] xi_k with xi_k
iid N(0, sigma^2 I) node noises, so over the rounds each coordinate is
N(0, sigma^2 K), K = B B^T, independent across coordinates. Each round's
result (a mean) is turned into units of the node noise,

    n_t = result_t * denominator / sigma_t,

sigma_t = z C_t the claimed node std of round t's tree: the claimed noise
multiplier z (`noise_multiplier`, or a `CanaryDPFactory`'s
`query_noise.noise_multiplier`) times the clip C_t in the tree query's state
before the round (`clip_value`; `tree_adaptive` moves it at each restart), or
`node_std` when given. Without a claimed z, the `stddev` of the value tree's
`GaussianNoiseGenerator` state is used: the implementation's own number, so
a bug that sets it wrong would be measured against itself (the claim says
which was used). The denominator is the `tfp.NormalizedQuery` state's
(clients_per_round), or `clients_per_round`. n ([T, d], `tree_audit.
audit_ftrl`'s `self_test_noise`) is whitened by the Cholesky factor of the
claimed K (n -> L^-1 n, K = L L^T), which makes correct noise i.i.d.
N(0, 1), and `noise_stats.check_noise` tests it at `level`, per tensor of
the value (whitening mixes rounds, never coordinates).

The tree's shape (efficient or plain, restarts) is not in the process state
in a usable form: `noise` gives it, by default a `CanaryDPFactory`'s
described query's (`described_query.noise(check_rounds)`: a query of
correlated noise declares both). `check_tree_noise` and `TreeNoiseCheck`
are the old names, for one release.
"""

from __future__ import annotations

import contextlib
import dataclasses
from typing import Any, Optional, Sequence
import warnings

import numpy as np

from tff_canary.federated.audit import noise_check
from tff_canary.federated.insertion import factory
from tff_canary.federated.runtime import worker_guard
from tff_canary.federated.structures import nested_search
from tff_canary.stats.noise import noise_stats
from tff_canary.stats.correlated import linear_noise
from tff_canary.stats.correlated import tree_noise as tree_noise_lib
from tff_canary.stats import validation

worker_guard.install()

# Rounds of a tree without restarts: four levels of the tree.
DEFAULT_ROUNDS = 16


@dataclasses.dataclass(frozen=True)
class CorrelatedNoiseCheck:
  """The correlated self-test's verdict, and the noise it tested.

  Attributes:
    passed: the whitened noise passed `noise_stats.check_noise`.
    check: that `noise_stats.NoiseCheck`.
    noise: [T, d] float64, each round's released noise in units of its node
      std (module docstring), the tensors side by side in `tf.nest.flatten`
      order (`check.tensor_names`, `check.tensor_sizes`):
      `tree_audit.audit_ftrl`'s `self_test_noise`.
    node_std: [T] the sigma_t used.
    claimed: the claimed `LinearNoise` (a tree's `TreeNoise`).
  """

  passed: bool
  check: noise_stats.NoiseCheck
  noise: np.ndarray
  node_std: np.ndarray
  claimed: linear_noise.LinearNoise  # a TreeNoise for a tree

  def __str__(self) -> str:
    return f"{self.claimed.kind} {self.check}"

  def as_dict(self) -> dict[str, Any]:
    """noise_check.json: the check's `as_dict` (its verdict, summary and
    tests) with the rounds, the blocks (a tree's trees, under `num_trees`)
    and node stds, not the noise itself."""
    out = self.check.as_dict()
    out.update(summary=str(self), kind=self.claimed.kind,
               num_rounds=int(self.claimed.num_rounds),
               num_trees=int(self.claimed.num_blocks),
               node_std=[float(s) for s in self.node_std])
    return out


def default_rounds(restart_period: Optional[int] = None,
                   restart_warmup: Optional[int] = None) -> int:
  """Rounds that span two restarts (and one round after the second), or
  `DEFAULT_ROUNDS` without restarts."""
  if restart_period is None:
    return DEFAULT_ROUNDS
  horizon = 2 * int(restart_period) + int(restart_warmup or 0) + 2
  restarts = tree_noise_lib.restart_rounds(horizon, restart_period,
                                           restart_warmup)
  return max(DEFAULT_ROUNDS, restarts[1] + 2)


def _dp_query_state(state: Any) -> Any:
  return noise_check.find_dp_state(
      state, "pass node_std and clients_per_round.").query_state


def _tree_state(state: Any) -> Any:
  """The value tree's `TreeResidualSumQuery` state (depth first: the value
  tree comes before `tree_adaptive`'s clipped-count tree); its `clip_value`
  is the clip before the next round."""
  tree = nested_search.find_first(
      _dp_query_state(state), lambda s: hasattr(s, "_fields")
      and "tree_state" in s._fields and "clip_value" in s._fields)
  if tree is None:
    raise noise_check.NoClaimError(
        "the DP query state has no tree query state with a clip_value; "
        "pass node_std.")
  return tree


def _node_std(state: Any) -> float:
  """The value tree's generator stddev: the next round's sigma."""
  generator = _tree_state(state).tree_state.value_generator_state
  if not hasattr(generator, "stddev"):
    raise noise_check.NoClaimError(
        "the DP query state has no tree with a GaussianNoiseGenerator state "
        "(tree_state.value_generator_state.stddev); pass node_std.")
  return float(np.asarray(generator.stddev))


def _claim(aggregator, noise, num_rounds, noise_multiplier):
  """(the claimed `LinearNoise`, the claimed z or None)
  (`check_correlated_noise`'s defaults: a `CanaryDPFactory`'s correlated
  query's)."""
  query, claimed_z = None, None
  if (isinstance(aggregator, factory.CanaryDPFactory)
      and aggregator.query_noise.correlated):
    query, claimed_z = (aggregator.described_query,
                        aggregator.query_noise.noise_multiplier)
  if noise_multiplier is not None:
    z = validation.as_positive(noise_multiplier, "noise_multiplier")
  else:
    z = (float(claimed_z) if claimed_z is not None and claimed_z > 0.0
         else None)
  if noise is not None:
    if not isinstance(noise, linear_noise.LinearNoise):
      raise TypeError(f"noise must be a LinearNoise (a tree's TreeNoise), "
                      f"got {validation.show(noise)}.")
    if num_rounds is not None and num_rounds != noise.num_rounds:
      raise ValueError(f"num_rounds={num_rounds} differs from the claimed "
                       f"tree's {noise.num_rounds} rounds.")
    return noise, z
  if query is None:
    raise TypeError("noise (the claimed linear_noise.LinearNoise, a tree's "
                    "TreeNoise) is required unless aggregator is a "
                    "CanaryDPFactory of correlated noise.")
  return query.noise(query.check_rounds if num_rounds is None
                     else num_rounds), z


def _shape(claimed: linear_noise.LinearNoise) -> str:
  """The claimed noise's rounds and restarts, for the check's claim."""
  if not isinstance(claimed, tree_noise_lib.TreeNoise):  # a matrix strategy's
    return (f"{claimed.num_rounds} rounds of the claimed linear noise, "
            f"blocks of {list(claimed.rounds_per_block)} rounds")
  restarts = tree_noise_lib.restart_rounds(
      claimed.num_rounds, claimed.restart_period, claimed.restart_warmup)
  return (f"{claimed.num_rounds} rounds of the "
          f"{'efficient' if claimed.efficient else 'plain'} tree, restarts "
          f"after rounds {restarts}")


def check_correlated_noise(
    aggregator: Any,
    value_type: Any = None,
    *,
    noise: Optional[linear_noise.LinearNoise] = None,
    num_rounds: Optional[int] = None,
    num_clients: int = 1,
    clients_per_round: Optional[float] = None,
    node_std: Any = None,
    noise_multiplier: Optional[float] = None,
    level: float = noise_stats.DEFAULT_LEVEL,
    seed: int = 0,
    tensor_names: Optional[Sequence[str]] = None,
) -> CorrelatedNoiseCheck:
  """Runs a fresh correlated aggregation on zero values and tests its noise.

  Args:
    aggregator: an unweighted aggregation factory over a tree or matrix
      query (`create(value_type)` is called) or such an unweighted
      `tff.templates.AggregationProcess` (initialized anew). A
      `CanaryDPFactory` must have no canary scheduled in these rounds.
    value_type: the value's TFF type; optional for a process.
    noise: the claimed tree, `tree_noise.tree_noise(T, ...)` (or any
      `LinearNoise`, e.g. a matrix strategy's, with node_std); default the
      `CanaryDPFactory`'s `described_query.noise(num_rounds)`.
    num_rounds: T; default `noise.num_rounds`, else the described query's
      `check_rounds` (`default_rounds` of its restarts).
    num_clients: zero-valued clients per round (>= 1).
    clients_per_round: the denominator; default the query state's.
    node_std: sigma, one number or one per round; default z C_t, or the
      value tree's generator `stddev` without a claimed z (module
      docstring).
    noise_multiplier: the claimed z; default a `CanaryDPFactory`'s
      `query_noise.noise_multiplier`, else None (the generator's stddev).
    level: family-wise level of `noise_stats.check_noise`.
    seed: its subsample seed.
    tensor_names: names of the value's tensors in `tf.nest.flatten` order
      (default tensor0, ...).

  Returns:
    A `CorrelatedNoiseCheck`.

  Raises:
    TypeError, ValueError: for bad arguments, naming them.
    noise_check.NoClaimError: when the state does not give sigma and
      `node_std` is None.
  """
  if num_rounds is not None:
    num_rounds = validation.as_int(num_rounds, "num_rounds", minimum=2)
  claimed, z = _claim(aggregator, noise, num_rounds, noise_multiplier)
  num_rounds = claimed.num_rounds
  num_clients = validation.as_int(num_clients, "num_clients", minimum=1)
  if clients_per_round is not None:
    clients_per_round = validation.as_positive(clients_per_round,
                                               "clients_per_round")
  given = (None if node_std is None else
           noise_stats.as_claimed_stds(node_std, num_rounds))
  if given is not None and min(given) <= 0.0:
    raise ValueError(f"node_std must be positive, got {node_std!r}.")
  rows, sigmas, denominators = [], [], []
  with contextlib.closing(noise_check.zero_rounds(
      aggregator, value_type, num_rounds, num_clients)) as zero:
    for t, (state, output) in enumerate(zero):
      if given is not None:
        sigma = given[t]
      elif z is not None:
        sigma = z * float(np.asarray(_tree_state(state).clip_value))
      else:
        sigma = _node_std(state)
      if sigma <= 0.0:
        raise ValueError(f"the tree's node std before round {t} is {sigma}: "
                         "zero noise has no tree law to test.")
      denominator = (noise_check.denominator_of(_dp_query_state(state))[0]
                     if clients_per_round is None else clients_per_round)
      tensors = noise_check.flat_tensors(output.result)
      sizes = [x.size for x in tensors]
      rows.append(np.concatenate(tensors) * denominator / sigma)
      sigmas.append(sigma)
      denominators.append(denominator)
  released = np.stack(rows)
  whitened = linear_noise.whiten(released, claimed.covariance)
  if given is not None:
    source = "given"
  elif z is not None:
    source = f"z C_t with the claimed z = {z:g}"
  else:
    source = "the generator's stddev"
  claim = (f"{claimed.kind} covariance (whitened): {_shape(claimed)}; "
           "sigma_t = "
           f"{source} "
           f"({min(sigmas):.6g}..{max(sigmas):.6g}), denominator "
           f"{denominators[0]:g}")
  check = noise_stats.check_noise(
      linear_noise.split_tensors(whitened, sizes), 1.0, level=level,
      seed=seed, claim=claim, tensor_names=tensor_names)
  released.setflags(write=False)
  return CorrelatedNoiseCheck(passed=check.passed, check=check,
                              noise=released, node_std=np.array(sigmas),
                              claimed=claimed)


__all__ = ["CorrelatedNoiseCheck", "DEFAULT_ROUNDS", "check_correlated_noise",
           "default_rounds"]

# The names this module had as federated.audit.tree_noise_check.
_OLD_NAMES = {"TreeNoiseCheck": "CorrelatedNoiseCheck",
              "check_tree_noise": "check_correlated_noise"}


def __getattr__(name: str):
  """`TreeNoiseCheck` and `check_tree_noise`, renamed for the family they
  serve (tree, banded, BLT), for one release (docs/changelog.md)."""
  if name in _OLD_NAMES:
    warnings.warn(f"{name} is tff_canary.mechanisms.correlated.noise_check."
                  f"{_OLD_NAMES[name]}.", DeprecationWarning, stacklevel=2)
    return globals()[_OLD_NAMES[name]]
  raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
