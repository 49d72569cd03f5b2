"""Analytical epsilon of the Gaussian mechanism and of a DP-FedAvg run's ledger.

This is METHOD.md section 8: the epsilon that the accounting promises, to be
compared with the epsilon that the canaries measure. It uses dp-accounting 0.4.3
(the version TFF 0.87 pins) and imports no TensorFlow.

One use of the Gaussian mechanism. A query with L2 sensitivity 1 released with
N(0, z^2 I) noise (z = `noise_multiplier`) is (epsilon, delta)-DP if and only if

  delta >= delta_z(epsilon)
        = Phi(1/(2z) - epsilon z) - e^epsilon Phi(-1/(2z) - epsilon z),

where Phi is the standard normal CDF (Balle & Wang 2018, "Improving the
Gaussian Mechanism for Differential Privacy: Analytical Calibration and Optimal
Denoising", ICML, Theorem 8). Equivalently the mechanism is mu-GDP with
mu = 1/z, and delta_z is the (epsilon, delta) curve of mu-GDP (Dong, Roth & Su
2022, "Gaussian Differential Privacy", JRSS-B, Theorem 2.7 and Corollary 2.13).
delta_z decreases in epsilon from delta_z(0) = erf(1/(2 sqrt(2) z)) to 0, so the
exact epsilon is 0 when delta >= delta_z(0) and otherwise the unique root of
delta_z(epsilon) = delta, which this module brackets and then finds with Brent's
method to full double precision. This is the paper's "analytical epsilon"
(Andrew et al. 2024, section 5.1 and its footnote: the adversary knows the one
round in which the target took part; no amplification, no composition).

log delta_z is evaluated in log space,

  log delta_z(eps) = log Phi(a) + log(1 - exp(eps + log Phi(b) - log Phi(a))),
  a = 1/(2z) - eps z,  b = -1/(2z) - eps z,

with `scipy.special.log_ndtr`, instead of calling dp_accounting's
`GaussianPrivacyLoss(z, 1).get_delta_for_epsilon`, which computes the same
formula. Measured against 80-digit mpmath (see `.notes/analytical.md`), the
dp_accounting function does not lose precision at huge epsilon (it too forms
e^eps Phi(b) as exp(eps + log Phi(b))): both agree with mpmath to about 1e-12
relative for delta >= 1e-300 and epsilon up to 5e5. But it evaluates Phi(a) in
linear space, so for delta below the smallest normal double (~2.2e-308) its
root is wrong by orders of magnitude (delta off by 5e4 relative at 1e-315); it
clips rounding noise to exactly 0, which has no logarithm; and it costs about
2.4 ms per epsilon against 0.03 ms here, which matters inside calibration loops
and bootstraps. The tests check agreement with it and with mpmath.

Compositions of Gaussians. Mechanisms that are mu_i-GDP compose to
sqrt(sum mu_i^2)-GDP (Dong, Roth & Su 2022, Corollary 3.3). With mu_i = 1/z_i,
any number of Gaussian releases about the same record (several queries in one
round, or several rounds) is exactly one Gaussian mechanism with the effective
noise multiplier

  z_eff = (sum_i z_i^-2)^(-1/2),

the reduction that dp_accounting's RDP accountant also makes (McMahan et al.
2018, "A General Approach to Adding Differential Privacy to Iterative Training
Procedures", arXiv:1812.06210, section 3). So r participations without
amplification have epsilon = gaussian_epsilon(z / sqrt(r)), exactly.

Adaptive clipping (Andrew et al. 2021, "Differentially Private Learning with
Adaptive Clipping", NeurIPS, arXiv:1905.03871). Each round releases the noised
sum of clipped updates (multiplier z_v) and a noised count of unclipped clients
whose per-client contribution is +-1/2 with noise std sigma_b, a Gaussian
mechanism with multiplier 2 sigma_b. TFF (`adaptive_clip_noise_params`) fixes
the total multiplier z and solves z^-2 = z_v^-2 + (2 sigma_b)^-2 for z_v,
with sigma_b = 0.05 * clients_per_round by default; its DP aggregator records
`ComposedDpEvent([GaussianDpEvent(z_v), GaussianDpEvent(2 sigma_b)])` per round.

Poisson sampling with rate q over R rounds has no closed form. It is accounted
with dp_accounting's privacy loss distributions (`pld.PLDAccountant`; Meiser &
Mohammadi 2018 "Tight on Budget?", Koskela, Jalko & Honkela 2020, and the
connect-the-dots discretization of Doroshenko et al. 2022, PETS) or with Renyi
DP (`rdp.RdpAccountant`; Mironov 2017, Mironov, Talwar & Zhang 2019
arXiv:1908.10530, converted with Canonne, Kamath & Steinke 2020 arXiv:2004.00010
Proposition 12), which is an upper bound and looser. The PLD is pessimistic, so
its epsilon is an upper bound too; this module refines its discretization
interval (1e-2, 5e-3, ...) until halving it changes epsilon by at most
1e-3 * epsilon + 1e-5, which leaves an overestimate of about a third of that
(the connect-the-dots error shrinks with the square of the interval).
"""

