"""TFF's runtime: the worker guard and the multi-worker runtime."""
