"""What a Flower run's report says beside the analytical ε (NumPy only).

A Flower run's directory (`harness.writing.flower_run.write_run`) holds
flower_accountant.json: Flower's own accountant's figure for the run
(`RdpAccountant.get_epsilon` at the report's δ) and whether it applies,
with the reasons it does not (`tff_canary.mechanisms.gaussian.
flower_claim.accountant_record`, which writes it). The report shows it in
one line (`line`), and report.json keeps it as `flower_accountant`. A TFF
run has no such file and its report is unchanged.

The noise self-test's line of a Flower run that ran none points at the
Flower check (`NOISE_CHECK_NOT_RUN`), not at the TFF one.
"""

from __future__ import annotations

import os
from typing import Any, Optional

from tff_canary.harness.recording import run_dir as run_dir_lib
from tff_canary.stats import atomic_files
from tff_canary.stats import results

FLOWER_ACCOUNTANT = "flower_accountant.json"
WRITER = "flower"  # config.json's `writer` of a Flower run

NOISE_CHECK_NOT_RUN = (
    "not run (run tff_canary.mechanisms.gaussian.flower_noise_check."
    "check_flower_noise on your DP strategy, or flower_run.write_run with "
    "noise_check=True; docs/guide/flower.md)")


def load(rd: run_dir_lib.RunDir) -> Optional[dict[str, Any]]:
  """flower_accountant.json of run directory `rd` (None if it has none)."""
  path = rd.file(FLOWER_ACCOUNTANT)
  if not os.path.exists(path):
    return None
  try:
    record = atomic_files.read_json(path)  # restores an infinite epsilon
  except (OSError, ValueError) as error:
    raise run_dir_lib.RunDirError(f"{path} cannot be read: {error}") from None
  if not isinstance(record, dict) or "applies" not in record:
    raise run_dir_lib.RunDirError(
        f"{path} is not a Flower accountant record (no 'applies' key).")
  return record


def line(record: dict[str, Any]) -> str:
  """One line: Flower's accountant's ε beside the exact ε of a client in
  every round, or why it does not apply."""
  ours = results.format_number(record["epsilon_all_rounds"])
  exact = (f"the exact analytical ε of a client in every round is {ours}")
  epsilon = record.get("epsilon")
  figure = ("" if epsilon is None else
            f"ε = {results.format_number(epsilon)} "
            f"({record.get('accounting_method')}, "
            f"{record.get('num_releases')} releases)")
  notes = "".join(f"; {note}" for note in record.get("notes") or [])
  if record["applies"]:
    return (f"Flower's accountant: {figure}, an upper bound (RDP converted "
            f"to (ε, δ) is looser than exact accounting); {exact}{notes}")
  reasons = "; ".join(record.get("reasons") or ["unknown"])
  figure = f" (its figure: {figure})" if figure else ""
  nominal = record.get("epsilon_nominal")
  nominal = ("" if nominal is None or results.format_number(nominal) == ours
             else f" ({results.format_number(nominal)} for the noise "
             "multiplier as given)")
  return (f"Flower's accountant does not apply{figure}: {reasons}; {exact}, "
          f"of the noise each round really had{nominal}{notes}")


__all__ = ["FLOWER_ACCOUNTANT", "NOISE_CHECK_NOT_RUN", "WRITER", "line",
           "load"]
