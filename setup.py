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
    python_requires=">=3.11,<3.12",
    install_requires=[
        # The estimators need only these two.
        "numpy>=1.25,<2",
        "scipy>=1.9",
        # Analytical epsilon; the version TFF 0.87 pins.
        "dp-accounting==0.4.3",
        # The canary factory, cosine pass and experiments.
        "tensorflow-federated==0.87.0",
        "absl-py",
        "matplotlib",
        "tqdm",
    ],
    extras_require={
        "test": [
            "pytest",
            "pytest-timeout",
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
