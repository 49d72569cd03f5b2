"""Generative models of the built-in synthetic data (TensorFlow only, no TFF).

`HandwritingModel` draws EMNIST-like clients (28x28 glyphs of 62 classes with
per-writer style, label skew and label noise) and `SentenceModel`
StackOverflow-like clients (sentences from a Markov chain with per-user
preferences and topics); docs/guide/experiments.md describes both. Each
client is a pure function of (seed, client index, sizes, model) computed
with stateless random ops (`tf.random.stateless_*`), so it is the same in
every process and costs nothing until it is generated;
`tff_canary.harness.data.datasets` wraps them as TFF `ClientData`.
"""

from __future__ import annotations

import collections
import dataclasses
import functools

import numpy as np
import tensorflow as tf

from tff_canary.stats import validation

EMNIST_CLASSES = 62
_TAG_TEMPLATES = 101


def _seed(seed: int, tag: int, index) -> tf.Tensor:
  """A stateless seed [seed, tag * 2^32 + index] as int64[2]."""
  return tf.stack([tf.constant(seed, tf.int64),
                   tf.constant(tag, tf.int64) * (2 ** 32)
                   + tf.cast(index, tf.int64)])


@dataclasses.dataclass(frozen=True)
class HandwritingModel:
  """The generative model of the synthetic EMNIST (all scales in glyph units).

  Every class has `STROKES` quadratic Bezier strokes; classes come in
  `num_groups` confusable groups, each class `separation` from its group's
  shape; each client (a "writer") draws a handwriting offset, an affine
  style, a stroke width, ink, pixel noise and class proportions
  Dirichlet(label_alpha); a fraction label_noise x 61 / 62 of the labels is
  wrong. The full model, with its formulas: docs/guide/experiments.md, "The
  built-in synthetic data".
  """

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

  def __post_init__(self):
    v = validation
    object.__setattr__(self, "num_groups", v.as_int(
        self.num_groups, "num_groups", minimum=1))
    for name in ("separation", "jitter", "client_offset", "rotation", "shear",
                 "log_scale", "translation"):
      object.__setattr__(self, name, v.as_nonnegative(getattr(self, name),
                                                      name))
    for name, low in (("width_px", 1e-3), ("ink", 1e-3), ("noise", 0.0)):
      pair = getattr(self, name)
      if (not isinstance(pair, tuple) or len(pair) != 2
          or not low <= v.as_float(pair[0], name) <= v.as_float(pair[1], name)):
        raise ValueError(f"{name} must be a (low, high) pair with {low} <= "
                         f"low <= high, got {pair!r}.")
    object.__setattr__(self, "label_alpha", v.as_positive(
        self.label_alpha, "label_alpha"))
    object.__setattr__(self, "label_noise", v.as_unit_interval(
        self.label_noise, "label_noise"))


STROKES = 3
_POINTS_PER_STROKE = 16
_PIXELS_PER_UNIT = 10.0
# Tags of the per-client streams of synthetic EMNIST.
(_TAG_STYLE, _TAG_STYLE_UNIFORM, _TAG_PROPORTIONS, _TAG_LABELS, _TAG_JITTER,
 _TAG_POSE, _TAG_PIXEL_NOISE, _TAG_FLIP, _TAG_FLIP_CLASS) = range(201, 210)


def emnist_glyphs(seed: int, model: HandwritingModel) -> tf.Tensor:
  """Control points of every class, float32[62, STROKES, 3, 2]."""
  base = tf.random.stateless_uniform(
      [model.num_groups, STROKES, 3, 2], seed=_seed(seed, _TAG_TEMPLATES, 0),
      minval=-0.8, maxval=0.8)
  own = tf.random.stateless_normal([EMNIST_CLASSES, STROKES, 3, 2],
                                   seed=_seed(seed, _TAG_TEMPLATES, 1))
  group = tf.range(EMNIST_CLASSES) % model.num_groups
  return tf.gather(base, group) + model.separation * own


def _rotation(angle):
  c, s = tf.cos(angle), tf.sin(angle)
  return tf.stack([tf.stack([c, -s], -1), tf.stack([s, c], -1)], -2)


def _axis():
  """Pixel centers in glyph units (x = column; y = -row)."""
  return tf.constant((np.arange(28, dtype=np.float32) - 13.5)
                     / _PIXELS_PER_UNIT)


def _bernstein():
  t = np.linspace(0.0, 1.0, _POINTS_PER_STROKE, dtype=np.float32)
  return tf.constant(np.stack([(1 - t) ** 2, 2 * t * (1 - t), t ** 2], -1))


def _check_model(model, cls):
  if not isinstance(model, cls):
    raise TypeError(f"model must be a {cls.__name__}, got {model!r}.")
  return model