from __future__ import annotations

import collections
import collections.abc
import dataclasses
import json
import math
import numbers
import warnings
from typing import Any, Iterable, Sequence

import attr
import dp_accounting
from dp_accounting import dp_event as dp_event_module
import numpy as np
from scipy import optimize, special

from tff_canary.stats import validation

ACCOUNTANTS = ("pld", "rdp")

# PLD refinement (see the module docstring): first interval, the smallest one
# tried, and the stopping tolerance on the change of epsilon between halvings.
PLD_INITIAL_INTERVAL = 1e-2
PLD_MIN_INTERVAL = 1e-6
PLD_RELATIVE_TOLERANCE = 1e-3
PLD_ABSOLUTE_TOLERANCE = 1e-5

# TFF's default clipped-count noise, as a fraction of clients per round.
_DEFAULT_CLIPPED_COUNT_FRACTION = 0.05

_BRENT_RTOL = 4 * np.finfo(float).eps
_BRENT_XTOL = 1e-300
_BRENT_MAXITER = 500
_MAX_BRACKET_STEPS = 2100  # 2^2100 spans every double from tiny to huge.

_LEDGER_FORMAT = "tff_canary.Ledger"
_LEDGER_VERSION = 1

# The shared message style of validation.py.
show = validation.show


# ---------------------------------------------------------------------------
# The Gaussian mechanism, exactly (Balle & Wang 2018, Theorem 8).


def _log_gaussian_delta(mu: float, epsilon: float) -> float:
  """log delta of mu-GDP at `epsilon` (mu = 1/z), in log space.

  log delta = log Phi(a) + log(1 - exp(epsilon + log Phi(b) - log Phi(a))),
  a = mu/2 - epsilon/mu, b = -mu/2 - epsilon/mu (Balle & Wang 2018, Thm 8).
  Returns -inf where delta underflows or rounds to zero.
  """
  if epsilon == math.inf:
    return -math.inf
  a = 0.5 * mu - epsilon / mu
  b = -0.5 * mu - epsilon / mu
  log_first = float(special.log_ndtr(a))
  if log_first == -math.inf:
    return -math.inf
  gap = epsilon + float(special.log_ndtr(b)) - log_first
  if not gap < 0.0:  # Rounding when delta is far below both terms.
    return -math.inf
  return log_first + math.log(-math.expm1(gap))


def _gaussian_epsilon_of_mu(mu: float, delta: float) -> float:
  """Exact epsilon of mu-GDP at `delta`; mu = 0 gives 0, mu = inf gives inf."""
  if mu == 0.0:
    return 0.0
  if mu == math.inf:
    return math.inf
  log_delta = math.log(delta)
  # delta_z(0) = erf(mu / (2 sqrt 2)); at or below delta, epsilon is 0.
  if _log_gaussian_delta(mu, 0.0) <= log_delta:
    return 0.0
  # Upper bracket: at eps = mu^2/2 + mu t with Phi(-t) = delta, the first term
  # of delta_z equals delta, so delta_z(eps) < delta.
  t = -float(special.ndtri(delta))
  high = 0.5 * mu * mu + mu * t
  if not math.isfinite(high):
    return math.inf  # epsilon exceeds the largest double.
  high = max(high, 1.0)

  def excess(epsilon: float) -> float:
    return _log_gaussian_delta(mu, epsilon) - log_delta

  for _ in range(_MAX_BRACKET_STEPS):
    if excess(high) <= 0.0:
      break
    high *= 2.0
    if not math.isfinite(high):
      return math.inf
  if excess(high) == 0.0:
    return high
  return float(optimize.brentq(excess, 0.0, high, xtol=_BRENT_XTOL,
                               rtol=_BRENT_RTOL, maxiter=_BRENT_MAXITER))


