"""tff-canary: one-run empirical privacy estimation for DP-FedAvg in TFF."""

import setuptools

setuptools.setup(
    name="tff-canary",
    version="0.1.0",
    description=(
        "Random-canary empirical privacy estimation for DP-FedAvg in "
        "TensorFlow Federated (Andrew et al., ICLR 2024)."
    ),
    long_description=open("README.md", encoding="utf-8").read(),
    long_description_content_type="text/markdown",
    packages=setuptools.find_packages(include=["tff_canary", "tff_canary.*"]),
    # Tested on Python 3.11 only (the one this project's machines have); the
    # TFF extra needs exactly 3.11 (TensorFlow 2.14's wheels).
    python_requires=">=3.11",
    # A plain `pip install .` gives the statistics layer (tff_canary.stats,
    # the top-level estimators and `python -m tff_canary report --no_plots`)
    # to users of any framework: NumPy, SciPy and dp-accounting only. Both
    # ends are tested (noxfile.py): NumPy 1.25.2, SciPy 1.9.3, dp-accounting
    # 0.4.3 (the TFF extra's stack, requirements/lock.txt) and NumPy 2.4.6,
    # SciPy 1.17.1, dp-accounting 0.6.0 (the newest, 2026-12, in
    # requirements/lock-flower.txt). dp-accounting
    # before 0.5 requires NumPy < 2, so NumPy 2 resolves 0.5 or later.
    install_requires=[
        "numpy>=1.25,<3",
        "scipy>=1.9,<2",
        # Analytical epsilon. 0.4.3 is the version TFF 0.87 pins; 0.6 changed
        # the RDP accountant's numerics, a later minor may change more.
        "dp-accounting>=0.4.3,<0.7",
        # DpEvents' fields (stats/accounting/dp_event_data.py).
        "attrs>=22",
    ],
    extras_require={
        # The report's plots.
        "plots": ["matplotlib"],
        # The TFF integration (tff_canary.federated) and the experiment
        # harness (tff_canary.harness, experiments/).
        "tff": [
            "tensorflow-federated==0.87.0",
            "absl-py",
            "matplotlib",
            "tqdm",
        ],

        # The documentation site (docs/, mkdocs.yml; built --strict by the tests).
        "docs": [
            "mkdocs",
            "mkdocs-material",
            "mkdocstrings[python]",
            # Formulas: pymdownx.arithmatex marks them, MathJax 3 renders them
            # from the site's own files (docs_hooks/mathjax_assets.py copies
            # them out of this package, which ships MathJax's es5 build and
            # needs nothing else; no CDN when a page is viewed).
            "pymdown-extensions",
            "django-static-mathjax>=3.2.2,<4",
        ],
        "test": [
            # The test command (README.md): `nox -R` runs the suite on both
            # environments (noxfile.py). TFF 0.87 pins attrs<24; nox
            # 2025.5.1 declares attrs>=23.1 but calls attrs.validators.or_
            # (attrs 24.1) at import, so it fails there. 2025.2.9 runs.
            "nox<2025.5",
            "pytest",
            "pytest-timeout",
            "pytest-xdist",
            "nbclient",
            "nbformat",
            "ipykernel",
            # IPython 8.23 imports typing_extensions.TypeAliasType (4.6+), but
            # TensorFlow 2.14 pins typing_extensions<4.6 and IPython does not
            # declare the minimum: cap it so the notebooks kernel starts.
            "ipython<8.23",
        ],
    },
    entry_points={
        "console_scripts": ["tff-canary=tff_canary.__main__:main"],
    },
)
