"""Answer deadlines of the episode owner's requests: exponential backoff over the episode's base timeouts.

Pure arithmetic on microseconds; the stream processor's timer reads the clock and calls the owner's
`on_tick` with it.
"""

from __future__ import annotations

BACKOFF_FACTOR = 2.0
"""Attempt n waits BACKOFF_FACTOR**(n-1) times the base timeout: a slow (not dead) pool gets more time."""

ANSWER_GRACE_S = 10.0
"""Added to every wait: a worker enforces the base limit itself (a step's wall time, a test run), then still
has to snapshot and produce its answer through Kafka. Without it the owner would race the worker's own
timeout and re-issue work whose answer is on its way."""


def answer_deadline_us(now_us: int, base_s: float, attempt: int) -> int:
    """When the owner gives up on attempt `attempt` (from 1) of a request issued at `now_us`."""
    if attempt < 1:
        raise ValueError(f"attempts count from 1, got {attempt}")
    wait_s = base_s * BACKOFF_FACTOR ** (attempt - 1) + ANSWER_GRACE_S
    return now_us + round(wait_s * 1_000_000)
