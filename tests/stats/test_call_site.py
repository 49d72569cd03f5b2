"""Warnings that suspect a bug fire only on significant evidence, say what
to do, and point at the user's line (tff_canary/stats/call_site.py)."""

import io
import os
import subprocess
import sys
import warnings

import numpy as np
import pytest

from tff_canary.stats import call_site
from tff_canary.stats import results
from tff_canary.stats.canaries import canary_config
from tff_canary.stats.canaries import schedules
from tff_canary.stats.estimators import estimates

DIM = 10_000


def _final_cosines(shift, n=40, seed=0):
  # Inserted final-model cosines: the null's N(0, 1/d) shifted by `shift`
  # null standard deviations.
  rng = np.random.default_rng(seed)
  return (shift + rng.standard_normal(n)) / np.sqrt(DIM)


def test_a_drowned_correct_run_gets_no_sign_warning():
  # Canaries drowned by noise: a true mean of 0 sits below the null's mean
  # about half the time (seed 3 puts it 1.3 standard errors below). Only a
  # one-sided p below 1e-3 is evidence of a sign error (sign_tests).
  x = _final_cosines(0.0, seed=3)
  assert x.mean() < 0
  with warnings.catch_warnings():
    warnings.simplefilter("error", results.SignConventionWarning)
    result = estimates.epsilon_final(x, dim=DIM, delta=1e-5)
  assert result.inserted_below_null  # still recorded in the result


def test_a_sign_error_warns_at_the_callers_line_with_what_to_do():
  x = -_final_cosines(3.0)  # a real signal, negated: u = theta_T - theta_0
  with pytest.warns(results.SignConventionWarning) as caught:
    estimates.epsilon_final(x, dim=DIM, delta=1e-5)
  (w,) = [w for w in caught.list
          if issubclass(w.category, results.SignConventionWarning)]
  assert w.filename == __file__  # this line, not the estimator's
  text = str(w.message)
  assert "Student's t-test gives p = " in text and "at most 0.001" in text
  assert "initial minus final" in text


def test_too_many_canaries_warns_at_the_callers_line():
  with pytest.warns(canary_config.TooManyCanariesWarning) as caught:
    canary_config.check_orthogonality(40, dim=100)
  assert caught.list and all(w.filename == __file__ for w in caught.list)


@pytest.mark.tff
def test_too_many_canaries_through_the_tff_factory_warns_at_the_callers_line():
  # The check runs when TFF builds the aggregation process: the warning used
  # to point at a TFF file.
  import tensorflow_federated as tff  # pylint: disable=g-import-not-at-top
  from tff_canary.federated.insertion import factory  # pylint: disable=g-import-not-at-top
  config = canary_config.CanaryConfig(
      seed=0, num_inserted=20, num_held_out=20,
      schedule=schedules.FixedPresentations(num_rounds=2, presentations=1),
      directions="gaussian")  # orthogonal canaries are exactly orthogonal
  aggregator = factory.CanaryDPFactory.gaussian_fixed(
      noise_multiplier=1.0, clients_per_round=4, clip=1.0, canaries=config)
  with pytest.warns(canary_config.TooManyCanariesWarning) as caught:
    aggregator.create(tff.types.TensorType(np.float32, [100]))
  assert caught.list and all(w.filename == __file__ for w in caught.list)


def test_user_stacklevel_skips_the_package_frames():
  # Called from outside the package, the caller itself is the user's frame.
  assert call_site.user_stacklevel() == 1


def _shown_by(hook, filename):
  out = io.StringIO()
  hook("a message", UserWarning, filename, 1, file=out)
  return out.getvalue()


def test_a_command_line_shows_the_packages_warnings_as_their_message():
  passed = []
  hook = call_site.line_showwarning(
      lambda *args: passed.append(args[2]), "/opt/scripts")
  package_file = os.path.abspath(call_site.__file__)
  assert _shown_by(hook, package_file) == "warning: a message\n"
  assert _shown_by(hook, "/opt/scripts/run.py") == "warning: a message\n"
  # Python's "sys:1": the stack level passed the outermost frame.
  assert _shown_by(hook, "sys") == "warning: a message\n"
  # A library's, or a user's own file: Python's format, with its location.
  for other in ("/lib/site-packages/tensorflow/x.py", "/opt/scripts2/y.py",
                "/home/me/loop.py"):
    assert _shown_by(hook, other) == ""
  assert passed == ["/lib/site-packages/tensorflow/x.py",
                    "/opt/scripts2/y.py", "/home/me/loop.py"]


def test_the_report_command_prints_its_warnings_as_lines(tmp_path):
  # A run whose inserted canaries sit below the null (a negated signal):
  # SignConventionWarnings, which `python -m tff_canary report` printed as
  # "sys:1: SignConventionWarning: ..." (no frame outside the package).
  import fake_runs  # pylint: disable=g-import-not-at-top
  path = fake_runs.make_run(tmp_path / "run", shift=-3.0)
  proc = subprocess.run(
      [sys.executable, "-m", "tff_canary", "report", str(path),
       "--no_plots"], capture_output=True, text=True, timeout=120)
  assert proc.returncode == 0, proc.stderr[-3000:]
  lines = proc.stderr.splitlines()
  assert lines and all(l.startswith("warning: The inserted ") or
                       l.startswith("warning: The max model's ")
                       for l in lines), lines
  # The sign tests' text (sign_tests.warn_if_below), each comparison once:
  # the estimates and the bounds name the same one alike.
  assert "(one-sided): a correct run gives a p below 0.001" in lines[0]
  assert len(set(lines)) == len(lines)
  assert not any("null's mean" in l for l in lines), lines