def _mu_of(noise_multiplier: float) -> float:
  """mu = 1/z with 1/0 = inf and 1/inf = 0."""
  if noise_multiplier == 0.0:
    return math.inf
  return 1.0 / noise_multiplier


def gaussian_delta(noise_multiplier: float, epsilon: float) -> float:
  """Exact delta of one use of the Gaussian mechanism at `epsilon`.

  delta = Phi(1/(2z) - epsilon z) - e^epsilon Phi(-1/(2z) - epsilon z)
  (Balle & Wang 2018, Theorem 8), for sensitivity 1 and noise std
  z = `noise_multiplier`; computed in log space, so it is accurate down to the
  smallest positive double. z = 0 (no noise) gives 1 at every epsilon.

  Args:
    noise_multiplier: z >= 0, the noise std in units of the sensitivity.
    epsilon: epsilon >= 0.

  Returns:
    The smallest delta for which the mechanism is (epsilon, delta)-DP.
  """
  noise_multiplier = validation.as_nonnegative(noise_multiplier,
                                               "noise_multiplier")
  epsilon = validation.as_nonnegative(epsilon, "epsilon")
  if noise_multiplier == 0.0:
    return 1.0
  return math.exp(_log_gaussian_delta(1.0 / noise_multiplier, epsilon))


def gaussian_epsilon(noise_multiplier: float, delta: float) -> float:
  """Exact epsilon of one use of the Gaussian mechanism (sensitivity 1).

  The smallest epsilon >= 0 with
    Phi(1/(2z) - epsilon z) - e^epsilon Phi(-1/(2z) - epsilon z) <= delta
  (Balle & Wang 2018, Theorem 8), z = `noise_multiplier`. Zero when
  delta >= erf(1/(2 sqrt(2) z)); otherwise the root is bracketed in
  [0, 1/(2 z^2) + Phi^-1(1 - delta)/z] and found by Brent's method in log
  space to full double precision. Takes about 0.03 ms, also at epsilon = 300
  (z = 0.0496, delta = 8.2e-7) or 5e5 (z = 1e-3).

  Args:
    noise_multiplier: z >= 0. z = 0 means no noise, hence no privacy: inf.
    delta: in (0, 1).

  Returns:
    epsilon in [0, inf]; inf also when it exceeds the largest double
    (z below about 1e-154).
  """
  noise_multiplier = validation.as_nonnegative(noise_multiplier,
                                               "noise_multiplier")
  delta = validation.as_open_unit(delta, "delta")
  return _gaussian_epsilon_of_mu(_mu_of(noise_multiplier), delta)


def gaussian_noise_multiplier(epsilon: float, delta: float) -> float:
  """The noise multiplier z whose exact Gaussian-mechanism epsilon is given.

  Inverts `gaussian_epsilon`: solves
    Phi(mu/2 - epsilon/mu) - e^epsilon Phi(-mu/2 - epsilon/mu) = delta
  for mu = 1/z (Balle & Wang 2018, Theorem 8; delta increases with mu), by
  bracketing mu geometrically and Brent's method. At epsilon = 0 the answer is
  closed-form, z = 1 / (2 sqrt(2) erfinv(delta)): the smallest z with
  epsilon 0 (every larger z also has epsilon 0).

  Args:
    epsilon: epsilon >= 0 (finite).
    delta: in (0, 1).

  Returns:
    z > 0 with gaussian_epsilon(z, delta) == epsilon to about 1e-12 relative.
  """
  epsilon = validation.as_nonnegative(epsilon, "epsilon")
  delta = validation.as_open_unit(delta, "delta")
  if epsilon == 0.0:
    return 1.0 / (2.0 * math.sqrt(2.0) * float(special.erfinv(delta)))
  log_delta = math.log(delta)

  def excess(mu: float) -> float:
    return _log_gaussian_delta(mu, epsilon) - log_delta

  low = high = 1.0
  for _ in range(_MAX_BRACKET_STEPS):
    if excess(low) < 0.0 or low * 0.5 == 0.0:
      break
    low *= 0.5
  for _ in range(_MAX_BRACKET_STEPS):
    if excess(high) > 0.0 or not math.isfinite(high):
      break
    high *= 2.0
  if not (excess(low) < 0.0 < excess(high)):
    raise ValueError(f"gaussian_noise_multiplier: could not bracket the noise "
                     f"multiplier for epsilon={epsilon!r}, delta={delta!r}.")
  mu = optimize.brentq(excess, low, high, xtol=_BRENT_XTOL, rtol=_BRENT_RTOL,
                       maxiter=_BRENT_MAXITER)
  return 1.0 / float(mu)


