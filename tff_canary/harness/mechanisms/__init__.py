"""Moved: the DP mechanisms are `tff_canary.mechanisms`, one package each.

This package is kept, empty, for one release so that the old paths of its
modules (`harness.mechanisms.tree`, ...) keep working with a
DeprecationWarning naming the new path (`tff_canary.moved_modules`).
"""
