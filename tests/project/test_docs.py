"""The documentation site builds with --strict, and what cites it exists.

`mkdocs build --strict` fails on a broken link, a page missing from the nav
or the disk, and an API entry (`::: module`) whose module is gone
(tests/project/test_api_reference.py checks the other direction and every dotted
name). The code cites the method by page (`docs/method/null-law.md`); a cited
page that does not exist fails here, and so does any file that still points
outside the repository for the method.

Formulas are math: pymdownx.arithmatex marks them and MathJax, copied into
the site from the docs extra (docs_hooks/mathjax_assets.py), typesets them.
The built site loads no script or stylesheet from elsewhere, no page's prose
holds a formula left as raw text (`c_{t-s}`, `C⁻¹ ξ`, `μ_j`), and where
Chromium is installed every formula of every page typesets without an error.
"""

import functools
import html
import html.parser
import http.server
import importlib.util
import json
import os
import pathlib
import re
import shutil
import subprocess
import sys
import tempfile
import threading

import pytest
import repo_paths

ROOT = repo_paths.REPO
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


needs_mkdocs = pytest.mark.skipif(
    importlib.util.find_spec("mkdocs") is None,
    reason="mkdocs is not installed (the docs extra: pip install '.[docs]'; "
    "install.sh installs it)")


@pytest.fixture(scope="module")
def built_site(tmp_path_factory):
  """The site built once for this file: (mkdocs's process, its directory)."""
  site = tmp_path_factory.mktemp("docs") / "site"
  proc = subprocess.run(
      [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir",
       str(site)], cwd=ROOT, capture_output=True, text=True, timeout=600,
      env=dict(os.environ, NO_MKDOCS_2_WARNING="1"))
  return proc, site


def _site(built_site) -> pathlib.Path:
  proc, site = built_site
  if proc.returncode:
    pytest.fail("the site did not build (see "
                "test_the_site_builds_strictly_with_every_page)")
  return site


def site_pages(site: pathlib.Path) -> list[pathlib.Path]:
  """The built pages of docs/ (the theme's own assets left out)."""
  return sorted(p for p in site.rglob("*.html")
                if p.relative_to(site).parts[0] != "assets")


@needs_mkdocs
def test_the_site_builds_strictly_with_every_page(built_site):
  proc, site = built_site
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


# A URL that leaves the site: another host, whatever the scheme.
EXTERNAL = re.compile(r"^(?:[a-z][a-z0-9+.-]*:)?//", re.IGNORECASE)
ASSET = re.compile(r"<(script|link)\b[^>]*?\b(src|href)=\"([^\"]*)\"",
                   re.IGNORECASE)
MATHJAX = "assets/mathjax/tex-svg.js"


def external_assets(page_html: str) -> list[str]:
  """The scripts and stylesheets (any <script src> or <link href>) of a page
  that come from another host."""
  return [url for _, _, url in ASSET.findall(page_html)
          if EXTERNAL.match(url)]


def page_scripts(page_html: str) -> list[str]:
  return [url for tag, attr, url in ASSET.findall(page_html)
          if tag.lower() == "script"]


# Formula syntax that only raw text shows: sub- and superscripts written out
# (`c_{t-s}`, `10^6`, `(1 - x)^(-1/2)`), a Greek letter with a subscript
# (`μ_j`, `ε_lo`), and the Unicode stand-ins for typeset math (`C⁻¹`, `Bᵀ`,
# `√(a)`, `Σ_k`, `‖v‖`, `⟨c, v⟩`). Python names (`tensorflow_privacy`) and
# numbers (`1e-6`, `95% CI`) do not match.
RAW_FORMULA = re.compile(
    r"_\{|\^\{|\^\(|[0-9A-Za-z)\]]\^[-−0-9A-Za-z]|"
    r"[\u0370-\u03ff]_[A-Za-z0-9{]|⁻|ᵀ|√|Σ|‖|⟨|⟩")


class _Prose(html.parser.HTMLParser):
  """The text of a page's article outside code, math, scripts and styles."""

  def __init__(self):
    super().__init__(convert_charrefs=True)
    self._stack, self._skip, self._article, self.lines = [], 0, 0, []
    self._text = []

  def handle_starttag(self, tag, attrs):
    if tag in ("br", "hr", "img", "input", "meta", "link"):
      return
    classes = (dict(attrs).get("class") or "").split()
    skip = (tag in ("code", "pre", "script", "style", "kbd")
            or "arithmatex" in classes)
    article = tag == "article"
    self._stack.append((tag, skip, article))
    self._skip += skip
    self._article += article

  def handle_endtag(self, tag):
    while self._stack:
      name, skip, article = self._stack.pop()
      self._skip -= skip
      self._article -= article
      if name == tag:
        break

  def handle_data(self, data):
    if self._article and not self._skip:
      self._text.append(data)

  def close(self):
    super().close()
    self.lines = [line.strip() for line in "".join(self._text).split("\n")
                  if line.strip()]


