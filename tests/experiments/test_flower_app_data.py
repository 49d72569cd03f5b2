"""experiments/flower_app's synthetic EMNIST against the TFF generator's.

The app draws the synthetic EMNIST's generative model in NumPy
(experiments/flower_app/tff_canary_emnist/synthetic.py: the same model, not
the same draws). In the TFF environment, where both run, the two must have
the same parameters and the same distribution: the mean ink, the fraction
of inked pixels and the label-noise rate over 200 writers agree within 4
standard errors. (The rest of the app needs Flower: test_flower_app.py.)
"""

from __future__ import annotations

import dataclasses
import sys

import numpy as np
import tensorflow as tf  # noqa: F401  pylint: disable=unused-import

from tff_canary.harness.data import synthetic as tf_synthetic

import repo_paths

sys.path.insert(0, str(repo_paths.REPO / "experiments" / "flower_app"))

from tff_canary_emnist import synthetic  # noqa: E402  pylint: disable=g-import-not-at-top,wrong-import-position

WRITERS, EXAMPLES, SEED = 200, 32, 0


def _per_writer(clients) -> list[np.ndarray]:
  """Per writer: mean pixel, fraction of pixels above 0.5, wrong labels."""
  pixels = np.stack([np.asarray(c["pixels"]) for c in clients])
  flat = pixels.reshape(len(clients), -1)
  wrong = [np.mean(np.asarray(c["label"]) != np.asarray(c["clean_label"]))
           for c in clients]
  return [flat.mean(1), (flat > 0.5).mean(1), np.asarray(wrong)]


def test_the_parameters_are_the_tff_generators():
  assert (dataclasses.asdict(synthetic.HandwritingModel())
          == dataclasses.asdict(tf_synthetic.HandwritingModel()))
  assert synthetic.EMNIST_CLASSES == tf_synthetic.EMNIST_CLASSES
  assert synthetic.STROKES == tf_synthetic.STROKES


def test_the_two_generators_draw_the_same_distribution():
  generate = tf_synthetic.emnist_generator(SEED, EXAMPLES,
                                           tf_synthetic.HandwritingModel())
  tff = [{k: v.numpy() for k, v in generate(i).items()}
         for i in range(WRITERS)]
  ours = [synthetic.client(SEED, i, EXAMPLES) for i in range(WRITERS)]
  for name, a, b in zip(("mean pixel", "inked fraction", "label noise"),
                        _per_writer(tff), _per_writer(ours)):
    se = np.sqrt(a.var(ddof=1) / WRITERS + b.var(ddof=1) / WRITERS)
    # Independent writers on both sides: the difference of the two means
    # is ~N(0, se^2) under one distribution; 4 SE fails by chance 6e-5.
    assert abs(a.mean() - b.mean()) < 4 * se, (name, a.mean(), b.mean(), se)
    # And the statistic is not degenerate (a broken renderer gives zeros).
    assert b.mean() > 0.01, (name, b.mean())
