"""The documentation site builds with --strict, and what cites it exists.

`mkdocs build --strict` fails on a broken link, a page missing from the nav
or the disk, and an API entry (`::: module`) whose module is gone
(tests/test_api_reference.py checks the other direction and every dotted
name). The code cites the method by page (`docs/method/null-law.md`); a cited
page that does not exist fails here, and so does any file that still points
outside the repository for the method.
"""

import importlib.util
import os
import pathlib
import re
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent
CITED = re.compile(r"docs/[A-Za-z0-9_./-]+\.md")
# Where the method used to live, outside the repository (split so that this
# file does not match itself).
OUTSIDE = ("../" + "shared", "shared/" + "METHOD")


def _nav_pages(node) -> list[str]:
  if isinstance(node, str):
    return [node]
  if isinstance(node, dict):
    return [p for v in node.values() for p in _nav_pages(v)]
  return [p for v in node for p in _nav_pages(v)]


def nav_pages() -> list[str]:
  import yaml  # pylint: disable=g-import-not-at-top
  config = yaml.safe_load((ROOT / "mkdocs.yml").read_text(encoding="utf-8"))
  return _nav_pages(config["nav"])


def repository_files() -> list[pathlib.Path]:
  listed = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True,
                          text=True, check=True).stdout.split()
  return [ROOT / f for f in listed if (ROOT / f).is_file()
          and not f.startswith("requirements/")]


@pytest.mark.skipif(importlib.util.find_spec("mkdocs") is None,
                    reason="mkdocs is not installed (the docs extra: "
                    "pip install '.[docs]'; install.sh installs it)")
def test_the_site_builds_strictly_with_every_page(tmp_path):
  site = tmp_path / "site"
  proc = subprocess.run(
      [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir",
       str(site)], cwd=ROOT, capture_output=True, text=True, timeout=600,
      env=dict(os.environ, NO_MKDOCS_2_WARNING="1"))
  assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-6000:]
  pages = nav_pages()
  assert len(pages) > 30
  on_disk = {str(p.relative_to(ROOT / "docs"))
             for p in (ROOT / "docs").rglob("*.md")}
  assert on_disk == set(pages), "pages on disk and in the nav differ"
  for page in pages:
    html = site / (page[:-3] + "/index.html" if not page.endswith(
        "index.md") else page[:-3] + ".html")
    assert html.exists(), html


def cited_pages(text: str) -> set[str]:
  return set(CITED.findall(text))


def test_every_cited_docs_page_exists():
  missing = []
  cited = 0
  for path in repository_files():
    if path.suffix not in (".py", ".md", ".ipynb", ".ini", ".sh", ".yml"):
      continue
    if path.name == "test_docs.py":  # its examples of what fails
      continue
    for page in cited_pages(path.read_text(encoding="utf-8")):
      cited += 1
      if not (ROOT / page).is_file():
        missing.append(f"{path.relative_to(ROOT)} cites {page}")
  assert cited > 50  # the package cites the method pages everywhere
  assert not missing, "\n".join(missing)


def test_no_file_points_outside_the_repository_for_the_method():
  found = [f"{path.relative_to(ROOT)}: {marker}"
           for path in repository_files()
           for marker in OUTSIDE
           if marker in path.read_text(encoding="utf-8", errors="ignore")]
  assert not found, "\n".join(found)


def test_the_checks_can_fail():
  assert cited_pages("see docs/method/no-such-page.md, and docs/x.md.") == {
      "docs/method/no-such-page.md", "docs/x.md"}
  assert not (ROOT / "docs/method/no-such-page.md").exists()
  assert _nav_pages([{"A": "a.md"}, {"B": [{"C": "c.md"}, "d.md"]}]) == [
      "a.md", "c.md", "d.md"]