def prose_lines(page_html: str) -> list[str]:
  parser = _Prose()
  parser.feed(page_html)
  parser.close()
  return parser.lines


def raw_formulas(page_html: str) -> list[str]:
  return [line for line in prose_lines(page_html) if RAW_FORMULA.search(line)]


@needs_mkdocs
def test_the_site_loads_its_math_library_from_its_own_files(built_site):
  site = _site(built_site)
  pages = site_pages(site)
  assert len(pages) > 30
  external = {}
  for page in pages:
    text = page.read_text(encoding="utf-8")
    if found := external_assets(text):
      external[str(page.relative_to(site))] = found
    scripts = page_scripts(text)
    mathjax = [url for url in scripts if url.endswith(MATHJAX)]
    if "404" in page.name:  # mkdocs's 404 page links assets by absolute path
      continue
    assert len(mathjax) == 1, (page, scripts)
    # The configuration must run before MathJax reads it.
    config = [url for url in scripts if url.endswith("mathjax-config.js")]
    assert len(config) == 1 and scripts.index(config[0]) < scripts.index(
        mathjax[0]), (page, scripts)
    assert (page.parent / mathjax[0]).resolve() == (site / MATHJAX).resolve()
  assert not external, external
  library = (site / MATHJAX).read_text(encoding="utf-8")
  assert "MathJax" in library and len(library) > 1_000_000
  # The parts MathJax loads on demand are there too (TeX extensions).
  assert (site / "assets/mathjax/input/tex/extensions/boldsymbol.js").is_file()


@needs_mkdocs
def test_the_formulas_are_math_and_no_page_leaves_one_as_raw_text(
    built_site):
  site = _site(built_site)
  matrix = (site / "method/matrix-mechanisms/index.html").read_text(
      encoding="utf-8")
  # Inline formulas become \(...\) in a span, displayed ones \[...\] in a
  # div, both of class arithmatex, which is what MathJax typesets.
  assert ('<span class="arithmatex">\\(C[t, s] = c_{t-s}\\)</span>'
          in matrix)
  assert "\\sum_{i=1}^{b-1}" in matrix
  assert re.search(r'<div class="arithmatex">\\\[\s*y = x \+ C\^\{-1\} '
                   r"\\xi\s*\\\]</div>", matrix)
  # Formulas in tables stay inside the table's cells.
  dp_ftrl = (site / "method/dp-ftrl/index.html").read_text(encoding="utf-8")
  assert re.search(r'<td><span class="arithmatex">\\\(a_j\^\\top K\^\{-1\} '
                   r"u_j / \\sqrt\{a_j\^\\top K\^\{-1\} a_j\}\\\)</span></td>",
                   dp_ftrl)
  raw = {}
  for page in site_pages(site):
    if page.relative_to(site).parts[0] == "api":  # docstrings, not docs/
      continue
    if found := raw_formulas(page.read_text(encoding="utf-8")):
      raw[str(page.relative_to(site))] = found
  assert not raw, "formulas left as raw text (write them as $...$):\n" + (
      json.dumps(raw, ensure_ascii=False, indent=1))


def _chromium() -> str | None:
  for name in ("chromium", "chromium-browser", "google-chrome"):
    if found := shutil.which(name):
      return found
  return None


# Loads each page in an iframe of one page served on loopback (same origin,
# so it can look inside), waits for MathJax's first typesetting (at most
# PAGE_SECONDS a page, else that page's failure is "timeout") and POSTs what
# it found to the server. (Chromium's --dump-dom with --virtual-time-budget
# hung in about one run of three here, on an idle machine: virtual time
# stops while any request is pending.)
CHECK_PAGE = """<!doctype html><html><body><pre id="out">pending</pre><script>
const pages = %s;
(async () => {
  const results = [];
  for (const page of pages) {
    const r = {page: page};
    try {
      const frame = document.createElement("iframe");
      frame.style.width = "1200px";
      frame.style.height = "900px";
      const loaded = new Promise(done => { frame.onload = done; });
      frame.src = "/" + page;
      document.body.appendChild(frame);
      const timeout = ms => new Promise((_, fail) => setTimeout(
          () => fail(new Error("timeout")), ms));
      await Promise.race([loaded, timeout(%d)]);
      const w = frame.contentWindow, d = frame.contentDocument;
      if (!w.MathJax || !w.MathJax.startup) throw new Error("no MathJax");
      await Promise.race([w.MathJax.startup.promise, timeout(%d)]);
      r.marked = d.querySelectorAll(".arithmatex").length;
      r.typeset = d.querySelectorAll(".arithmatex mjx-container").length;
      r.errors = Array.from(d.querySelectorAll("[data-mjx-error]"),
                            e => e.getAttribute("data-mjx-error"));
      r.undefined_macros = d.querySelectorAll(
          'mjx-container [fill="red"]').length;
      r.backslashes = d.querySelectorAll('mjx-container [data-c="5C"]').length;
      frame.remove();
    } catch (e) { r.failure = String(e); }
    results.push(r);
  }
  await fetch("/__math_results", {method: "POST",
                                   body: JSON.stringify(results)});
})();
</script></body></html>"""
PAGE_SECONDS = 120