def repeated_epsilon(noise_multiplier: float, participations: int,
                     delta: float) -> float:
  """Exact epsilon of r Gaussian releases with no amplification.

  The adversary knows the r rounds in which the target took part, each a
  Gaussian mechanism with multiplier z. The r-fold composition of (1/z)-GDP is
  (sqrt(r)/z)-GDP (Dong, Roth & Su 2022, Corollary 3.3), so
    epsilon = gaussian_epsilon(z / sqrt(r), delta).

  Args:
    noise_multiplier: z >= 0 (0 gives inf).
    participations: r >= 1, an integer.
    delta: in (0, 1).

  Returns:
    epsilon in [0, inf].
  """
  noise_multiplier = validation.as_nonnegative(noise_multiplier,
                                               "noise_multiplier")
  participations = validation.as_int(participations, "participations",
                                     minimum=1)
  delta = validation.as_open_unit(delta, "delta")
  return _gaussian_epsilon_of_mu(
      math.sqrt(participations) * _mu_of(noise_multiplier), delta)


# ---------------------------------------------------------------------------
# Poisson sampling: PLD (tight, pessimistic) and RDP (upper bound).



def _pld_epsilon_at(event: dp_accounting.DpEvent, delta: float,
                    interval: float) -> float:
  accountant = dp_accounting.pld.PLDAccountant(
      value_discretization_interval=interval)
  accountant.compose(event)
  return float(accountant.get_epsilon(delta))


def _accountant_epsilon(event: dp_accounting.DpEvent, delta: float,
                        accountant: str) -> float:
  """Epsilon of `event` with the RDP accountant or the refined PLD accountant.

  PLD: the interval starts at PLD_INITIAL_INTERVAL and halves until epsilon
  moves by at most PLD_RELATIVE_TOLERANCE * epsilon + PLD_ABSOLUTE_TOLERANCE
  (the finer value is returned; both are upper bounds).
  """
  if accountant == "rdp":
    rdp = dp_accounting.rdp.RdpAccountant()
    rdp.compose(event)
    return float(rdp.get_epsilon(delta))
  interval = PLD_INITIAL_INTERVAL
  previous = _pld_epsilon_at(event, delta, interval)
  while True:
    interval *= 0.5
    current = _pld_epsilon_at(event, delta, interval)
    if not math.isfinite(current):
      return current
    change = abs(previous - current)
    if change <= PLD_RELATIVE_TOLERANCE * current + PLD_ABSOLUTE_TOLERANCE:
      return current
    if interval <= PLD_MIN_INTERVAL:
      warnings.warn(
          f"PLD epsilon did not settle: it moved by {change:.3g} when the "
          f"discretization interval was halved to {interval:.3g}; returning "
          f"{current!r}, an upper bound that may be loose.")
      return current
    previous = current


def _poisson_event(groups: Sequence[tuple[float, int]],
                   sampling_probability: float) -> dp_accounting.DpEvent:
  """Composed Poisson-sampled Gaussians, one self-composition per multiplier."""
  return dp_accounting.ComposedDpEvent([
      dp_accounting.SelfComposedDpEvent(
          dp_accounting.PoissonSampledDpEvent(
              sampling_probability, dp_accounting.GaussianDpEvent(z)), count)
      for z, count in groups
  ])


