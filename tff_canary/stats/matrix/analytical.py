"""The analytical epsilon of a matrix mechanism: exact GDP of sens / z.

The release C x + xi, xi ~ N(0, (z clip)^2 I), is the Gaussian mechanism
with L2 sensitivity sens * clip (`sensitivity`), hence mu-GDP with mu =
sens / z (Dong, Roth & Su 2019, arXiv 1905.02383), and the streaming release
x + C^-1 xi has the same privacy (Choquette-Choo et al. 2023, arXiv
2306.08153). Its exact epsilon at delta is Balle & Wang 2018 ("Improving the
Gaussian Mechanism for Differential Privacy", Thm 8), computed by
`gaussian_accounting.gaussian_epsilon_of_mu`. A canary on the worst-case
pattern a* faces exactly this mu (`strategy_noise.pattern_mu`).

NumPy/SciPy only.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from tff_canary.stats.accounting import gaussian_accounting
from tff_canary.stats.matrix import sensitivity as sensitivity_lib
from tff_canary.stats import validation


@dataclasses.dataclass(frozen=True)
class MatrixEpsilon:
  """The analytical epsilon of a matrix mechanism.

  Attributes:
    epsilon: exact epsilon of `mu` at `delta` (Balle & Wang 2018, Thm 8).
    mu: sensitivity.value / noise_multiplier.
    sensitivity: the worst case, with its pattern a*.
    noise_multiplier, delta: as given.
  """

  epsilon: float
  mu: float
  sensitivity: sensitivity_lib.Sensitivity
  noise_multiplier: float
  delta: float

  def __str__(self) -> str:
    return (f"analytical ε = {self.epsilon:.4g} (exact GDP, μ = "
            f"{self.mu:.4g}); z = {self.noise_multiplier:g}, δ = "
            f"{self.delta:g}, {self.sensitivity}")

  @property
  def rdp_epsilon(self) -> None:
    """No Rényi-DP account: the GDP epsilon above is exact."""
    return None

  def rows(self) -> list[tuple[str, float, str]]:
    """(name, epsilon, detail) of the claim, as a report shows it."""
    rule = self.sensitivity.rule_text()
    worst = np.flatnonzero(self.sensitivity.pattern).tolist()
    return [(f"DP-FTRL, {rule} (exact GDP, μ = sens / z)", self.epsilon,
             f"what the accounting guarantees: the rounds released as C x + "
             f"ξ, never restarted, sens = max ‖C a‖ over every a of {rule} "
             f"in {self.sensitivity.rounds} rounds (the worst case a*: "
             f"rounds {worst})")]


def matrix_epsilon(sensitivity: sensitivity_lib.Sensitivity, *,
                   noise_multiplier: float, delta: float) -> MatrixEpsilon:
  """The exact epsilon at delta of mu = sensitivity.value / noise_multiplier."""
  if not isinstance(sensitivity, sensitivity_lib.Sensitivity):
    raise TypeError(f"sensitivity must be a Sensitivity (sensitivity."
                    f"toeplitz_sensitivity), got "
                    f"{validation.show(sensitivity)}.")
  z = validation.as_positive(noise_multiplier, "noise_multiplier")
  delta = validation.as_open_unit(delta, "delta")
  mu = sensitivity.value / z
  return MatrixEpsilon(
      epsilon=gaussian_accounting.gaussian_epsilon_of_mu(mu, delta), mu=mu,
      sensitivity=sensitivity, noise_multiplier=z, delta=delta)


__all__ = ["MatrixEpsilon", "matrix_epsilon"]