class _CheckHandler(http.server.SimpleHTTPRequestHandler):
  """Serves the site; the check page's POST of its results ends the wait."""

  def log_message(self, *args):
    pass

  def do_POST(self):  # pylint: disable=invalid-name
    body = self.rfile.read(int(self.headers["Content-Length"]))
    self.send_response(204)
    self.end_headers()
    self.server.results = json.loads(body)
    self.server.done.set()


def typeset_in_chromium(site: pathlib.Path, pages: list[str],
                        chromium: str) -> list[dict]:
  (site / "__math_check.html").write_text(
      CHECK_PAGE % (json.dumps(pages), PAGE_SECONDS * 1000,
                    PAGE_SECONDS * 1000), encoding="utf-8")
  server = http.server.ThreadingHTTPServer(
      ("127.0.0.1", 0), functools.partial(_CheckHandler, directory=site))
  server.done, server.results = threading.Event(), None
  thread = threading.Thread(target=server.serve_forever, daemon=True)
  thread.start()
  try:
    with tempfile.TemporaryDirectory() as profile:
      # The flags keep Chromium off the network but for the loopback server.
      proc = subprocess.Popen(
          [chromium, "--headless", "--no-sandbox", "--disable-gpu",
           "--disable-quic", "--no-first-run", "--disable-sync",
           "--disable-background-networking", "--disable-component-update",
           f"--user-data-dir={profile}",
           f"http://127.0.0.1:{server.server_port}/__math_check.html"],
          stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
      try:
        # Every page's own time, and some for Chromium's start.
        finished = server.done.wait(PAGE_SECONDS * len(pages) + 60)
      finally:
        proc.terminate()   # the process this test started, by its PID
        try:
          _, stderr = proc.communicate(timeout=30)
        except subprocess.TimeoutExpired:
          proc.kill()
          _, stderr = proc.communicate()
  finally:
    server.shutdown()
    server.server_close()
  assert finished, "Chromium sent no results: " + stderr[-2000:]
  return server.results


@needs_mkdocs
@pytest.mark.slow
@pytest.mark.skipif(_chromium() is None,
                    reason="no Chromium to typeset the pages with (Debian: "
                    "apt-get install chromium)")
def test_every_formula_typesets_without_an_error_in_chromium(built_site):
  site = _site(built_site)
  pages = [str(p.relative_to(site)) for p in site_pages(site)
           if 'class="arithmatex"' in p.read_text(encoding="utf-8")]
  assert len(pages) > 20
  results = typeset_in_chromium(site, pages, _chromium())
  assert [r["page"] for r in results] == pages
  bad = [r for r in results
         if r.get("failure") or r["typeset"] != r["marked"] or r["errors"]
         or r["undefined_macros"] or r["backslashes"]]
  assert not bad, json.dumps(bad, indent=1)
  assert sum(r["typeset"] for r in results) > 1000


def test_the_checks_can_fail():
  assert cited_pages("see docs/method/no-such-page.md, and docs/x.md.") == {
      "docs/method/no-such-page.md", "docs/x.md"}
  assert not (ROOT / "docs/method/no-such-page.md").exists()
  assert _nav_pages([{"A": "a.md"}, {"B": [{"C": "c.md"}, "d.md"]}]) == [
      "a.md", "c.md", "d.md"]
  assert external_assets(
      '<script src="https://cdn.example/tex-svg.js"></script>'
      '<link rel="stylesheet" href="//fonts.example/a.css">'
      '<script src="../assets/mathjax/tex-svg.js"></script>'
      '<a href="https://example.org">a link is no asset</a>') == [
          "https://cdn.example/tex-svg.js", "//fonts.example/a.css"]
  article = ("<article><p>{}</p><p><code>c_{{t-s}}</code> "
             '<span class="arithmatex">\\(\\mu_j\\)</span> '
             "tensorflow_privacy at 1e-6, 95% CI</p></article>")
  assert raw_formulas(article.format("fine")) == []
  for raw in ("C[t, s] = c_{t−s}", "d = 10^6", "μ_j", "ε_lo", "C⁻¹ ξ",
              "K = B Bᵀ", "√(a)", "Σ_k", "‖v‖", "(1 − x)^(−1/2)"):
    assert raw_formulas(article.format(raw)), raw
