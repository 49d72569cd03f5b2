"""MkDocs hook: the site's formulas typeset by MathJax from its own files.

pymdownx.arithmatex (generic mode, mkdocs.yml) leaves each formula of a page
as `\\(...\\)` in a span, or `\\[...\\]` in a div, of class `arithmatex`;
MathJax 3 typesets them in the browser (docs/javascripts/mathjax-config.js).
MathJax comes from PyPI, in the docs extra: django-static-mathjax ships
MathJax's own release build (es5/) and needs nothing else, Django included.
This hook adds the parts that TeX to SVG uses to the site under
assets/mathjax/, so no page loads anything from a CDN, and the math needs
neither network nor web fonts (SVG output draws its own glyphs).
tests/project/test_docs.py checks the built site for both.
"""

import importlib.util
import pathlib

from mkdocs.exceptions import PluginError
from mkdocs.structure.files import File

SITE_DIR = "assets/mathjax"
# The combined component (TeX in, SVG out), and what it loads only on
# demand: TeX extensions (autoload, e.g. \boldsymbol), the context menu's
# accessibility tools and their speech rules.
PARTS = ("tex-svg.js", "input/tex/extensions", "a11y", "sre", "ui")


def mathjax_es5() -> pathlib.Path:
  """MathJax's es5 folder inside the installed django-static-mathjax."""
  spec = importlib.util.find_spec("mathjax")
  locations = list(spec.submodule_search_locations or []) if spec else []
  for location in locations:
    es5 = pathlib.Path(location) / "static" / "mathjax" / "es5"
    if (es5 / PARTS[0]).is_file():
      return es5
  raise PluginError(
      "docs_hooks/mathjax_assets.py: MathJax not found (no "
      f"mathjax/static/mathjax/es5/{PARTS[0]} in {locations or 'no package'})"
      "; install the docs extra: pip install '.[docs]' (install.sh does)")


def on_files(files, config):
  es5 = mathjax_es5()
  for part in PARTS:
    path = es5 / part
    sources = [path] if path.is_file() else sorted(
        p for p in path.rglob("*") if p.is_file())
    if not sources:
      raise PluginError(f"docs_hooks/mathjax_assets.py: {path} is empty")
    for source in sources:
      uri = f"{SITE_DIR}/{source.relative_to(es5).as_posix()}"
      files.append(File.generated(config, uri, abs_src_path=str(source)))
  return files
