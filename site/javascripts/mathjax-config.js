// MathJax 3: typeset only what pymdownx.arithmatex marked (class
// "arithmatex"), with its generic mode's delimiters. mkdocs.yml loads this
// before assets/mathjax/tex-svg.js, which docs_hooks/mathjax_assets.py copies
// into the site from the docs extra's MathJax (no CDN).
window.MathJax = {
  tex: {
    inline: [["\\(", "\\)"]],
    display: [["\\[", "\\]"]],
    processEscapes: true,
    processEnvironments: true,
  },
  options: {
    ignoreHtmlClass: ".*|",
    processHtmlClass: "arithmatex",
  },
  svg: {fontCache: "global"},
};
