"""Every bench and experiment script runs, and every command the docs cite exists.

Issue 26, item 10: `bench/validity.py`'s default command crashed at its end
and no test ran the benches. Each runnable script in bench/ and experiments/
(a file with `if __name__ == "__main__":`) takes `--smoke`: tiny sizes,
seconds, exit 0, its normal last line, outputs in a temporary directory
(never the working directory). The test below runs every one of them, found
by glob, so a new script without `--smoke` (or without an entry in
`LAST_LINES`) fails here; the few whose `--smoke` command line another test
already runs are checked to be run there instead (`RUN_ELSEWHERE`), so each
`--smoke` command runs once in the suite.

The second half parses the commands that README.md, experiments/README.md and
docs/ cite for these scripts and checks each flag against the flags the
script defines (read from its source: argparse's `add_argument`, absl's
`DEFINE_*`, the experiment scripts' `ExperimentConfig` fields), so that a
renamed or removed flag cannot leave a dead command in the docs.
"""

from __future__ import annotations

import ast
import dataclasses
import glob
import os
import re
import subprocess
import sys

import pytest
import repo_paths

REPO = str(repo_paths.REPO)

# Files of bench/ and experiments/ that are modules other scripts import,
# not commands (no `__main__`).
MODULES = {
    "bench/gaussian_bounds.py": "the bounds power.py and validity.py compare",
    "bench/detection_rates.py": "pipeline_audit.py's and flower_audit.py's "
                                "rates and Clopper-Pearson limits",
    "bench/ftrl_validity.py": "validity.py --mechanism tree's trials",
    "bench/smoke_mode.py": "the benches' --smoke flag",
    "bench/peak_rss.py": "round_overhead.py's and flower_overhead.py's "
                         "peak RSS sampler",
    "experiments/experiment_cli.py": "emnist.py's and stackoverflow.py's "
                                     "command line",
    "experiments/experiment_flags.py": "emnist.py's and stackoverflow.py's "
                                       "flags",
}

# The last line each script prints (re.fullmatch on the stripped line). A
# group `path` names a file the script wrote: it must exist in the temporary
# directory given to the script.
LAST_LINES = {
    "bench/client_mode_cost.py":
        r"extra per real client \(the wrapper\): -?[\d.]+ ms; per canary "
        r"client: -?[\d.]+ ms",
    "bench/coverage.py": r"total \d+ s",
    "bench/estimators.py":
        r"estimators: all estimates [\d.]+ ms; exact-null epsilon_lo \d+x "
        r"faster than the numerical-integration loop, relative difference .+",
    "bench/ftrl_audit.py":
        r"DP-FTRL audit: worst detection [\d.]+, worst false alarm [\d.]+",
    "bench/flower_audit.py":
        r"Flower audit: worst detection [\d.]+, worst false alarm [\d.]+",
    "bench/flower_overhead.py":
        r"Flower: orthogonal canaries, per-round ratio [\d.]+ ± [\d.]+ at "
        r"\d+; peak RSS [+-][\d.]+ GiB",
    "bench/flower_validity.py":
        r"Flower validity: worst exceedance [\d.]+ \(limit [\d.]+\); "
        r"strongest bound [\d.]+ / [\d.]+ / [\d.]+ at epsilon 1 / 3 / 10",
    "bench/ftrl_sweep.py":
        r"efficient tree, 4 epochs of 64 rounds, \d+ candidates, 1 trials, "
        r"δ = 1e-05; \d+ s",
    "bench/matrix_audit.py":
        r"matrix audit: worst detection [\d.]+, worst false alarm [\d.]+",
    "bench/matrix_overhead.py":
        r"BLT: orthogonal canaries, per-round ratio: [\d.]+ ± [\d.]+ at 20, "
        r"[\d.]+ ± [\d.]+ at 40",
    "bench/noise_check.py":
        r"noise check: worst detection [\d.]+, worst false alarm [\d.]+",
    "bench/pipeline_audit.py":
        r"pipeline audit: worst detection [\d.]+, worst false alarm [\d.]+",
    "bench/power.py": r"one-run power at epsilon 1/3/10: [\d.]+ [\d.]+ [\d.]+",
    "bench/round_overhead.py":
        r"orthogonal canaries, per-round ratio: [\d.]+ ± [\d.]+ at 20, "
        r"[\d.]+ ± [\d.]+ at 40",
    "bench/scheduled_vs_max.py": r"\(\d+ s in all\)",
    "bench/tightness.py": r'\{"bounds_2000": .+, "worst_validity": [\d.]+\}',
    "bench/validity.py":
        r"largest exceedance rate of a valid bound over every setting: .+",
    "experiments/emnist.py": r"report: (?P<path>\S+/report\.md)",
    "experiments/gaussian_mechanism.py": r"wrote (?P<path>\S+/gm\.png)",
    "experiments/multi_worker.py":
        r"noised aggregates: max \|workers - local\| = \S+ \(max \|aggregate\| "
        r"\S+\)",
    "experiments/planted_bugs.py":  # the table's last row
        r"shortfall\s+2\s+ddp\s+client\s.+",
    "experiments/stackoverflow.py": r"report: (?P<path>\S+/report\.md)",
    "experiments/sweep.py": r"wrote \S+/sweep\.csv and \S+/sweep\.png",
}

