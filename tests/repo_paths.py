"""Where the repository and the tests are, for test files at any depth of
tests/ (which mirrors the package: tests/stats/..., tests/federated/...)."""

import pathlib

TESTS = pathlib.Path(__file__).resolve().parent
REPO = TESTS.parent