def poisson_epsilon(noise_multiplier: float, sampling_probability: float,
                    rounds: int, delta: float, accountant: str = "pld"
                    ) -> float:
  """Epsilon of `rounds` Poisson-sampled Gaussian releases, all iterates seen.

  Each round every client takes part independently with probability q and the
  sum of clipped updates gets N(0, z^2) noise; the accountant composes
  `SelfComposedDpEvent(PoissonSampledDpEvent(q, GaussianDpEvent(z)), rounds)`
  under add-or-remove-one adjacency. "pld": dp_accounting's pessimistic
  connect-the-dots privacy loss distribution (Doroshenko et al. 2022), refined
  until the discretization changes epsilon by at most 1e-3 epsilon + 1e-5
  (up to about 3 s for 500-2000 rounds on this machine). "rdp": Renyi DP
  (Mironov, Talwar & Zhang 2019) with the conversion of Canonne, Kamath &
  Steinke 2020, Proposition 12: an upper bound, never below the PLD value.
  With q = 1 and one round both reduce to one Gaussian mechanism (PLD then
  matches `gaussian_epsilon`).

  Args:
    noise_multiplier: z >= 0 (0 gives inf).
    sampling_probability: q in (0, 1].
    rounds: R >= 1, an integer.
    delta: in (0, 1).
    accountant: "pld" (tight) or "rdp".

  Returns:
    epsilon in [0, inf].
  """
  noise_multiplier = validation.as_nonnegative(noise_multiplier,
                                               "noise_multiplier")
  sampling_probability = validation.as_unit_interval(
      sampling_probability, "sampling_probability", include_low=False)
  rounds = validation.as_int(rounds, "rounds", minimum=1)
  delta = validation.as_open_unit(delta, "delta")
  accountant = validation.as_choice(accountant, "accountant", ACCOUNTANTS)
  if noise_multiplier == 0.0:
    return math.inf
  event = _poisson_event([(noise_multiplier, rounds)], sampling_probability)
  return _accountant_epsilon(event, delta, accountant)


# ---------------------------------------------------------------------------
# Adaptive clipping and effective noise multipliers.


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
    if clipped_count_stddev is None:
      clipped_count_stddev = 0.0
    return 0.0, clipped_count_stddev
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


def _precision(event: Any, where: str) -> float:
  """sum z_i^-2 (= mu^2 of the equivalent Gaussian) over a Gaussian event."""
  if isinstance(event, dp_accounting.GaussianDpEvent):
    z = validation.as_nonnegative(event.noise_multiplier,
                                  f"{where}: the noise_multiplier of {event!r}")
    square = z * z
    return math.inf if square == 0.0 else 1.0 / square
  if isinstance(event, dp_accounting.ComposedDpEvent):
    return math.fsum(_precision(e, where) for e in event.events)
  if isinstance(event, dp_accounting.SelfComposedDpEvent):
    count = event.count
    if (isinstance(count, bool) or not isinstance(count, numbers.Integral)
        or count < 0):
      raise ValueError(f"{where}: {event!r} has an invalid count {count!r}; "
                       f"it must be an integer >= 0.")
    inner = _precision(event.event, where)
    return 0.0 if count == 0 else int(count) * inner
  if isinstance(event, dp_accounting.NoOpDpEvent):
    return 0.0
  if isinstance(event, dp_accounting.NonPrivateDpEvent):
    return math.inf
  if isinstance(event, dp_accounting.DpEvent):
    raise ValueError(
        f"{where}: unsupported event {event!r}. Only GaussianDpEvent and "
        f"ComposedDpEvent / SelfComposedDpEvent of Gaussians (plus NoOpDpEvent "
        f"and NonPrivateDpEvent) have an effective noise multiplier.")
  raise TypeError(f"{where}: expected a dp_accounting.DpEvent, got "
                  f"{show(event)} of type {type(event).__name__}.")


def _multiplier_of_precision(precision: float) -> float:
  if precision == 0.0:
    return math.inf
  if precision == math.inf:
    return 0.0
  return 1.0 / math.sqrt(precision)


def _effective_multiplier(event: dp_accounting.DpEvent, where: str) -> float:
  """(sum z_i^-2)^(-1/2), returning a lone Gaussian's z unrounded."""
  if isinstance(event, dp_accounting.GaussianDpEvent):
    return validation.as_nonnegative(
        event.noise_multiplier, f"{where}: the noise_multiplier of {event!r}")
  return _multiplier_of_precision(_precision(event, where))