def emnist_generator(seed: int, examples: int, model: HandwritingModel):
  """The compiled generator of one data set: a `tf.function` of the index.

  `emnist_generator(seed, examples, model)(index)` is `emnist_client(seed,
  index, examples, model)`. Every caller of one data set shares this graph:
  the same graph gives bitwise the same floats in any process, while eager
  execution may round differently (by 1 ulp), and eager generation costs
  about 15 times more per client.
  """
  return emnist_graph(validation.as_int(seed, "seed", minimum=0),
                      validation.as_int(examples, "examples", minimum=1),
                      _check_model(model, HandwritingModel))


def emnist_graph(seed: int, examples: int, model: HandwritingModel):
  """`emnist_generator` of arguments checked already (a run's data,
  `datasets.load`, whose settings its config checked)."""
  return _compiled(_draw_emnist, seed, examples, model)


@functools.lru_cache(maxsize=64)
def _compiled(draw, seed, *sizes_and_model):
  """`draw(seed, index, *sizes_and_model)` as a graph of the index."""
  return tf.function(lambda index: draw(seed, index, *sizes_and_model),
                     input_signature=[tf.TensorSpec([], tf.int64)])


def emnist_client(seed: int, index, examples: int, model: HandwritingModel
                  ) -> dict[str, tf.Tensor]:
  """Client `index`'s examples: pixels [n, 28, 28], label, clean_label.

  `label` is the observed (possibly replaced) label and `clean_label` the
  class that was drawn; run through `emnist_generator`'s graph.
  """
  return emnist_generator(seed, examples, model)(tf.cast(index, tf.int64))


def _draw_emnist(seed, index, examples, model):
  n = examples
  glyphs = emnist_glyphs(seed, model)

  def stream(tag):
    return _seed(seed, tag, index)

  style = tf.random.stateless_normal([STROKES * 6 + 6], seed=stream(_TAG_STYLE))
  uniforms = tf.random.stateless_uniform([3], seed=stream(_TAG_STYLE_UNIFORM))
  offset = model.client_offset * tf.reshape(style[:STROKES * 6],
                                            [STROKES, 3, 2])
  angle, shear = model.rotation * style[-6], model.shear * style[-5]
  scales = tf.exp(model.log_scale * style[-4:-2])
  affine = tf.matmul(_rotation(angle), tf.linalg.diag(scales)) @ tf.stack(
      [tf.stack([1.0, shear]), tf.constant([0.0, 1.0])])
  shift = model.translation * style[-2:]

  def between(pair, u):
    return pair[0] + (pair[1] - pair[0]) * u

  width = between(model.width_px, uniforms[0]) / _PIXELS_PER_UNIT
  ink = between(model.ink, uniforms[1])
  noise_std = between(model.noise, uniforms[2])

  gamma = tf.random.stateless_gamma([EMNIST_CLASSES], seed=stream(
      _TAG_PROPORTIONS), alpha=model.label_alpha)
  logits = tf.math.log(gamma / tf.reduce_sum(gamma) + 1e-30)
  clean = tf.cast(tf.random.stateless_categorical(
      logits[None], n, seed=stream(_TAG_LABELS))[0], tf.int32)
  flip = tf.random.stateless_uniform([n], seed=stream(_TAG_FLIP)) < (
      model.label_noise)
  other = tf.random.stateless_uniform([n], seed=stream(_TAG_FLIP_CLASS),
                                      maxval=EMNIST_CLASSES, dtype=tf.int32)
  label = tf.where(flip, other, clean)

  controls = tf.gather(glyphs, clean) + offset + model.jitter * (
      tf.random.stateless_normal([n, STROKES, 3, 2], seed=stream(_TAG_JITTER)))
  points = tf.reshape(tf.einsum("pk,nskd->nspd", _bernstein(), controls),
                      [n, STROKES * _POINTS_PER_STROKE, 2])
  pose = tf.random.stateless_normal([n, 3], seed=stream(_TAG_POSE))
  per_example = _rotation(0.5 * model.rotation * pose[:, 0])  # [n, 2, 2]
  matrix = tf.matmul(per_example, affine[None])
  points = tf.einsum("nij,npj->npi", matrix, points) + (
      shift + 0.5 * model.translation * pose[:, 1:])[:, None, :]
  # Separable Gaussian pen: exp(-r^2/2w^2) = exp(-dx^2/2w^2) exp(-dy^2/2w^2),
  # summed over the points (a batched matmul), saturating as ink does.
  axis = _axis()
  ex = tf.exp(-tf.square(points[..., 0:1] - axis) / (2.0 * width * width))
  ey = tf.exp(-tf.square(points[..., 1:2] + axis) / (2.0 * width * width))
  density = tf.einsum("npr,npc->nrc", ey, ex)  # [n, 28 rows, 28 columns]
  strokes = tf.reshape(1.0 - tf.exp(-0.5 * density), [n, 784])
  pixels = ink * strokes + noise_std * tf.random.stateless_normal(
      [n, 784], seed=stream(_TAG_PIXEL_NOISE))
  pixels = tf.reshape(tf.clip_by_value(pixels, 0.0, 1.0), [n, 28, 28])
  return collections.OrderedDict(pixels=pixels, label=label,
                                 clean_label=clean)


