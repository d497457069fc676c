"""Inputs that nobody delivers again: the worker reads them from Kafka itself.

An input the batch loop gives back (`streams.batches`) stays unacknowledged, and the commit stops before
it (`streams.app.guard_acks`): it is meant to be read again, by this worker once a rebalance's recovery
has sought its partition back to the committed offset, or by the partition's next owner. The chaos test
found that this does not always happen (2026-12-07, a run of 200 episodes with a second test session
loading the machine): two `StartEpisode` commands given back while their partitions recovered were never
delivered again; the commits of both partitions stayed at them for good while the later inputs of the
partitions were handled, and their episodes never began.

So the worker watches each input partition it owns and has recovered: when its committed offset has not
moved for `GRACE_S` while records lie between it and the partition's end that were not handled (not
acknowledged), it reads up to `MOST_AT_ONCE` of them from Kafka (outside Faust), handles them as a batch
and acknowledges those it handled, so that the commit moves on. `GRACE_S` leaves time for an input merely
queued, or held by a stale membership, to go through the batch loop first; an input handled twice anyway
(Faust delivers it after all) is a duplicate the owner ignores (`streams.owner`).
"""

from __future__ import annotations

from collections.abc import Collection, Hashable
from dataclasses import dataclass, field
from itertools import islice

GRACE_S = 5.0  # a committed offset stuck this long, with unhandled records above it, is read again
MOST_AT_ONCE = 100  # records read again per partition and tick


def skipped(committed: int, end: int, acknowledged: Collection[int], most: int = MOST_AT_ONCE) -> list[int]:
    """The first `most` offsets from `committed` up to `end` (exclusive) that were not acknowledged."""
    return list(islice((o for o in range(committed, end) if o not in acknowledged), most))


@dataclass
class StuckCommits:
    """For each partition, since when its committed offset has stood where it is (a monotonic clock)."""

    grace_s: float = GRACE_S
    since: dict[Hashable, tuple[int, float]] = field(default_factory=dict)

    def due(self, partition: Hashable, committed: int, now: float) -> bool:
        """Whether the partition's commit has stood at `committed` for `grace_s`; once it says so, it waits
        another `grace_s` before it says so again (the records read again take time to be acknowledged)."""
        seen = self.since.get(partition)
        if seen is None or seen[0] != committed:
            self.since[partition] = (committed, now)
            return False
        if now - seen[1] < self.grace_s:
            return False
        self.since[partition] = (committed, now)
        return True

    def keep_only(self, partitions: Collection[Hashable]) -> None:
        """Forget the partitions not in `partitions` (moved away, or nothing left to read)."""
        self.since = {p: seen for p, seen in self.since.items() if p in partitions}
