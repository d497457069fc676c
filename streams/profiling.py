"""Optional cProfile of a streams worker process, for `trialog bench pipeline --profile`.

With `TRIALOG_STREAMS_PROFILE=PATH` in its environment the worker profiles itself from start to exit and
writes the stats to PATH (read them with `python -m pstats PATH`). Only the main thread is profiled: the
event loop, where the worker decides, encodes and folds (Faust's consumer thread is not included).
"""

from __future__ import annotations

import atexit
import cProfile
import os

PROFILE_ENV = "TRIALOG_STREAMS_PROFILE"


def profile_from_env() -> bool:
    """Start profiling if asked to; the stats are written when the process exits normally."""
    path = os.environ.get(PROFILE_ENV, "")
    if not path:
        return False
    profiler = cProfile.Profile()

    def dump() -> None:
        profiler.disable()
        profiler.dump_stats(path)

    atexit.register(dump)
    profiler.enable()
    return True
