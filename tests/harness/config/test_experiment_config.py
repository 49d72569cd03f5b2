"""Every refusal of the issue, as a user types it: fast, clear, nothing written.

Each refused command runs as a subprocess of its script and must exit 2
with one error message (no traceback) within 10 s, without importing
TensorFlow, leaving no output directory (nor any other file) behind
(experiment_config.check_before_tensorflow, preflight). tests/harness/config/test_preflight.py
checks the functions behind them; here also the canary fraction of the
scripts' defaults, the warning's threshold and the DDP bound's remedies.
"""

import os
import re
import subprocess
import sys
import time
import warnings

import pytest

import repo_paths
from tff_canary.harness.config import experiment_config
from tff_canary.harness.config import model_sizes
from tff_canary.harness.config import preflight

REPO = str(repo_paths.REPO)
EXPERIMENTS = os.path.join(REPO, "experiments")
TF_MODULES = {"tensorflow", "tensorflow_federated", "tensorflow_privacy",
              "keras", "jax"}
DDP = ["--aggregator=ddp", "--insertion=clients", "--noseeded_noise",
       "--server_momentum=0"]

# (script, flags, a pattern of the one error message)
REFUSALS = {
    "resume_missing_emnist": (
        "emnist.py", ["--resume"],
        r"^error: --resume needs an existing run, but --output_dir=\S+/out "
        r"does not exist: drop --resume to start a new run"),
    "resume_missing_stackoverflow": (
        "stackoverflow.py", ["--resume"],
        r"^error: --resume needs an existing run, but --output_dir=\S+/out "
        r"does not exist"),
    "more_canaries_than_dims_emnist": (
        "emnist.py", ["--num_inserted", "2000000"],
        r"^error: --num_inserted=2000000 \+ --num_held_out=40 = 2,000,040 "
        r"canaries, more than the emnist model's d = 1,206,590 dimensions"),
    "more_canaries_than_dims_stackoverflow": (
        "stackoverflow.py", ["--num_inserted=5000000",
                             "--allow_large_canary_fraction"],
        r"^error: .* = 5,000,020 canaries, more than the stackoverflow "
        r"model's d = 4,050,748 dimensions"),
    # 5040 candidates, half inserted by the coin (2,520 expected, once each),
    # beside 50 clients x 80 rounds: 2520 / 6520.
    "large_canary_fraction": (
        "emnist.py", ["--num_inserted", "5000"],
        r"^error: canaries are 38\.7% of the run's participants \(2,520 "
        r"expected canary participations, half of the 5,040 candidates "
        r"inserted by --assignment=coin, beside 50 clients x 80 rounds\); "
        r".* above 10% .* pass --allow_large_canary_fraction to run it "
        r"anyway\.$"),
    "ddp_needs_three_flags": (
        "emnist.py", ["--aggregator=ddp"],
        r"^error: aggregator='ddp' \(--aggregator=ddp\) needs 3 more settings;"
        r" add --insertion=clients --noseeded_noise --clip=C"),
    # Scale at TFF's 1e6 cap (noise 0.01): L1 = 1e6 C sqrt(d) overflows int32
    # above C ~ 1.07 on the StackOverflow LSTM.
    "ddp_int32_overflow_stackoverflow": (
        "stackoverflow.py", DDP + ["--clip=2", "--noise_multiplier=0.01"],
        r"^error: aggregator='ddp' with --ddp_bits=20, --clip=2\.0 and d = "
        r"4,050,748: each client's integer L1 norm bound would be "
        r"4,0\d\d,\d{3},\d{3}, above the int32 limit 2,147,483,647 .*; use "
        r"--ddp_bits=\d+ or fewer, or --clip=1\.06 or less, or "
        r"--ddp_mechanism=distributed_dgauss"),
    "ddp_int32_overflow_emnist": (
        "emnist.py", DDP + ["--clip=3", "--noise_multiplier=0.01"],
        r"above the int32 limit 2,147,483,647"),
    "sweep_large_canary_fraction": (
        "sweep.py", ["--num_inserted=5000", "--noallow_large_canary_fraction"],
        r"^error: canaries are 61\.2% of the run's participants"),
}


def _imported(stderr):
  return {line.rsplit("|", 1)[1].strip().split(".")[0]
          for line in stderr.splitlines() if line.startswith("import time:")}