def effective_noise_multiplier(event: dp_accounting.DpEvent) -> float:
  """The z of the single Gaussian mechanism equivalent to `event`.

  GaussianDpEvent(z) -> z; ComposedDpEvent of Gaussians (what TFF's adaptive
  DP aggregator records each round) -> (sum_i z_i^-2)^(-1/2);
  SelfComposedDpEvent(e, r) -> z_e / sqrt(r) (Dong, Roth & Su 2022,
  Corollary 3.3; McMahan et al. 2018, arXiv:1812.06210, section 3). Nested
  structures are reduced recursively. NoOpDpEvent -> inf (no release),
  NonPrivateDpEvent or a zero multiplier -> 0 (no privacy).

  Args:
    event: a dp_accounting DpEvent (or its `to_named_tuple()` form).

  Returns:
    The effective noise multiplier in [0, inf].

  Raises:
    ValueError: for events that are not (compositions of) Gaussians, such as
      LaplaceDpEvent or PoissonSampledDpEvent, naming the event.
  """
  return _effective_multiplier(_as_event(event, "event"), "event")


# ---------------------------------------------------------------------------
# Events as plain data (DpEvent.to_named_tuple() form, TFF state, JSON).


def _plain_value(value: Any, where: str) -> Any:
  """A field value of an event as JSON-ready plain Python data."""
  if isinstance(value, dp_accounting.DpEvent) or _looks_like_event(value):
    return _event_to_plain(value, where)
  if isinstance(value, np.ndarray):
    value = value.tolist() if value.ndim else value.item()
  if isinstance(value, (bytes, np.bytes_)):
    return bytes(value).decode()
  if isinstance(value, bool) or value is None or isinstance(value, str):
    return value
  if isinstance(value, numbers.Integral):
    return int(value)
  if isinstance(value, numbers.Real):
    return float(value)
  if isinstance(value, collections.abc.Mapping):
    return {str(k): _plain_value(v, f"{where}.{k}") for k, v in value.items()}
  if isinstance(value, collections.abc.Sequence):
    return [_plain_value(v, f"{where}[{i}]") for i, v in enumerate(value)]
  raise TypeError(f"{where}: cannot store {show(value)} of type "
                  f"{type(value).__name__} in a ledger.")


def _looks_like_event(value: Any) -> bool:
  """A DpEvent as a named tuple (to_named_tuple, TFF state) or a dict."""
  if isinstance(value, collections.abc.Mapping):
    return "class_name" in value
  return hasattr(value, "_fields") and "class_name" in value._fields


def _event_to_plain(event: Any, where: str) -> dict[str, Any]:
  """{"class_name": ..., field: value, ...} for a DpEvent in any form."""
  if isinstance(event, dp_accounting.DpEvent):
    class_name = type(event).__name__
    fields = {f.name: getattr(event, f.name) for f in attr.fields(type(event))}
  elif isinstance(event, collections.abc.Mapping):
    fields = dict(event)
    class_name = fields.pop("class_name")
    fields.pop("module_name", None)
  elif _looks_like_event(event):
    fields = {name: getattr(event, name) for name in event._fields}
    class_name = fields.pop("class_name")
    fields.pop("module_name", None)
  else:
    raise TypeError(f"{where}: expected a dp_accounting.DpEvent, its "
                    f"to_named_tuple() form or a dict, got "
                    f"{show(event)} of type "
                    f"{type(event).__name__}.")
  if isinstance(class_name, (bytes, np.bytes_)):
    class_name = bytes(class_name).decode()
  plain = {"class_name": class_name}
  for name, value in fields.items():
    plain[name] = _plain_value(value, f"{where}.{name}")
  return plain


def _event_class(class_name: Any, where: str) -> type:
  cls = getattr(dp_event_module, class_name, None) if isinstance(
      class_name, str) else None
  if not (isinstance(cls, type) and issubclass(cls, dp_accounting.DpEvent)):
    raise ValueError(f"{where}: {class_name!r} is not a DpEvent class of "
                     f"dp_accounting.dp_event.")
  return cls


