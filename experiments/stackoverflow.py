"""StackOverflow next-word prediction with DP-FedAvg and canaries (paper §5.1).

TFF's baseline word LSTM (4,050,748 parameters with the 10,000-word
vocabulary) trained with DP-FedAvg and adaptive clipping; writes a run
directory with every epsilon of the method beside the analytical one. Defaults:
built-in synthetic data at a size a 2-core machine finishes in minutes. The
paper's setting is --data=tff --clients_per_round=167 --num_rounds=2048
--num_inserted=1000 --num_held_out=1000 --assignment=fixed (one epoch over
341k clients).

  .venv/bin/python experiments/stackoverflow.py --output_dir runs/stackoverflow
"""

import experiment_cli
import experiment_flags

experiment_flags.define_flags(
    "stackoverflow", output_dir="runs/stackoverflow", num_rounds=40,
    clients_per_round=20, examples_per_client=16, noise_multiplier=0.5,
    num_inserted=20, num_held_out=20, client_learning_rate=0.3,
    server_learning_rate=1.0, server_momentum=0.0, eval_every=20,
    checkpoint_every=20, eval_examples=500)

if __name__ == "__main__":
  experiment_cli.run("stackoverflow", __doc__)
