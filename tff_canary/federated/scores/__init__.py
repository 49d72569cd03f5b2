"""Canary scores: the cosine table, from the state or from recorded aggregates.
"""