def _run(script, flags, cwd):
  start = time.monotonic()
  proc = subprocess.run(
      [sys.executable, "-X", "importtime", os.path.join(EXPERIMENTS, script),
       *flags], capture_output=True, text=True, timeout=120, cwd=cwd)
  message = "\n".join(line for line in proc.stderr.splitlines()
                      if not line.startswith("import time:"))
  return proc, message, time.monotonic() - start


@pytest.mark.parametrize("case", sorted(REFUSALS))
def test_a_refused_command_exits_fast_and_writes_nothing(tmp_path, case):
  script, flags, pattern = REFUSALS[case]
  out = tmp_path / "out"
  proc, message, seconds = _run(script, [*flags, f"--output_dir={out}"],
                                tmp_path)
  assert proc.returncode == 2, message[-3000:]
  assert re.search(pattern, message, re.M | re.S), message
  assert message.count("error:") == 1 and "Traceback" not in message
  # The bound. A refusal imports absl, NumPy/SciPy and the TF-free
  # config only: 0.5-0.8 s on the 2-core development machine under the other
  # sessions' load, a margin of more than 10x for a slower CI machine. The
  # importtime check, not the clock, shows that TensorFlow (3-5 s to import
  # there) was not loaded.
  assert seconds < 10, seconds
  assert not _imported(proc.stderr) & TF_MODULES
  assert not out.exists()
  assert os.listdir(tmp_path) == []  # nor anything else


def test_a_run_without_resume_is_refused_before_tensorflow(tmp_path):
  out = tmp_path / "out"
  out.mkdir()
  (out / "config.json").write_text("{}")
  proc, message, seconds = _run("emnist.py", [f"--output_dir={out}"],
                                tmp_path)
  assert proc.returncode == 2
  assert message == (f"error: {out / 'config.json'} exists: pass --resume to "
                     "finish that run, or choose another --output_dir.")
  assert seconds < 10 and not _imported(proc.stderr) & TF_MODULES  # as above
  assert os.listdir(out) == ["config.json"]


def test_resume_of_an_empty_directory_leaves_it_empty(tmp_path):
  out = tmp_path / "out"
  out.mkdir()
  proc, message, seconds = _run("stackoverflow.py",
                                ["--resume", f"--output_dir={out}"], tmp_path)
  assert proc.returncode == 2 and "holds no run (no config.json)" in message
  assert seconds < 10  # margin as above
  assert os.listdir(out) == []


def test_the_flags_named_in_one_message_suffice(tmp_path):
  # --aggregator=ddp used to fail four times in a row, one flag at a time;
  # the one message's flags, all applied, give a config that runs.
  with pytest.raises(ValueError) as raised:
    experiment_config.ExperimentConfig(aggregator="ddp", zeroing=True,
                                       server_optimizer="adam")
  text = str(raised.value)
  assert text.count("--") >= 6 and "\n" not in text
  kwargs = dict(aggregator="ddp", zeroing=True, server_optimizer="adam",
                output_dir=str(tmp_path / "run"))
  for flag in re.findall(r"--(no)?([a-z_]+)(?:=([\w.]+))?", text):
    negated, name, value = flag
    if name == "aggregator" or (name == "clip" and "clip" in kwargs):
      continue  # the choice itself; --clip=C, then its example --clip=0.1
    if not value:
      kwargs[name] = not negated
    elif name == "clip":
      kwargs[name] = 0.1 if value == "C" else float(value)
    else:
      kwargs[name] = float(value) if value[0].isdigit() else value
  config = experiment_config.ExperimentConfig(**kwargs)
  experiment_config.check_before_tensorflow(config)
  assert not (tmp_path / "run").exists()


# Canary fractions ------------------------------------------------------------


def _script_default_fraction(script):
  """The canary fraction of a script's default command (a subprocess: each
  script defines absl's global flags)."""
  code = (
      "import sys; sys.path.insert(0, sys.argv[1]); sys.argv = ['s']\n"
      f"import {script} as s; s.experiment_flags.FLAGS(['s'])\n"
      "from tff_canary.harness.config import experiment_config as ec, model_sizes\n"
      "from tff_canary.harness.config import preflight\n"
      "c = s.experiment_flags.config_from_flags()\n"
      "r = ec.resolve(c, ec.default_num_clients(c), "
      "model_sizes.task_dim(c.task))\n"
      "print(preflight.canary_fraction(c, preflight."
      "expected_canary_participations(c, r.canary_schedule), r.num_rounds))")
  proc = subprocess.run([sys.executable, "-W", "error", "-c", code,
                         EXPERIMENTS], capture_output=True, text=True,
                        timeout=120)
  assert proc.returncode == 0, proc.stderr[-2000:]  # no warning either
  return float(proc.stdout)