# Scripts whose `--smoke` command line (output dir given) another test runs,
# checking its exit code and last line: run there, not twice (each is a TFF
# training run of half a minute or more).
RUN_ELSEWHERE = {
    "experiments/sweep.py": ("tests/experiments/test_sweep.py",
                             "test_sweep_writes_one_csv_and_one_figure"),
    "experiments/stackoverflow.py": ("tests/harness/runner/test_experiment.py",
                                     "test_a_stackoverflow_run"),
    "experiments/multi_worker.py": (
        "tests/experiments/test_multi_worker.py",
        "test_two_workers_equal_the_local_run_and_are_stopped"),
}


# The scripts that run Flower (flwr): they cannot run in the TFF
# environment; their `--smoke` runs in the Flower one, in
# tests/project/test_smoke_flower.py (with the same rules), not here.
FLOWER_SCRIPTS = {"bench/flower_audit.py", "bench/flower_overhead.py",
                  "bench/flower_validity.py"}
FLOWER_TEST = "tests/project/test_smoke_flower.py::test_flower_smoke"


# The scripts that train with TensorFlow Federated (the rest are NumPy/SciPy
# and must not load TensorFlow: checked with python -X importtime).
TFF_SCRIPTS = {"bench/client_mode_cost.py", "bench/matrix_overhead.py",
               "bench/noise_check.py",
               "bench/round_overhead.py", "experiments/emnist.py",
               "experiments/multi_worker.py", "experiments/planted_bugs.py",
               "experiments/stackoverflow.py", "experiments/sweep.py"}


def _has_main(path: str) -> bool:
  with open(path, encoding="utf-8") as f:
    return re.search(r'^if __name__ == "__main__":', f.read(), re.M) is not None


def _files() -> list[str]:
  return sorted(os.path.relpath(p, REPO) for d in ("bench", "experiments")
                for p in glob.glob(os.path.join(REPO, d, "*.py")))


SCRIPTS = [f for f in _files() if f not in MODULES]
_PARAMS = [pytest.param(f, marks=[pytest.mark.tff, pytest.mark.slow])
           if f in TFF_SCRIPTS else f for f in SCRIPTS]


def test_scripts_and_modules_are_what_the_lists_say():
  assert len(SCRIPTS) >= 15, SCRIPTS  # the glob found the scripts
  for name in MODULES:
    path = os.path.join(REPO, name)
    assert os.path.exists(path) and not _has_main(path), (
        f"{name} is listed as a module; a script gets --smoke and a "
        "LAST_LINES entry instead")
  for name in SCRIPTS:
    assert _has_main(os.path.join(REPO, name)), (
        f"{name} has no __main__: list it in MODULES with a reason")
    assert name in LAST_LINES, (
        f"{name}: give it --smoke and its last line in LAST_LINES")
  assert set(LAST_LINES) <= set(SCRIPTS) and set(RUN_ELSEWHERE) <= set(SCRIPTS)
  assert TFF_SCRIPTS <= set(SCRIPTS) and FLOWER_SCRIPTS <= set(SCRIPTS)
  assert not FLOWER_SCRIPTS & (TFF_SCRIPTS | set(RUN_ELSEWHERE))
  test_file, test_name = FLOWER_TEST.split("::")
  with open(os.path.join(REPO, test_file), encoding="utf-8") as f:
    assert re.search(rf"^def {test_name}\(", f.read(), re.M), FLOWER_TEST


@pytest.mark.parametrize("name", _PARAMS)
def test_smoke(name, tmp_path):
  if name in RUN_ELSEWHERE:
    # That test runs `<script> --smoke` in a subprocess and checks its exit
    # code and its last line(s); it must keep doing so.
    test_file, test_name = RUN_ELSEWHERE[name]
    with open(os.path.join(REPO, test_file), encoding="utf-8") as f:
      source = f.read()
    test = next((node for node in ast.parse(source).body
                 if isinstance(node, ast.FunctionDef)
                 and node.name == test_name), None)
    assert test is not None, f"{test_file}::{test_name} is gone: run it here"
    body = ast.get_source_segment(source, test)
    stem = os.path.splitext(os.path.basename(name))[0]
    for needed in ('"--smoke"', "subprocess.run", "returncode == 0",
                   "splitlines()"):
      assert needed in body, (test_file, test_name, needed)
    assert f'"{stem}.py"' in body or f'"{stem}"' in body, (test_name, stem)
    pytest.skip(f"its --smoke command runs in {test_file}::{test_name}")
  if name in FLOWER_SCRIPTS:
    pytest.skip(f"a Flower script: its --smoke runs in {FLOWER_TEST} "
                "(the Flower environment)")
  run_smoke(name, tmp_path, sys.executable, numpy_only=name not in TFF_SCRIPTS)


