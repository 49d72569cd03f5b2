"""Flower's message API driven in-process, for the Flower half's tests.

A Flower `Grid` whose `send_and_receive` answers each instruction with a
reply built by a Python function (a ClientApp's training, without Ray or
a SuperLink), replies sorted by node id so that FedAvg sums them in the
same order in every run, and each round's replies kept for the tests to
read (Flower's server-side clipping replaces a reply's arrays in place, so
the kept replies hold the clipped updates after `aggregate_train`).

`server_identity`: FedAvg's `configure_train` builds its Messages with the
process's `TaskIdentity`, which Flower's runtime sets in a ServerApp's
process (flwr/superlink/runtime/run_serverapp.py; `run_simulation` sets a
dummy one, simulation/run_simulation.py); the tests set the same, as
Flower's own `run_simulation` does, and put back what was there.
"""

from __future__ import annotations

import contextlib

import numpy as np
from flwr.app import Array, ArrayRecord, Message, MetricRecord, RecordDict
from flwr.serverapp import Grid
from flwr.supercore.task_identity import TaskIdentity

ARRAYS_KEY = "arrays"  # FedAvg's default arrayrecord_key
WEIGHT_KEY = "num-examples"  # FedAvg's default weighted_by_key


@contextlib.contextmanager
def server_identity(run_id: int = 1):
  """A ServerApp process's `TaskIdentity` (module docstring)."""
  names = ("_task_id", "_run_id", "_node_id")
  before = {name: TaskIdentity.__dict__[name] for name in names}
  TaskIdentity.task_id, TaskIdentity.run_id, TaskIdentity.node_id = 1, run_id, 0
  try:
    yield
  finally:
    for name, value in before.items():
      setattr(TaskIdentity, name, value)


def reply_content(arrays: dict[str, np.ndarray], weight: float = 1.0,
                  extra_metrics: dict | None = None) -> RecordDict:
  """A training reply's content: the arrays and FedAvg's weight."""
  metrics = {WEIGHT_KEY: weight, **(extra_metrics or {})}
  return RecordDict({
      ARRAYS_KEY: ArrayRecord({k: Array(np.asarray(v))
                               for k, v in arrays.items()}),
      "metrics": MetricRecord(metrics)})


def noisy_trainer(scale: float, seed: int = 0):
  """A ClientApp's training as a function of its instruction: the model
  received plus `scale` x N(0, I), drawn from (seed, node, round), so the
  same round of the same node gives the same update in every run."""

  def train(message: Message) -> RecordDict:
    record = message.content[ARRAYS_KEY]
    server_round = int(message.content["config"]["server-round"])
    rng = np.random.default_rng([seed, message.metadata.dst_node_id,
                                 server_round])
    return reply_content({k: a + scale * rng.normal(size=a.shape).astype(
        a.dtype) for k, a in zip(record.keys(), record.to_numpy_ndarrays())})

  return train


class LocalGrid(Grid):
  """A Grid of `num_nodes` nodes whose replies are `train(message)`, a
  reply's content or a `flwr.app.Error` (module docstring);
  `replies[server_round]` keeps each training round's replies and
  `sent[server_round]` the model sent (flat, `flat`)."""

  def __init__(self, num_nodes: int, train):
    self._nodes = list(range(1, num_nodes + 1))
    self._train = train
    self.replies: dict[int, list[Message]] = {}
    self.sent: dict[int, np.ndarray] = {}
    self._run = None

  def set_run(self, run) -> None:
    self._run = run

  @property
  def run(self):
    return self._run

  def create_message(self, *args, **kwargs):
    raise NotImplementedError("FedAvg builds its own Messages.")

  def get_node_ids(self):
    return list(self._nodes)

  def push_messages(self, messages):
    raise NotImplementedError("send_and_receive answers in-process.")

  def pull_messages(self, message_ids):
    raise NotImplementedError("send_and_receive answers in-process.")

  def send_and_receive(self, messages, *, timeout=None):
    del timeout  # unused: nothing waits
    messages = sorted(messages, key=lambda m: m.metadata.dst_node_id)
    # Message(content_or_error, reply_to=...) takes either.
    replies = [Message(self._train(m), reply_to=m) for m in messages]
    if messages:
      server_round = int(messages[0].content["config"]["server-round"])
      self.replies[server_round] = replies
      self.sent[server_round] = flat(messages[0].content[ARRAYS_KEY])
    return replies


def flat(record: ArrayRecord) -> np.ndarray:
  """A record's arrays as one float64 vector, in its key order."""
  return np.concatenate([np.asarray(a, np.float64).reshape(-1)
                         for a in record.to_numpy_ndarrays()])
