"""Defaults of reading a run back (`audit`, `replay`, `objects gc`): a module of its own, so that the
command line shows them without importing the codec."""

DEFAULT_STALE_AFTER_S = (
    600.0  # an episode not ended, silent this long before the run's newest record, is lost
)
DEFAULT_OUTPUT_CHARS = 400  # characters of each step's output that `replay` prints
DEFAULT_GC_WINDOW_DAYS = 14.0  # `objects gc`: records older than this no longer keep their blobs
DEFAULT_GC_GRACE_HOURS = 24.0  # `objects gc`: a blob written or reused more recently is never deleted
DEFAULT_GC_SETTLE_S = 60.0  # `objects gc --delete`: how long to wait before reading the new records once more
