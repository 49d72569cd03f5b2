"""Canary scores: the cosine table, from the state or from recorded aggregates.

Orthogonal canaries are scored inside each round and their table comes from
the process state (`orthogonal_table`); gaussian canaries (the paper's) have
each round's aggregate recorded (`aggregate_recorder`) and one pass after
training (`cosine_pass`).
"""
