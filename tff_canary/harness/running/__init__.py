"""Moved: the harness's runner is in `data`, `training` and `writing`.

This package is kept, empty, for one release so that the old paths of its
modules (`harness.running.experiment`, ...) keep working with a
DeprecationWarning naming the new path (`tff_canary.moved_modules`).
"""