def run_smoke(name, tmp_path, python, *, numpy_only):
  """Runs `python <name> --smoke` in an empty directory, TMPDIR in
  tmp_path: exit 0, the last line `LAST_LINES[name]`, nothing written into
  the working directory, a file the last line names in TMPDIR; with
  `numpy_only`, no TensorFlow loaded."""
  cwd, tmp = tmp_path / "cwd", tmp_path / "tmp"
  cwd.mkdir()
  tmp.mkdir()
  env = dict(os.environ, TMPDIR=str(tmp), PYTHONPATH=REPO + os.pathsep
             + os.environ.get("PYTHONPATH", ""))
  options = ["-X", "importtime"] if numpy_only else []
  proc = subprocess.run(
      [python, *options, os.path.join(REPO, name), "--smoke"],
      cwd=cwd, env=env, capture_output=True, text=True, timeout=600)
  assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
  if numpy_only:
    loaded = re.findall(r"^import time:.*\|\s*(tensorflow\S*)$", proc.stderr,
                        re.M)
    assert not loaded, f"{name} --smoke loads TensorFlow: {loaded[:3]}"
  lines = [line.strip() for line in proc.stdout.splitlines() if line.strip()]
  assert lines, proc.stderr[-3000:]
  match = re.fullmatch(LAST_LINES[name], lines[-1])
  assert match, (lines[-1], LAST_LINES[name])
  assert os.listdir(cwd) == [], "--smoke wrote into the working directory"
  if "path" in match.groupdict():
    path = os.path.realpath(match["path"])
    assert path.startswith(os.path.realpath(tmp) + os.sep), path
    assert os.path.exists(path)


# ------------------------------------------------ commands the docs cite

DOCS = ["README.md", "experiments/README.md",
        *sorted(os.path.relpath(p, REPO) for p in glob.glob(
            os.path.join(REPO, "docs", "**", "*.md"), recursive=True))]
# A script path, not a test file of tests/experiments/.
_SCRIPT = re.compile(r"(?<!tests/)\b((?:bench|experiments)/\w+\.py)\b")
# absl's own flags, which every absl script accepts.
_ABSL = {"help", "helpfull", "helpshort", "helpxml", "verbosity", "v",
         "logtostderr", "alsologtostderr", "log_dir", "flagfile"}


def cited_commands(text: str) -> list[tuple[str, list[str]]]:
  """(script, flag names) of every command in markdown `text`.

  A command is a script path in an inline code span (up to the span's end,
  which may wrap lines) or on a line of a code block (up to the line's end,
  with backslash continuations). Flag names are the `--name` tokens after
  the path ([--name value] optional parts included), up to a `#` comment.
  """
  found = []
  blocks = re.split(r"^\s*```.*$", text, flags=re.M)
  for index, part in enumerate(blocks):
    fenced = index % 2 == 1
    spans = [] if fenced else [(m.start(1), m.group(1)) for m in
                               re.finditer(r"`([^`]+)`", part)]
    covered = set()
    for start, span in spans:
      for m in _SCRIPT.finditer(span):
        found.append((m.group(1), _flags(span[m.end():])))
        covered.add(start + m.start())
    for m in _SCRIPT.finditer(part):
      if m.start() in covered:
        continue
      line_start = part.rfind("\n", 0, m.start()) + 1
      line = part[line_start:part.find("\n", m.start()) % (len(part) + 1)]
      code = fenced or line.startswith("    ")
      if not code or "`" in line[:m.start() - line_start]:
        continue  # prose, or inside a span already read
      rest, end = part[m.end():], 0
      while True:  # the line, and the lines a trailing backslash continues
        stop = rest.find("\n", end)
        stop = len(rest) if stop < 0 else stop
        if not rest[:stop].rstrip().endswith("\\"):
          break
        end = stop + 1
      found.append((m.group(1), _flags(rest[:stop].replace("\\\n", " "))))
  return found


def _flags(command: str) -> list[str]:
  names = []
  for token in command.split():
    if token.startswith("#"):
      break
    token = token.strip("[](),;")
    if token.startswith("--") and len(token) > 2:
      names.append(token[2:].split("=")[0])
  return names


