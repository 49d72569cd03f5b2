"""The app's model and training: the TFF experiments' EMNIST CNN in JAX.

The architecture of `tff_canary.harness.data.tasks.emnist_cnn` (TFF's
`create_conv_dropout_model(only_digits=False)`): conv 3x3x32, conv 3x3x64,
2x2 max-pool, dropout 0.25, dense 128, dropout 0.5, dense 62 with softmax,
1,206,590 parameters, Keras's glorot-uniform kernels and zero biases; the
arrays in Keras's order and shapes (kernel [h, w, in, out], then bias), so
d and the canaries' coordinates match the TFF half's. `MODEL_SIZES["small"]`
is the same network narrower (4, 8, 16 units; 19,838 parameters) for tests.

Why JAX (README.md): the registry's jax/jaxlib wheels are CPU-only (no CUDA
wheel is pulled; PyTorch from the registry pulls its CUDA wheels), 341 MB
for jaxlib, and they need nothing but NumPy, ml-dtypes and opt-einsum;
Keras 3 would need a backend (JAX again) and more packages. Plain JAX: the
client's SGD is one line, so neither Flax nor Optax is needed.

Training as the TFF clients do (tasks.py's client spec): local SGD at
`client-learning-rate` over the client's examples in order, batches of
`batch-size`, `client-epochs` passes, cross-entropy loss; dropout's mask is
drawn from (seed, round, client) so a client's update is a function of its
inputs.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
from flwr.app import Array, ArrayRecord

from tff_canary.stats import validation

from tff_canary_emnist import synthetic

# (conv1 filters, conv2 filters, dense units) of each model size.
MODEL_SIZES = {"full": (32, 64, 128), "small": (4, 8, 16)}
DROPOUT = (0.25, 0.5)


def shapes(size: str) -> list[tuple[str, tuple[int, ...]]]:
  """(name, shape) of every array, in Keras's trainable-variable order."""
  size = validation.as_choice(size, "model-size", tuple(MODEL_SIZES))
  c1, c2, units = MODEL_SIZES[size]
  flat = 12 * 12 * c2  # 28 -> 26 -> 24 (valid 3x3 convs) -> 12 (pool)
  return [("conv1/kernel", (3, 3, 1, c1)), ("conv1/bias", (c1,)),
          ("conv2/kernel", (3, 3, c1, c2)), ("conv2/bias", (c2,)),
          ("dense1/kernel", (flat, units)), ("dense1/bias", (units,)),
          ("dense2/kernel", (units, synthetic.EMNIST_CLASSES)),
          ("dense2/bias", (synthetic.EMNIST_CLASSES,))]


def initial_params(seed: int, size: str) -> dict[str, np.ndarray]:
  """Keras's initializers: glorot-uniform kernels, limit sqrt(6 / (fan_in +
  fan_out)) (Glorot & Bengio, AISTATS 2010, eq. 16; a conv's fans are
  h w in and h w out), zero biases; float32, seeded by `seed`."""
  rng = np.random.default_rng(validation.as_int(seed, "seed", minimum=0))
  params = {}
  for name, shape in shapes(size):
    if name.endswith("bias"):
      params[name] = np.zeros(shape, np.float32)
      continue
    receptive = int(np.prod(shape[:-2])) if len(shape) > 2 else 1
    fan_in, fan_out = shape[-2] * receptive, shape[-1] * receptive
    limit = np.sqrt(6.0 / (fan_in + fan_out))
    params[name] = rng.uniform(-limit, limit, shape).astype(np.float32)
  return params


def to_record(params: dict[str, np.ndarray]) -> ArrayRecord:
  return ArrayRecord({k: Array(np.asarray(v)) for k, v in params.items()})


def from_record(record: ArrayRecord) -> dict[str, np.ndarray]:
  return dict(zip(record.keys(), record.to_numpy_ndarrays()))


def _conv(x, kernel, bias):
  y = jax.lax.conv_general_dilated(x, kernel, (1, 1), "VALID",
                                   dimension_numbers=("NHWC", "HWIO", "NHWC"))
  return jax.nn.relu(y + bias)


