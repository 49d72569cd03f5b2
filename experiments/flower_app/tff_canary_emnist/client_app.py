"""The ClientApp: a writer's local SGD on the app's CNN (task.py).

Writer = the node's `partition-id` (Flower's simulation numbers its nodes
0 .. num-supernodes - 1): synthetic writer `partition-id` of the data seed,
or the `partition-id`-th writer of TFF's EMNIST file (`data = "tff"`). Every
setting comes in the round's train config from the ServerApp
(server_app.train_config), so the two cannot disagree. The reply: the
trained arrays and FedAvg's weight `dp-weight` = 1 (DP-FedAvg's equal
weights, McMahan et al., "Learning Differentially Private Recurrent
Language Models", ICLR 2018, Algorithm 1 with w_k = 1: Flower's noise is
calibrated to 1/n per client, and its accountant assumes equal weights),
with the example count beside it, and the writer (`WRITER_KEY`, a
ConfigRecord: FedAvg averages only the MetricRecord) by which the ServerApp
orders the replies (server_app.InWriterOrder).
"""

from __future__ import annotations

import functools
import os

from flwr.app import ConfigRecord, Context, Message, MetricRecord, RecordDict
from flwr.clientapp import ClientApp

from tff_canary_emnist import emnist_files
from tff_canary_emnist import synthetic
from tff_canary_emnist import task

WEIGHT_KEY = "dp-weight"
WRITER_KEY = "writer"

app = ClientApp()


@functools.lru_cache(maxsize=2)
def _emnist_file(path: str) -> emnist_files.EmnistFile:
  return emnist_files.EmnistFile(path)


def writer_data(config, index: int) -> dict:
  """Writer `index`'s training examples as the config says."""
  if config["data"] == "tff":
    data = _emnist_file(os.path.join(str(config["data-dir"]),
                                     emnist_files.TRAIN_FILE))
    return data.client(index % len(data))
  return synthetic.client(int(config["seed"]), index,
                          int(config["examples-per-client"]))


@app.train()
def train(msg: Message, context: Context) -> Message:
  config = msg.content["config"]
  index = int(context.node_config["partition-id"])
  params = task.from_record(msg.content["arrays"])
  data = writer_data(config, index)
  trained = task.train(
      params, data, learning_rate=float(config["client-learning-rate"]),
      batch_size=int(config["batch-size"]),
      epochs=int(config["client-epochs"]),
      key_seed=(int(config["seed"]), int(config["server-round"]), index))
  content = RecordDict({
      "arrays": task.to_record(trained),
      "metrics": MetricRecord({WEIGHT_KEY: 1,
                               "num-examples": int(data["label"].shape[0])}),
      WRITER_KEY: ConfigRecord({"partition-id": index})})
  return Message(content, reply_to=msg)


def writer_of(reply: Message) -> tuple[int, int]:
  """The sort key of a reply: (0, its writer), or (1, 0) for a reply
  without one (an error), after the writers."""
  if reply.has_error() or WRITER_KEY not in reply.content:
    return (1, 0)
  return (0, int(reply.content[WRITER_KEY]["partition-id"]))


__all__ = ["WEIGHT_KEY", "WRITER_KEY", "app", "train", "writer_data",
           "writer_of"]
