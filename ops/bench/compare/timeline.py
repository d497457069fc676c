"""What one side of a comparison did, by the clock, and the figures read from it: episodes trained per
minute and the learner's idle fraction, over the whole run and in steady state.

Both sides are counted by the same rules. An episode counts once a learner update trained on it; one
dropped as too stale (`learner.objective.is_stale`, the learner's own rule) or failed costs its time and
counts nothing. The run ends when the last update ends. The learner is busy while an update runs and idle
otherwise (waiting for a batch, or for the loop's rollout and verification), so its idle fraction is the
share of the wall time not in an update.

Steady state leaves out the ramp-up (before the first update starts the learner can only wait) and the
drain (the last update, after which nothing is left to train): the window runs from the first update's
start to the last update's start, and counts the episodes of the updates that started before the last.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Update:
    """One learner step: when it ran and the episodes (by seed) it trained on."""

    start: float
    end: float
    seeds: tuple[int, ...]

    def __post_init__(self) -> None:
        if self.end < self.start:
            raise ValueError(f"an update cannot end ({self.end}) before it starts ({self.start})")


@dataclass(frozen=True, slots=True)
class Rate:
    """Episodes trained per minute over a window, and the learner's idle share of it."""

    seconds: float
    trained: int
    busy_s: float

    @property
    def per_minute(self) -> float:
        return 60 * self.trained / self.seconds if self.seconds > 0 else 0.0

    @property
    def idle(self) -> float:
        """In [0, 1]: the share of the window the learner did not spend updating."""
        if self.seconds <= 0:
            return 0.0
        return min(1.0, max(0.0, 1 - self.busy_s / self.seconds))


@dataclass(frozen=True)
class Timeline:
    started: float
    updates: tuple[Update, ...]
    completed: int  # episodes that finished (trained, dropped or not) with a reward
    failed: int = 0  # episodes that ended without one
    dropped: tuple[int, ...] = ()  # seeds of completed episodes dropped as too stale

    def __post_init__(self) -> None:
        for before, after in zip(self.updates, self.updates[1:], strict=False):
            if after.start < before.end:
                raise ValueError("a learner runs one update at a time")
        if self.updates and self.updates[0].start < self.started:
            raise ValueError("an update cannot start before the run")

    @property
    def ended(self) -> float:
        return self.updates[-1].end if self.updates else self.started

    @property
    def trained(self) -> int:
        return sum(len(update.seeds) for update in self.updates)

    def trained_seeds(self) -> list[int]:
        return sorted(seed for update in self.updates for seed in update.seeds)

    @property
    def whole(self) -> Rate:
        busy = sum(update.end - update.start for update in self.updates)
        return Rate(self.ended - self.started, self.trained, busy)

    @property
    def steady(self) -> Rate | None:
        """The window from the first update's start to the last one's start (None with fewer than 2)."""
        if len(self.updates) < 2:
            return None
        counted = self.updates[:-1]
        return steady_rate(counted, self.updates[-1].start)


def steady_rate(counted: Sequence[Update], until: float) -> Rate:
    busy = sum(min(update.end, until) - update.start for update in counted)
    trained = sum(len(update.seeds) for update in counted)
    return Rate(until - counted[0].start, trained, busy)