def _dropout(x, rate, key):
  keep = jax.random.uniform(key, x.shape) >= rate
  return jnp.where(keep, x / (1.0 - rate), 0.0)


def logits(params, pixels, key=None):
  """The network's logits [n, 62]; dropout when `key` is given."""
  x = pixels[..., None]
  x = _conv(x, params["conv1/kernel"], params["conv1/bias"])
  x = _conv(x, params["conv2/kernel"], params["conv2/bias"])
  x = jax.lax.reduce_window(x, -jnp.inf, jax.lax.max, (1, 2, 2, 1),
                            (1, 2, 2, 1), "VALID")
  keys = (None, None) if key is None else jax.random.split(key)
  if key is not None:
    x = _dropout(x, DROPOUT[0], keys[0])
  x = x.reshape(x.shape[0], -1)
  x = jax.nn.relu(x @ params["dense1/kernel"] + params["dense1/bias"])
  if key is not None:
    x = _dropout(x, DROPOUT[1], keys[1])
  return x @ params["dense2/kernel"] + params["dense2/bias"]


def _loss(params, pixels, label, key):
  scores = jax.nn.log_softmax(logits(params, pixels, key))
  return -jnp.mean(jnp.take_along_axis(scores, label[:, None], 1))


@functools.partial(jax.jit, donate_argnums=())
def _sgd_step(params, pixels, label, key, learning_rate):
  grads = jax.grad(_loss)(params, pixels, label, key)
  return jax.tree_util.tree_map(lambda p, g: p - learning_rate * g,
                                params, grads)


def train(params: dict[str, np.ndarray], data: dict, *, learning_rate: float,
          batch_size: int, epochs: int, key_seed: tuple[int, ...]
          ) -> dict[str, np.ndarray]:
  """Local SGD (module docstring); returns the trained float32 arrays."""
  learning_rate = validation.as_positive(learning_rate, "client-learning-rate")
  batch_size = validation.as_int(batch_size, "batch-size", minimum=1)
  epochs = validation.as_int(epochs, "client-epochs", minimum=1)
  p = {k: jnp.asarray(v) for k, v in params.items()}
  key = jax.random.PRNGKey(0)
  for part in key_seed:
    key = jax.random.fold_in(key, int(part) % 2**31)
  n = data["label"].shape[0]
  for _ in range(epochs):
    for start in range(0, n, batch_size):
      key, step_key = jax.random.split(key)
      p = _sgd_step(p, jnp.asarray(data["pixels"][start:start + batch_size]),
                    jnp.asarray(data["label"][start:start + batch_size]),
                    step_key, learning_rate)
  # In the order received: JAX returns a dict's keys sorted, and Flower's
  # server-side clipping pairs a reply's arrays with the model's by
  # POSITION (flwr/serverapp/strategy/dp_adaptive_clipping.py,
  # dp_fixed_clipping.py: zip of to_numpy_ndarrays()), so a reply in another
  # order is garbled silently where the shapes broadcast.
  return {k: np.asarray(p[k], np.float32) for k in params}


@jax.jit
def _eval_batch(params, pixels, label):
  out = logits(params, pixels)
  scores = jax.nn.log_softmax(out)
  loss = -jnp.sum(jnp.take_along_axis(scores, label[:, None], 1))
  return loss, jnp.sum(jnp.argmax(out, 1) == label)


def evaluate(params: dict[str, np.ndarray], data: dict,
             batch_size: int = 64) -> dict[str, float]:
  """Mean loss and accuracy over `data` (no dropout)."""
  p = {k: jnp.asarray(v) for k, v in params.items()}
  loss = correct = 0.0
  n = data["label"].shape[0]
  for start in range(0, n, batch_size):
    batch_loss, batch_correct = _eval_batch(
        p, jnp.asarray(data["pixels"][start:start + batch_size]),
        jnp.asarray(data["label"][start:start + batch_size]))
    loss, correct = loss + float(batch_loss), correct + float(batch_correct)
  return {"loss": loss / n, "accuracy": correct / n}


__all__ = ["MODEL_SIZES", "evaluate", "from_record", "initial_params",
           "logits", "shapes", "to_record", "train"]