def _event_from_plain(plain: dict[str, Any],
                      where: str) -> dp_accounting.DpEvent:
  """Rebuilds a DpEvent from `_event_to_plain` output (classes whitelisted)."""
  cls = _event_class(plain.get("class_name"), where)
  expected = {f.name for f in attr.fields(cls)}
  given = set(plain) - {"class_name"}
  if given != expected:
    raise ValueError(f"{where}: {cls.__name__} needs fields "
                     f"{sorted(expected)}, got {sorted(given)}.")

  def rebuild(value: Any, at: str) -> Any:
    if isinstance(value, dict) and "class_name" in value:
      return _event_from_plain(value, at)
    if isinstance(value, list):
      return [rebuild(v, f"{at}[{i}]") for i, v in enumerate(value)]
    return value

  try:
    return cls(**{name: rebuild(plain[name], f"{where}.{name}")
                  for name in expected})
  except Exception as e:  # attrs or DpEvent validation
    raise ValueError(f"{where}: cannot build {cls.__name__} from "
                     f"{show(plain)}: {e}") from None


def _as_event(event: Any, where: str) -> dp_accounting.DpEvent:
  """A DpEvent with plain Python field values, from any accepted form."""
  return _event_from_plain(_event_to_plain(event, where), where)


# ---------------------------------------------------------------------------
# A run's ledger.


