"""TFF's runtime: the worker guard, the multi-worker runtime and the quiet
start (TensorFlow's C++ log level, set before it loads)."""