def test_the_defaults_cross_no_threshold():
  # EMNIST's default is the paper's 1%: 40 expected inserted canaries beside
  # 50 clients x 80 rounds (as the README says); StackOverflow's 20 beside
  # 20 x 40.
  assert _script_default_fraction("emnist") == pytest.approx(40 / 4040)
  assert _script_default_fraction("stackoverflow") == pytest.approx(20 / 820)
  assert (20 / 820 < preflight.WARN_CANARY_FRACTION
          < preflight.MAX_CANARY_FRACTION == 0.10)


def _schedule(config, num_clients=None):
  resolved = experiment_config.resolve(
      config, num_clients or experiment_config.default_num_clients(config),
      model_sizes.EMNIST_CNN)
  return resolved.canary_schedule, resolved.num_rounds


def test_expected_participations():
  coin = experiment_config.ExperimentConfig(
      num_rounds=80, clients_per_round=50, num_inserted=40, num_held_out=40)
  assert preflight.expected_canary_participations(
      coin, _schedule(coin)[0]) == 40  # half of 80 candidates, once each
  fixed = experiment_config.ExperimentConfig(
      num_rounds=80, clients_per_round=50, num_inserted=30, num_held_out=40,
      assignment="fixed")
  # 500 clients, 10 per round: 8 epochs in 80 rounds, canaries as clients.
  schedule, _ = _schedule(fixed, num_clients=4000 // 8)
  assert preflight.expected_canary_participations(fixed, schedule) == 30 * 8


def test_the_warning_fires_above_5_percent_only():
  def warned(inserted, **kwargs):
    config = experiment_config.ExperimentConfig(
        num_rounds=80, clients_per_round=50, num_inserted=inserted,
        num_held_out=0, assignment="fixed", **kwargs)
    with warnings.catch_warnings(record=True) as caught:
      warnings.simplefilter("always")
      preflight.canary_fraction(config, inserted, 80)
    assert all(w.filename == __file__ for w in caught)  # the caller's line
    return [str(w.message) for w in caught]

  # 200 beside 4,000: 4.8%, quiet; 220: 5.2%, a warning with the numbers.
  assert warned(200) == []
  message, = warned(220)
  assert message.startswith(
      "canaries are 5.2% of the run's participants (220 expected canary "
      "participations, beside 50 clients x 80 rounds); the paper keeps them "
      "near 1%; above 5%")
  # Beyond 10% only with the flag, and still with the warning.
  with pytest.raises(ValueError, match=r"10\.0% .*above 10%"):
    warned(445)  # 445 / 4445
  assert len(warned(445, allow_large_canary_fraction=True)) == 1
  assert warned(444) != []  # 9.99%: a warning, no refusal


# The DDP bound ------------------------------------------------------------


def _ddp(**kwargs):
  return experiment_config.ExperimentConfig(
      task="stackoverflow", clients_per_round=20, aggregator="ddp",
      insertion="clients", seeded_noise=False, server_momentum=0.0,
      noise_multiplier=0.01, **kwargs)


def test_each_remedy_of_the_ddp_bound_works():
  with pytest.raises(ValueError) as raised:
    preflight.check(_ddp(clip=2.0))
  bits, clip = re.search(r"--ddp_bits=(\d+) or fewer, or --clip=([\d.]+) or "
                         r"less", str(raised.value)).groups()
  preflight.check(_ddp(clip=2.0, ddp_bits=int(bits)))
  preflight.check(_ddp(clip=float(clip)))
  with pytest.raises(ValueError, match="int32 limit"):  # a little more: no
    preflight.check(_ddp(clip=float(clip) * 1.02))
  # The discrete Gaussian's query checks no L1 norm: the same setting runs
  # (it was refused for a bound it never checks).
  preflight.check(_ddp(clip=2.0, ddp_mechanism="distributed_dgauss"))
