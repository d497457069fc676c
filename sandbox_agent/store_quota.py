"""A per-episode quota on what an episode's snapshots add to the object store.

Every step's snapshot stores the files it changed, and content addressing keeps them all: an agent that
writes a workspace's worth of random bytes at every step (1 GiB by default, 100 steps) would put 100 GiB in
the store for one episode, and a policy that finds this does it in every episode. The quota bounds what one
episode may add: each step's new bytes are the sizes of the distinct files of its snapshot that the
snapshot before it did not hold (a file changed back and forth is counted each time: an overestimate,
never an under-count), summed over the episode's steps on this worker.

Past the quota the step is not lost and the grade is not erased: the step's result is recorded with the
workspace rolled back to the snapshot before it (the step's files are not kept, and stay unreferenced in
the store for `trialog objects gc` to delete), and stderr says so, so the agent (and the model) sees why
its files are gone. The episode goes on.

The count lives in the worker's memory, per episode, and is dropped when the episode ends: an episode that
moves to another worker (a crash, a rebalance) starts a fresh count there, so one episode may add up to the
quota once per worker it ran on. That bound is what is promised.
"""

from __future__ import annotations

import dataclasses
import threading
from collections import OrderedDict

from sandbox_agent.manifest import Manifest, SnapshotId
from sandbox_agent.results import StepResult
from sandbox_agent.snapshots import SnapshotStore

MIB = 1024 * 1024
REMEMBERED_EPISODES = 10_000  # counts kept for episodes whose end this worker did not hear of


def added_bytes(before: Manifest | None, after: Manifest) -> int:
    """Bytes of the distinct files `after` holds that `before` did not (by content)."""
    held = {entry.sha256 for entry in before.files} if before is not None else set()
    new = {entry.sha256: entry.size for entry in after.files if entry.sha256 not in held}
    return sum(new.values())


def over_quota_notice(added: int, used: int, quota: int) -> str:
    return (
        f"\n[trialog: this step's files ({added / MIB:.1f} MiB new) would bring the episode's stored "
        f"snapshots to {(used + added) / MIB:.1f} MiB, over its quota of {quota / MIB:.1f} MiB: the "
        "workspace was rolled back to before this step]\n"
    )


class EpisodeStoreQuota:
    """Counts each episode's added snapshot bytes and rolls back a step that would pass `quota_bytes`."""

    def __init__(self, snapshots: SnapshotStore, quota_bytes: int) -> None:
        if quota_bytes <= 0:
            raise ValueError("the per-episode store quota must be positive")
        self.snapshots = snapshots
        self.quota_bytes = quota_bytes
        self._used: OrderedDict[str, int] = OrderedDict()
        self._lock = threading.Lock()

    def used(self, episode_id: str) -> int:
        with self._lock:
            return self._used.get(episode_id, 0)

    def admit(self, episode_id: str, before: str | None, step: StepResult) -> StepResult:
        """`step` as it is, counted; or, past the quota, `step` rolled back to `before` (not counted)."""
        if step.snapshot_id == before:
            return step
        previous = self.snapshots.load(SnapshotId.parse(before)) if before is not None else None
        added = added_bytes(previous, self.snapshots.load(SnapshotId.parse(step.snapshot_id)))
        with self._lock:
            used = self._used.get(episode_id, 0)
            if used + added > self.quota_bytes:
                result = step.result
                notice = over_quota_notice(added, used, self.quota_bytes)
                rolled = dataclasses.replace(result, stderr=result.stderr + notice)
                return StepResult(rolled, before if before is not None else self._empty())
            self._used[episode_id] = used + added
            self._used.move_to_end(episode_id)
            while len(self._used) > REMEMBERED_EPISODES:
                self._used.popitem(last=False)
        return step

    def _empty(self) -> str:
        # Before an episode's first snapshot its workspace is the image's empty one.
        return str(self.snapshots.save(Manifest.of([]), {}))

    def forget(self, episode_id: str) -> None:
        with self._lock:
            self._used.pop(episode_id, None)
