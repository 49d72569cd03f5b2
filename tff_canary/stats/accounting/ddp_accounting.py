"""Analytical epsilon of TFF's distributed DP (discrete Gaussian, Skellam).

TFF's `DistributedDpSumFactory` emits no DpEvent (`TODO: b/221465205`), so
this module computes the reference epsilon from the factory's own parameters
(`ddp_parameters`): the integer-domain L2 and L1 sensitivities after
conditional randomized rounding, and the noise shares the clients add. Both
bounds are Renyi-DP (RDP) curves, composed over r participations by adding
them (Mironov 2017, arXiv 1702.07476, Proposition 1) and converted to
(epsilon, delta) by dp_accounting's `compute_epsilon`, i.e.
  epsilon = min_alpha  rdp(alpha) + log((alpha - 1)/alpha)
                       - (log delta + log alpha) / (alpha - 1)
(Canonne, Kamath & Steinke 2020, arXiv 2004.00010, Proposition 12).

Distributed discrete Gaussian (Kairouz, Liu & Steinke 2021, "The Distributed
Discrete Gaussian Mechanism for Federated Learning with Secure Aggregation",
arXiv 2102.06387). n clients each add N_Z(0, sigma^2) to every coordinate
(sigma >= 1/2, integer units); for any shift Delta in Z^d with ||Delta||_2 <=
D2 and ||Delta||_1 <= D1, and tau = 10 sum_{k=1}^{n-1}
exp(-2 pi^2 sigma^2 k/(k+1)), Proposition 14 (Eq. 17; the bound the authors'
accounting code cites, and the source of their Theorem 1) gives for alpha >= 1
  D_alpha <= min{ alpha D2^2 / (2 n sigma^2) + tau d,
                  alpha/2 (D2^2/(n sigma^2) + 2 D1 tau / (sqrt(n) sigma) + tau^2 d),
                  alpha/2 (D2 / (sqrt(n) sigma) + tau sqrt(d))^2 }.
The third term is rho-zCDP with rho = (D2/(sqrt(n) sigma) + tau sqrt(d))^2/2
and, as alpha >= 1, the first implies rho = D2^2/(2 n sigma^2) + tau d: the
concentrated-DP form with the tau correction of their Theorem 1
(`ddg_zcdp_rho`; we derive it here from Proposition 14 ourselves, so its
constants rest on the tests against exact divergences). tau vanishes as
sigma grows: then the bound is the continuous Gaussian's RDP with noise std
sqrt(n) sigma.

Distributed Skellam (Agarwal, Kairouz & Liu 2021, "The Skellam Mechanism for
Differentially Private Federated Learning", NeurIPS, arXiv 2110.04995). The
sum of the shares is Skellam with variance mu per coordinate (closed under
summation); for integer alpha > 1 and integer shifts, Theorem 3.5 (the
multidimensional Skellam mechanism) gives
  D_alpha <= alpha D2^2 / (2 mu) + min{ ((2 alpha - 1) D2^2 + 6 D1) / (4 mu^2),
                                       3 D1 / (2 mu) }.

Both hold for add/remove of one client whose vector, after rounding, has
norms within (D2, D1) while the same noise shares are present. Modular
wrapping is post-processing of the noised sum and cannot raise epsilon.
Subsampling is not modelled: the adversary knows the rounds a client took
part in, as in the paper's analytical epsilon. NumPy, SciPy, dp-accounting.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, Optional

from dp_accounting.rdp import rdp_privacy_accountant
import numpy as np
import numpy.typing as npt

from tff_canary.stats.accounting import gaussian_accounting
from tff_canary.stats import validation
from tff_canary.stats.accounting.ddp_parameters import DdpParameters

# RDP orders: real ones for the discrete Gaussian (Proposition 14 holds for
# alpha >= 1), integers for Skellam (Theorem 3.5 needs integer alpha).
INTEGER_ORDERS = np.unique(np.concatenate(
    [np.arange(2, 257), np.round(np.geomspace(256, 1e6, 200))])).astype(float)
REAL_ORDERS = np.unique(np.concatenate(
    [1.0 + np.geomspace(1e-4, 1.0, 60), INTEGER_ORDERS]))

DDG_BOUND = ("Kairouz, Liu & Steinke 2021 (arXiv 2102.06387) Proposition 14 "
             "RDP")
SKELLAM_BOUND = ("Agarwal, Kairouz & Liu 2021 (arXiv 2110.04995) Theorem 3.5 "
                 "RDP")
CONVERSION = "RDP to (ε, δ) by Canonne, Kamath & Steinke 2020 Prop. 12"


def _check_sensitivities(l2_sensitivity, l1_sensitivity):
  d2 = validation.as_nonnegative(l2_sensitivity, "l2_sensitivity")
  d1 = validation.as_nonnegative(l1_sensitivity, "l1_sensitivity")
  return d2, d1


def _as_orders(orders: npt.ArrayLike, integer: bool) -> np.ndarray:
  a = validation.as_sample(np.atleast_1d(np.asarray(orders, dtype=float)),
                           "orders", min_size=1, lower=2.0 if integer else 1.0)
  if integer and np.any(a != np.round(a)):
    raise ValueError("orders must be integers >= 2 for the Skellam bound, got"
                     f" {validation.show(orders)}.")
  return a


def ddg_tau(sigma: float, num_shares: int) -> float:
  """tau = 10 sum_{k=1}^{n-1} exp(-2 pi^2 sigma^2 k/(k+1)) (arXiv 2102.06387)."""
  sigma = validation.as_positive(sigma, "sigma")
  n = validation.as_int(num_shares, "num_shares", minimum=1)
  k = np.arange(1, n, dtype=float)
  return float(10.0 * np.sum(np.exp(-2.0 * math.pi**2 * sigma**2 * k
                                    / (k + 1.0))))


def ddg_rdp(orders: npt.ArrayLike, *, l2_sensitivity: float,
            l1_sensitivity: float, sigma: float, num_shares: int,
            dim: int) -> np.ndarray:
  """Proposition 14 of arXiv 2102.06387 (module docstring) at each order.

  Args:
    orders: alphas >= 1.
    l2_sensitivity: D2, the L2 norm of the integer shift.
    l1_sensitivity: D1, the L1 norm of the integer shift.
    sigma: each share's discrete-Gaussian scale, >= 1/2 (0: no noise, inf).
    num_shares: n, the shares summed.
    dim: d, the number of coordinates.
  """
  a = _as_orders(orders, integer=False)
  d2, d1 = _check_sensitivities(l2_sensitivity, l1_sensitivity)
  sigma = validation.as_nonnegative(sigma, "sigma")
  n = validation.as_int(num_shares, "num_shares", minimum=1)
  dim = validation.as_int(dim, "dim", minimum=1)
  if sigma == 0.0:
    return np.full(a.shape, 0.0 if d2 == 0 else math.inf)
  if sigma < 0.5:
    raise ValueError(f"sigma must be >= 1/2 for Proposition 14, got {sigma}.")
  tau = ddg_tau(sigma, n)
  s = math.sqrt(n) * sigma
  term1 = a * d2**2 / (2 * s**2) + tau * dim
  term2 = a / 2 * (d2**2 / s**2 + 2 * d1 * tau / s + tau**2 * dim)
  term3 = a / 2 * (d2 / s + tau * math.sqrt(dim))**2
  return np.minimum(np.minimum(term1, term2), term3)


def ddg_zcdp_rho(*, l2_sensitivity: float, sigma: float, num_shares: int,
                 dim: int) -> float:
  """rho-zCDP of the sum of n discrete Gaussians (Theorem 1's form): the
  smaller of the two rho the module docstring derives from Proposition 14 of
  arXiv 2102.06387."""
  d2 = validation.as_nonnegative(l2_sensitivity, "l2_sensitivity")
  sigma = validation.as_positive(sigma, "sigma")
  if sigma < 0.5:
    raise ValueError(f"sigma must be >= 1/2 for Proposition 14, got {sigma}.")
  n = validation.as_int(num_shares, "num_shares", minimum=1)
  dim = validation.as_int(dim, "dim", minimum=1)
  tau = ddg_tau(sigma, n)
  s = math.sqrt(n) * sigma
  return min(d2**2 / (2 * s**2) + tau * dim,
             (d2 / s + tau * math.sqrt(dim))**2 / 2)


def skellam_rdp(orders: npt.ArrayLike, *, l2_sensitivity: float,
                l1_sensitivity: float, variance: float) -> np.ndarray:
  """Theorem 3.5 of arXiv 2110.04995 (module docstring) at integer orders.

  `variance` is mu, the summed Skellam noise's variance per coordinate
  (integer units); 0 means no noise (inf unless the shift is 0).
  """
  a = _as_orders(orders, integer=True)
  d2, d1 = _check_sensitivities(l2_sensitivity, l1_sensitivity)
  mu = validation.as_nonnegative(variance, "variance")
  if mu == 0.0:
    return np.full(a.shape, 0.0 if d2 == 0 else math.inf)
  extra = np.minimum(((2 * a - 1) * d2**2 + 6 * d1) / (4 * mu**2),
                     3 * d1 / (2 * mu))
  return a * d2**2 / (2 * mu) + extra


def gaussian_rdp(orders: npt.ArrayLike, noise_multiplier: float) -> np.ndarray:
  """alpha / (2 z^2): the continuous Gaussian mechanism's RDP (Mironov 2017)."""
  a = _as_orders(orders, integer=False)
  z = validation.as_nonnegative(noise_multiplier, "noise_multiplier")
  return np.full(a.shape, math.inf) if z == 0 else a / (2 * z**2)


def rdp_epsilon(orders: npt.ArrayLike, rdp: npt.ArrayLike,
                delta: float) -> tuple[float, float]:
  """(epsilon, best order) from an RDP curve (module docstring's conversion)."""
  a = _as_orders(orders, integer=False)
  r = np.asarray(rdp, dtype=float)
  if r.shape != a.shape or np.any(np.isnan(r)) or np.any(r < 0):
    raise ValueError(f"rdp must be {a.size} nonnegative numbers (one per "
                     f"order), got {validation.show(rdp)}.")
  delta = validation.as_open_unit(delta, "delta")
  if np.all(np.isinf(r)):
    return math.inf, math.nan
  eps, order = rdp_privacy_accountant.compute_epsilon(a, r, delta)
  return float(eps), float(order)


@dataclasses.dataclass(frozen=True)
class DdpEpsilon:
  """The analytical epsilon of a distributed-DP factory, and its references.

  Attributes:
    parameters: the factory's `DdpParameters`.
    delta, participations: the question (r participations, composed).
    num_shares: noise shares in the sum (the factory assumes
      clients_per_round; fewer under dropout).
    epsilon, order: the bound and its best RDP order.
    bound: which theorem it comes from.
    zcdp_epsilon: DDG only (else NaN): epsilon from the zCDP form.
    tau: DDG's correction (NaN for Skellam).
    noise_std: the summed noise's std, integer units.
    effective_noise_multiplier: noise_std / L2 sensitivity after rounding.
    gaussian_epsilon: the exact epsilon of a continuous Gaussian with that
      multiplier (a reference for the discretization's cost, no guarantee).
    nominal_epsilon: exact Gaussian epsilon at the factory's noise multiplier
      and clip (what a central-DP DpEvent would claim).
  """

  parameters: DdpParameters
  delta: float
  participations: int
  num_shares: int
  epsilon: float
  order: float
  bound: str
  zcdp_epsilon: float
  tau: float
  noise_std: float
  effective_noise_multiplier: float
  gaussian_epsilon: float
  nominal_epsilon: float

  def __str__(self) -> str:
    p = self.parameters
    return (f"analytical ε = {self.epsilon:.4g} at δ = {self.delta:g} for "
            f"{self.participations} participation(s) ({self.bound} at order "
            f"{self.order:.4g}; {CONVERSION}): an upper bound, valid if all "
            f"{self.num_shares} noise shares are added and every client is "
            f"clipped at C = {p.l2_clip:g}; the rounding inflates the L2 "
            f"sensitivity to {p.inflated_l2 / p.l2_clip:.4g} C; nominal "
            f"central-Gaussian ε = {self.nominal_epsilon:.4g}; a continuous "
            f"Gaussian with the same sensitivity and noise: "
            f"{self.gaussian_epsilon:.4g}")

  def as_dict(self) -> dict[str, Any]:
    out = dataclasses.asdict(self)
    out["parameters"] = self.parameters.as_dict()
    out["summary"] = str(self)
    return out


def ddp_epsilon(parameters: DdpParameters, *, delta: float,
                participations: int = 1,
                num_shares: Optional[int] = None) -> DdpEpsilon:
  """The analytical epsilon of a `DistributedDpSumFactory` (module docstring).

  Args:
    parameters: from `ddp_parameters.ddp_parameters`.
    delta: in (0, 1).
    participations: r >= 1 rounds in which the client takes part (RDP adds).
    num_shares: noise shares actually summed (default: clients_per_round).
  """
  if not isinstance(parameters, DdpParameters):
    raise TypeError(f"parameters must be a DdpParameters, got "
                    f"{type(parameters).__name__}.")
  delta = validation.as_open_unit(delta, "delta")
  r = validation.as_int(participations, "participations", minimum=1)
  n = parameters.clients_per_round if num_shares is None else (
      validation.as_int(num_shares, "num_shares", minimum=1))
  p = parameters
  d2, d1 = p.l2_sensitivity, float(p.l1_sensitivity)
  sigma = p.share_std
  noise_std = math.sqrt(n) * sigma
  tau = zcdp_eps = math.nan
  if p.mechanism == "distributed_dgauss":
    orders = REAL_ORDERS
    rdp = ddg_rdp(orders, l2_sensitivity=d2, l1_sensitivity=d1, sigma=sigma,
                  num_shares=n, dim=p.padded_dim)
    bound = DDG_BOUND
    if sigma > 0:
      tau = ddg_tau(sigma, n)
      rho = ddg_zcdp_rho(l2_sensitivity=d2, sigma=sigma, num_shares=n,
                         dim=p.padded_dim)
      zcdp_eps, _ = rdp_epsilon(orders, r * rho * orders, delta)
    else:
      zcdp_eps = math.inf
  else:
    orders = INTEGER_ORDERS
    rdp = skellam_rdp(orders, l2_sensitivity=d2, l1_sensitivity=d1,
                      variance=noise_std**2)
    bound = SKELLAM_BOUND
  eps, order = rdp_epsilon(orders, r * rdp, delta)
  z_eff = noise_std / d2
  return DdpEpsilon(
      parameters=p, delta=delta, participations=r, num_shares=n,
      epsilon=eps, order=order, bound=bound, zcdp_epsilon=zcdp_eps, tau=tau,
      noise_std=noise_std, effective_noise_multiplier=z_eff,
      gaussian_epsilon=gaussian_accounting.repeated_epsilon(z_eff, r, delta),
      nominal_epsilon=gaussian_accounting.repeated_epsilon(
          p.noise_multiplier, r, delta))


__all__ = ["DdpEpsilon", "ddp_epsilon", "ddg_rdp", "ddg_tau", "ddg_zcdp_rho",
           "gaussian_rdp", "rdp_epsilon", "skellam_rdp", "INTEGER_ORDERS",
           "REAL_ORDERS"]
