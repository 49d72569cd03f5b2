"""Finding and flattening nodes of TFF value structures (states, metrics,
model weights)."""
