"""The canary design and its record: which canaries a run has, when the
inserted ones take part, and the table of their statistics."""
