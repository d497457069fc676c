"""The pipeline side's learner in `trialog bench compare`: it trains whenever a batch is available.

A stand-in for `trialog worker learner` with its model taken out (as the policy is): an update takes a
fixed `update_s`, the same as the loop's, and publishes the next policy version. Trajectories queue in
the order they complete; when the learner is free it first drops those older than `max_staleness`
versions (`learner.objective.is_stale`, the learner's rule, on the version the episode started with),
then starts an update on the oldest `batch` of them. Once no more episodes can come (`draining`) it
trains what is left, however few, so that no completed episode goes untrained for want of company.

Pure: the caller gives the clock (`now`) and asks `next_due` when to come back.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from learner.objective import is_stale
from ops.bench.compare.timeline import Update


@dataclass
class SimLearner:
    batch: int
    update_s: float
    max_staleness: int
    version: int = 0
    queue: list[tuple[int, int]] = field(default_factory=list)  # (seed, the version it started with)
    updates: list[Update] = field(default_factory=list)
    dropped: list[int] = field(default_factory=list)
    staleness: list[int] = field(default_factory=list)  # of each trained episode, when its update started
    _running: Update | None = None

    def __post_init__(self) -> None:
        if self.batch < 1 or self.update_s <= 0 or self.max_staleness < 0:
            raise ValueError("batch >= 1, update seconds > 0 and max staleness >= 0")

    def arrive(self, seed: int, version: int) -> None:
        self.queue.append((seed, version))

    @property
    def busy(self) -> bool:
        return self._running is not None

    def next_due(self) -> float | None:
        """When the running update ends (None: none runs)."""
        return self._running.end if self._running is not None else None

    def tick(self, now: float, *, draining: bool = False) -> None:
        """Finish the update due by `now`, then start the next one if a batch is there."""
        if self._running is not None and now >= self._running.end:
            self.updates.append(self._running)
            self.version += 1
            self._running = None
        if self._running is not None:
            return
        fresh = [(s, v) for s, v in self.queue if not is_stale(v, self.version, self.max_staleness)]
        self.dropped += [s for s, v in self.queue if is_stale(v, self.version, self.max_staleness)]
        self.queue = fresh
        if len(fresh) >= self.batch or (draining and fresh):
            taken, self.queue = fresh[: self.batch], fresh[self.batch :]
            self.staleness += [self.version - version for _, version in taken]
            self._running = Update(now, now + self.update_s, tuple(seed for seed, _ in taken))
