"""EMNIST character recognition with DP-FedAvg and canaries (paper §5.2.1).

The CNN of TFF's baselines (1,206,590 parameters) on EMNIST-62, trained with
DP-FedAvg and the canary aggregator; writes a run directory with every epsilon
of the method beside the analytical one (see docs/getting-started.md). Defaults: the built-in
synthetic data, sized to finish in minutes on 2 CPU cores. The paper's setting
is --data=tff --clients_per_round=101 --epochs=15 --client_learning_rate=0.031
--server_learning_rate=1.0 --server_momentum=0.9 --batch_size=16.

  .venv/bin/python experiments/emnist.py --output_dir runs/emnist
  .venv/bin/python experiments/emnist.py --output_dir runs/emnist --resume
"""

import experiment_cli
import experiment_flags

# Defaults: about 5 minutes on 2 cores. 80 rounds of 50 clients (32 examples,
# two local steps each); z = 0.1, like the paper's EMNIST noise levels
# (0.0487-0.2207); 80 canary candidates split by fair coins, ~40 inserted
# once each: 1% of the run's 4000 client participations, the paper's ratio.
experiment_flags.define_flags(
    "emnist", output_dir="runs/emnist", num_rounds=80, clients_per_round=50,
    examples_per_client=32, noise_multiplier=0.1, client_learning_rate=0.1,
    num_inserted=40, num_held_out=40, eval_every=20, checkpoint_every=20)

if __name__ == "__main__":
  experiment_cli.run("emnist", __doc__)
