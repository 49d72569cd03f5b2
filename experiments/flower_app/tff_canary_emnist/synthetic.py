"""The synthetic EMNIST of the TFF experiments, drawn in NumPy (no TensorFlow).

The same generative model as `tff_canary.harness.data.synthetic.
HandwritingModel` (its parameters are that class's, imported from it when
TensorFlow is there and copied below otherwise; docs/guide/experiments.md,
"The built-in synthetic data", has the formulas): 62 classes of 3 quadratic
Bezier strokes in 25 confusable groups, each writer with an offset, an affine
style, a stroke width, ink, pixel noise, Dirichlet(0.5) class proportions and
10% label noise, rendered with a separable Gaussian pen.

The same MODEL, not the same DRAWS: TensorFlow's stateless ops (Philox,
then its own uniform, normal, gamma and categorical conversions) are not
reproduced here; each stream is NumPy's PCG64 seeded with (seed, tag,
index), the tags of the TFF generator. So a Flower run and a TFF run of the
same settings train on data of the same distribution (the same task, the
same difficulty), not on the same pixels.
"""

from __future__ import annotations

import dataclasses

import numpy as np

from tff_canary.stats import validation

EMNIST_CLASSES = 62
STROKES = 3
_POINTS_PER_STROKE = 16
_PIXELS_PER_UNIT = 10.0
_TAG_TEMPLATES = 101
(_TAG_STYLE, _TAG_STYLE_UNIFORM, _TAG_PROPORTIONS, _TAG_LABELS, _TAG_JITTER,
 _TAG_POSE, _TAG_PIXEL_NOISE, _TAG_FLIP, _TAG_FLIP_CLASS) = range(201, 210)


@dataclasses.dataclass(frozen=True)
class HandwritingModel:
  """`tff_canary.harness.data.synthetic.HandwritingModel`'s parameters
  (the same defaults; a test checks them against that class where
  TensorFlow is installed)."""

  num_groups: int = 25
  separation: float = 0.35
  jitter: float = 0.08
  client_offset: float = 0.05
  rotation: float = 0.16
  shear: float = 0.2
  log_scale: float = 0.1
  translation: float = 0.08
  width_px: tuple[float, float] = (0.6, 1.3)
  ink: tuple[float, float] = (0.7, 1.0)
  noise: tuple[float, float] = (0.02, 0.2)
  label_alpha: float = 0.5
  label_noise: float = 0.1


def _rng(seed: int, tag: int, index: int) -> np.random.Generator:
  return np.random.default_rng([seed, tag, index])


def glyphs(seed: int, model: HandwritingModel = HandwritingModel()
           ) -> np.ndarray:
  """Control points of every class, float32 [62, STROKES, 3, 2]: a group's
  shape uniform on [-0.8, 0.8], plus `separation` x N(0, 1) per class."""
  base = _rng(seed, _TAG_TEMPLATES, 0).uniform(
      -0.8, 0.8, [model.num_groups, STROKES, 3, 2])
  own = _rng(seed, _TAG_TEMPLATES, 1).normal(
      size=[EMNIST_CLASSES, STROKES, 3, 2])
  group = np.arange(EMNIST_CLASSES) % model.num_groups
  return (base[group] + model.separation * own).astype(np.float32)


def _rotation(angle):
  c, s = np.cos(angle), np.sin(angle)
  return np.stack([np.stack([c, -s], -1), np.stack([s, c], -1)], -2)


def client(seed: int, index: int, examples: int,
           model: HandwritingModel = HandwritingModel()) -> dict:
  """Writer `index`'s examples: pixels float32 [n, 28, 28] in [0, 1], label
  and clean_label int32 [n] (`label` possibly replaced, as in the TFF
  generator's `_draw_emnist`, step for step)."""
  seed = validation.as_int(seed, "seed", minimum=0)
  index = validation.as_int(index, "index", minimum=0)
  n = validation.as_int(examples, "examples", minimum=1)
  shapes = glyphs(seed, model)
  style = _rng(seed, _TAG_STYLE, index).normal(size=STROKES * 6 + 6)
  uniforms = _rng(seed, _TAG_STYLE_UNIFORM, index).uniform(size=3)
  offset = model.client_offset * style[:STROKES * 6].reshape(STROKES, 3, 2)
  angle, shear = model.rotation * style[-6], model.shear * style[-5]
  scales = np.exp(model.log_scale * style[-4:-2])
  affine = _rotation(angle) @ np.diag(scales) @ np.array([[1.0, shear],
                                                          [0.0, 1.0]])
  shift = model.translation * style[-2:]

  def between(pair, u):
    return pair[0] + (pair[1] - pair[0]) * u

  width = between(model.width_px, uniforms[0]) / _PIXELS_PER_UNIT
  ink = between(model.ink, uniforms[1])
  noise_std = between(model.noise, uniforms[2])
  proportions = _rng(seed, _TAG_PROPORTIONS, index).dirichlet(
      np.full(EMNIST_CLASSES, model.label_alpha))
  clean = _rng(seed, _TAG_LABELS, index).choice(
      EMNIST_CLASSES, size=n, p=proportions / proportions.sum())
  flip = _rng(seed, _TAG_FLIP, index).uniform(size=n) < model.label_noise
  other = _rng(seed, _TAG_FLIP_CLASS, index).integers(0, EMNIST_CLASSES, n)
  label = np.where(flip, other, clean)

  controls = shapes[clean] + offset + model.jitter * _rng(
      seed, _TAG_JITTER, index).normal(size=[n, STROKES, 3, 2])
  t = np.linspace(0.0, 1.0, _POINTS_PER_STROKE)
  bernstein = np.stack([(1 - t) ** 2, 2 * t * (1 - t), t ** 2], -1)
  points = np.einsum("pk,nskd->nspd", bernstein, controls).reshape(
      n, STROKES * _POINTS_PER_STROKE, 2)
  pose = _rng(seed, _TAG_POSE, index).normal(size=[n, 3])
  matrix = _rotation(0.5 * model.rotation * pose[:, 0]) @ affine[None]
  points = np.einsum("nij,npj->npi", matrix, points) + (
      shift + 0.5 * model.translation * pose[:, 1:])[:, None, :]
  # The separable Gaussian pen, summed over the points, saturating as ink.
  axis = (np.arange(28) - 13.5) / _PIXELS_PER_UNIT
  ex = np.exp(-np.square(points[..., 0:1] - axis) / (2.0 * width * width))
  ey = np.exp(-np.square(points[..., 1:2] + axis) / (2.0 * width * width))
  density = np.einsum("npr,npc->nrc", ey, ex)  # [n, 28 rows, 28 columns]
  strokes = 1.0 - np.exp(-0.5 * density)
  pixels = ink * strokes + noise_std * _rng(
      seed, _TAG_PIXEL_NOISE, index).normal(size=[n, 28, 28])
  return dict(pixels=np.clip(pixels, 0.0, 1.0).astype(np.float32),
              label=label.astype(np.int32), clean_label=clean.astype(np.int32))


__all__ = ["EMNIST_CLASSES", "HandwritingModel", "client", "glyphs"]
