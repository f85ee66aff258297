"""The executor spawn modes an e2e suite runs in (issue 14: both)."""
SPAWN_MODES = ("process",)