@dataclasses.dataclass(frozen=True)
class SentenceModel:
  """The generative model of the synthetic StackOverflow.

  After word w comes one of `len(successor_weights)` successors
  s_k(w) = (7 w + 13 k + 1) mod min(core_size, vocab_size), k drawn from the
  client's preferences q_i ~ Dirichlet(concentration x successor_weights);
  sentences start near the client's topic (`topic_width`), and each later
  word is replaced by a uniform one with probability `replace`. The full
  model: docs/guide/experiments.md, "The built-in synthetic data".
  """

  core_size: int = 2000
  successor_weights: tuple[float, ...] = (0.4, 0.3, 0.2, 0.1)
  concentration: float = 4.0
  topic_width: int = 200
  replace: float = 0.1

  def __post_init__(self):
    v = validation
    object.__setattr__(self, "core_size", v.as_int(self.core_size,
                                                   "core_size", minimum=1))
    object.__setattr__(self, "topic_width", v.as_int(
        self.topic_width, "topic_width", minimum=1))
    weights = self.successor_weights
    if (not isinstance(weights, tuple) or not weights
        or any(v.as_positive(w, "successor_weights") <= 0 for w in weights)
        or abs(sum(weights) - 1.0) > 1e-6):
      raise ValueError("successor_weights must be a tuple of positive weights "
                       f"summing to 1, got {weights!r}.")
    object.__setattr__(self, "concentration", v.as_positive(
        self.concentration, "concentration"))
    object.__setattr__(self, "replace", v.as_unit_interval(self.replace,
                                                           "replace"))


# Tags of the per-client streams of synthetic StackOverflow.
(_TAG_PREFERENCES, _TAG_TOPIC, _TAG_FIRST, _TAG_SLOTS, _TAG_REPLACE,
 _TAG_REPLACEMENT) = range(301, 307)


def stackoverflow_generator(seed: int, sentences: int, length: int,
                            vocab_size: int, model: SentenceModel):
  """The compiled generator of one data set: a `tf.function` of the index.

  `stackoverflow_generator(seed, sentences, length, vocab_size, model)(index)`
  is `stackoverflow_client(seed, index, sentences, length, vocab_size,
  model)`; shared by every caller, like `emnist_generator`.
  """
  return stackoverflow_graph(
      validation.as_int(seed, "seed", minimum=0),
      validation.as_int(sentences, "sentences", minimum=1),
      validation.as_int(length, "length", minimum=2),
      validation.as_int(vocab_size, "vocab_size", minimum=1),
      _check_model(model, SentenceModel))


def stackoverflow_graph(seed: int, sentences: int, length: int,
                        vocab_size: int, model: SentenceModel):
  """`stackoverflow_generator` of arguments checked already (like
  `emnist_graph`)."""
  return _compiled(_draw_sentences, seed, sentences, length, vocab_size,
                   model)


def stackoverflow_client(seed: int, index, sentences: int, length: int,
                         vocab_size: int, model: SentenceModel
                         ) -> dict[str, tf.Tensor]:
  """Client `index`'s sentences as word indices, and its preferences.

  Returns `words` int64[sentences, length] and `preferences` float32[k] (the
  client's q_i), run through `stackoverflow_generator`'s graph.
  """
  return stackoverflow_generator(seed, sentences, length, vocab_size, model)(
      tf.cast(index, tf.int64))


def _draw_sentences(seed, index, sentences, length, vocab_size, model):
  core = min(model.core_size, vocab_size)
  slots = len(model.successor_weights)

  def stream(tag):
    return _seed(seed, tag, index)

  gamma = tf.random.stateless_gamma(
      [slots], seed=stream(_TAG_PREFERENCES),
      alpha=model.concentration * np.asarray(model.successor_weights,
                                             np.float32))
  preferences = gamma / tf.reduce_sum(gamma)
  topic = tf.random.stateless_uniform([], seed=stream(_TAG_TOPIC), maxval=core,
                                      dtype=tf.int64)
  first = tf.math.floormod(topic + tf.random.stateless_uniform(
      [sentences], seed=stream(_TAG_FIRST), maxval=model.topic_width,
      dtype=tf.int64), core)
  choices = tf.reshape(tf.random.stateless_categorical(
      tf.math.log(preferences + 1e-30)[None], (length - 1) * sentences,
      seed=stream(_TAG_SLOTS)), [length - 1, sentences])
  replace = tf.random.stateless_uniform(
      [length - 1, sentences], seed=stream(_TAG_REPLACE)) < model.replace
  uniform = tf.random.stateless_uniform(
      [length - 1, sentences], seed=stream(_TAG_REPLACEMENT),
      maxval=vocab_size, dtype=tf.int64)

  def step(word, inputs):
    choice, swap, other = inputs
    return tf.where(swap, other, tf.math.floormod(word * 7 + choice * 13 + 1,
                                                  core))

  rest = tf.scan(step, (choices, replace, uniform), initializer=first)
  words = tf.transpose(tf.concat([first[None], rest], axis=0))
  return collections.OrderedDict(words=words, preferences=preferences)