def defined_flags(name: str) -> set[str]:
  """The flag names script `name` defines, read from its source."""
  path = os.path.join(REPO, name)
  with open(path, encoding="utf-8") as f:
    tree = ast.parse(f.read())
  names, absl = {"help"}, False
  for node in ast.walk(tree):
    if not isinstance(node, ast.Call) or not isinstance(node.func,
                                                        ast.Attribute):
      continue
    attr = node.func.attr
    literal = [a.value for a in node.args if isinstance(a, ast.Constant)
               and isinstance(a.value, str)]
    if attr == "add_argument":
      names |= {a[2:] for a in literal if a.startswith("--")}
    elif attr == "parse_args" and getattr(node.func.value, "id",
                                          None) == "smoke_mode":
      names.add("smoke")  # bench/smoke_mode.py adds --smoke
    elif attr.startswith("DEFINE_") and literal:
      absl = True
      names.add(literal[0])
      if attr == "DEFINE_bool":
        names.add("no" + literal[0])
    elif attr == "define_flags" and getattr(node.func.value, "id",
                                            None) == "experiment_flags":
      absl = True
      from tff_canary.harness.config import experiment_config  # pylint: disable=g-import-not-at-top
      for field in dataclasses.fields(experiment_config.ExperimentConfig):
        names |= {field.name, "no" + field.name}
      names |= {"smoke", "nosmoke"}
  return names | _ABSL if absl else names


def _all_cited():
  out = []
  for doc in DOCS:
    with open(os.path.join(REPO, doc), encoding="utf-8") as f:
      out += [(doc, script, flags) for script, flags in cited_commands(
          f.read())]
  return out


def test_the_command_parser_reads_spans_blocks_and_continuations():
  text = ("Run `bench/power.py --trials 20\n--only tight` or\n\n"
          "    .venv/bin/python experiments/sweep.py --aggregator=tree \\\n"
          "        --output_dir runs/x  # --not_a_flag\n\n"
          "```\npython bench/ftrl_sweep.py [--efficient 0]\n```\n"
          "and `bench/coverage.py`, prose bench/estimators.py --ignored.\n")
  assert sorted(cited_commands(text)) == sorted([
      ("bench/power.py", ["trials", "only"]),
      ("bench/coverage.py", []),
      ("experiments/sweep.py", ["aggregator", "output_dir"]),
      ("bench/ftrl_sweep.py", ["efficient"])])


def test_every_cited_flag_exists():
  cited = _all_cited()
  # The docs cite dozens of commands; a parser that found few is broken.
  assert len(cited) >= 30, cited
  assert len({c[1] for c in cited}) >= 12, cited
  missing, unknown = [], []
  flags = {}
  for doc, script, names in cited:
    if not os.path.exists(os.path.join(REPO, script)):
      missing.append((doc, script))
      continue
    if script in MODULES:
      continue  # cited as a file, not as a command
    known = flags.setdefault(script, defined_flags(script))
    unknown += [(doc, script, n) for n in names if n not in known]
  assert not missing, f"the docs cite scripts that do not exist: {missing}"
  assert not unknown, f"the docs cite flags the scripts lack: {unknown}"


def test_the_flag_reader_knows_each_kind_of_script():
  # argparse, absl and the experiment scripts' generated flags.
  assert {"trials", "directions", "smoke"} <= defined_flags("bench/power.py")
  assert {"dim", "simulator", "smoke", "nosmoke"} <= defined_flags(
      "experiments/gaussian_mechanism.py")
  assert {"output_dir", "aggregator", "noseeded_noise", "smoke",
          "helpfull"} <= defined_flags("experiments/emnist.py")
  assert "no_such_flag" not in defined_flags("experiments/emnist.py")


def test_smoke_sizes_replace_defaults_only():
  # bench/smoke_mode.py's promise: under --smoke the tiny sizes replace the
  # defaults, and a flag given on the command line keeps its value (so a
  # cited command plus --smoke takes that command's code path).
  sys.path.insert(0, os.path.join(REPO, "bench"))
  try:
    import smoke_mode  # pylint: disable=g-import-not-at-top
  finally:
    sys.path.pop(0)
  import argparse  # pylint: disable=g-import-not-at-top

  def parse(argv):
    parser = argparse.ArgumentParser()
    parser.add_argument("--trials", type=int, default=500)
    parser.add_argument("--dim", type=int, default=10**6)
    return smoke_mode.parse_args(parser, argv, dict(trials=2, dim=100),
                                 "tiny")

  full = parse([])
  assert (full.smoke, full.trials, full.dim) == (False, 500, 10**6)
  smoke = parse(["--smoke"])
  assert (smoke.smoke, smoke.trials, smoke.dim) == (True, 2, 100)
  given = parse(["--trials", "7", "--smoke"])
  assert (given.trials, given.dim) == (7, 100)
