"""What the CLI prints: timed steps and clear, actionable errors instead of tracebacks."""

from __future__ import annotations

import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager


def say(message: str) -> None:
    # Progress goes to stderr so that `--json` output on stdout stays machine-readable.
    print(message, file=sys.stderr, flush=True)


@contextmanager
def step(title: str) -> Iterator[None]:
    """Print a step's title, then its duration; a failing step says it failed and how long it ran."""
    say(f"-> {title} ...")
    started = time.monotonic()
    try:
        yield
    except BaseException:
        say(f"!! {title}: failed after {time.monotonic() - started:.1f} s")
        raise
    say(f"ok {title} ({time.monotonic() - started:.1f} s)")