@dataclasses.dataclass(frozen=True, eq=True, repr=False)
class Ledger:
  """The privacy ledger of a run: one DpEvent per round, frozen.

  Built from the events TFF's DP aggregator records, one per call to
  `process.next()` (`tff.aggregators.differential_privacy.
  extract_dp_event_from_state(state)`, or the raw `state.dp_event` named
  tuple): `GaussianDpEvent(z)` with fixed clipping,
  `ComposedDpEvent([GaussianDpEvent(z_v), GaussianDpEvent(2 sigma_b)])` with
  adaptive clipping. Events may also be given in `DpEvent.to_named_tuple()`
  form or as the dicts of `to_json`. Every event must reduce to a Gaussian
  (see `effective_noise_multiplier`); the per-round effective multipliers are
  kept in `noise_multipliers`.

  Rounds are 0-based positions in `events`: round t is the (t+1)-th call to
  `process.next()`.

  Attributes:
    events: tuple of DpEvents, one per round (at least one).
    noise_multipliers: tuple of the rounds' effective noise multipliers.
  """

  events: tuple[dp_accounting.DpEvent, ...]
  noise_multipliers: tuple[float, ...] = dataclasses.field(init=False,
                                                           compare=False)

  def __post_init__(self):
    events = self.events
    if (isinstance(events, (str, bytes, collections.abc.Mapping))
        or isinstance(events, dp_accounting.DpEvent)
        or _looks_like_event(events)
        or not isinstance(events, collections.abc.Iterable)):
      raise TypeError(f"events must be a sequence of DpEvents, one per round, "
                      f"got {show(events)}.")
    events = tuple(_as_event(e, f"events[{i}]") for i, e in enumerate(events))
    if not events:
      raise ValueError("events must hold at least one round, got 0.")
    multipliers = tuple(_effective_multiplier(e, f"events[{i}]")
                        for i, e in enumerate(events))
    object.__setattr__(self, "events", events)
    object.__setattr__(self, "noise_multipliers", multipliers)

  def __len__(self) -> int:
    return len(self.events)

  def __repr__(self) -> str:
    counts = collections.Counter(self.noise_multipliers)
    shown = ", ".join(f"{z!r} x{n}" for z, n in counts.most_common(3))
    more = ", ..." if len(counts) > 3 else ""
    return (f"Ledger(rounds={len(self)}, noise_multipliers: {shown}{more})")

  # Epsilons ----------------------------------------------------------------

  def epsilon_one_participation(self, delta: float) -> float:
    """The paper's analytical epsilon: the worst single round, exactly.

    max over rounds t of gaussian_epsilon(z_t, delta) (Balle & Wang 2018,
    Theorem 8), which is the epsilon at the smallest effective multiplier:
    the adversary knows the one round in which the target took part.
    """
    delta = validation.as_open_unit(delta, "delta")
    return _gaussian_epsilon_of_mu(
        _mu_of(min(self.noise_multipliers)), delta)

  def epsilon_for_rounds(self, rounds: Iterable[int], delta: float) -> float:
    """Exact epsilon of a target that took part in `rounds`, no amplification.

    The rounds' Gaussian releases compose to one Gaussian with
    z = (sum_{t in rounds} z_t^-2)^(-1/2) (Dong, Roth & Su 2022,
    Corollary 3.3), whose epsilon is exact (Balle & Wang 2018, Theorem 8).

    Args:
      rounds: distinct 0-based round indices (empty gives 0).
      delta: in (0, 1).
    """
    delta = validation.as_open_unit(delta, "delta")
    indices = self._round_indices(rounds)
    precision = math.fsum(
        _precision(self.events[t], f"events[{t}]") for t in indices)
    return _gaussian_epsilon_of_mu(math.sqrt(precision), delta)

  def epsilon_poisson(self, sampling_probability: float, delta: float,
                      accountant: str = "pld") -> float:
    """Epsilon if every round sampled each client with probability q.

    Composes PoissonSampledDpEvent(q, GaussianDpEvent(z_t)) over all rounds,
    z_t the round's effective multiplier (a round's composed Gaussians,
    released together about one sampled record, are one Gaussian; McMahan et
    al. 2018, section 3), grouped into self-compositions of equal z_t. PLD or
    RDP as in `poisson_epsilon`.
    """
    sampling_probability = validation.as_unit_interval(
        sampling_probability, "sampling_probability", include_low=False)
    delta = validation.as_open_unit(delta, "delta")
    accountant = validation.as_choice(accountant, "accountant", ACCOUNTANTS)
    counts = collections.Counter(self.noise_multipliers)
    if 0.0 in counts:
      return math.inf
    groups = sorted((z, n) for z, n in counts.items() if z != math.inf)
    if not groups:
      return 0.0
    return _accountant_epsilon(_poisson_event(groups, sampling_probability),
                               delta, accountant)

  def _round_indices(self, rounds: Any) -> list[int]:
    if isinstance(rounds, (str, bytes)) or not isinstance(
        rounds, (collections.abc.Iterable, np.ndarray)):
      raise TypeError(f"rounds must be a sequence of round indices, got "
                      f"{show(rounds)}.")
    indices = []
    for i, t in enumerate(rounds):
      t = validation.as_int(t, f"rounds[{i}]", minimum=0)
      if t >= len(self):
        raise ValueError(f"rounds[{i}] = {t} is past the last round of the "
                         f"ledger ({len(self) - 1}; rounds are 0-based).")
      indices.append(t)
    if len(set(indices)) != len(indices):
      repeated = sorted(t for t, n in collections.Counter(indices).items()
                        if n > 1)
      raise ValueError(f"rounds must be distinct, but {repeated} repeat.")
    return indices

  # Serialization -------------------------------------------------------------

  def to_json(self, indent: int | None = None) -> str:
    """The ledger as JSON: {"format", "version", "events": [event dicts]}.

    Each event is `{"class_name": ..., <fields>}` with nested events as dicts,
    the fields of `DpEvent.to_named_tuple()`; floats round-trip exactly.
    """
    return json.dumps({
        "format": _LEDGER_FORMAT,
        "version": _LEDGER_VERSION,
        "events": [_event_to_plain(e, f"events[{i}]")
                   for i, e in enumerate(self.events)],
    }, indent=indent)

  @classmethod
  def from_json(cls, text: str | bytes) -> "Ledger":
    """The inverse of `to_json`. Only dp_accounting.dp_event classes load."""
    if not isinstance(text, (str, bytes, bytearray)):
      raise TypeError(f"text must be a JSON string, got "
                      f"{show(text)}.")
    try:
      data = json.loads(text)
    except json.JSONDecodeError as e:
      raise ValueError(f"text is not valid JSON: {e}") from None
    if (not isinstance(data, dict) or data.get("format") != _LEDGER_FORMAT
        or not isinstance(data.get("events"), list)):
      raise ValueError(f"text is not a {_LEDGER_FORMAT} JSON document: "
                       f"{show(text)}")
    if data.get("version") != _LEDGER_VERSION:
      raise ValueError(f"unsupported {_LEDGER_FORMAT} version "
                       f"{data.get('version')!r}; this code reads version "
                       f"{_LEDGER_VERSION}.")
    return cls(tuple(data["events"]))
