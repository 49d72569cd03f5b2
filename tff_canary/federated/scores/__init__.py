"""Canary scores: recording each round's aggregate, and the cosines of every
canary with it, during or after training."""
