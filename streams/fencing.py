"""Fencing a stalled owner by time: what a streams worker that lost its partitions without noticing (a
zombie) can still write lands before its successor reads the log, or is refused by the broker.

The danger (docs/crash-consistency.md, "A stalled owner"): a worker stalled past its session timeout (a long
pause, a freeze, a link cut off) has its partitions given to another worker; when it runs again it handles
the inputs it already holds before its next heartbeat tells it that it is out, and appends to episodes the
new owner is already appending to: duplicate steps and forked chains.

The bound, in three parts:

1. The group coordinator expires a member no sooner than `SESSION_TIMEOUT_S` after the last heartbeat it
   *received*, and the new owner reads a partition's log only after that (the rebalance, then recovery).
2. `Membership` keeps the time the last request that the coordinator answered OK was *sent* (a heartbeat,
   or the SyncGroup of a new generation; a heartbeat answered "rebalancing" does not count): that request
   reached the coordinator after it was sent, so the member's session lasts at least until then plus the
   session timeout. Before a batch sends anything, the worker asks `stamp()`: the wall-clock time now if
   that confirmation was sent at most `FRESH_S` ago, else None (stale: the batch is given back unsent).
3. Every record of the batch carries that stamp as its create time, and `episode.events` and the table's
   changelog refuse records more than `schemas.topics.LATE_WRITE_MAX_MS` older than the broker's clock
   (`message.timestamp.before.max.ms`, KIP-937). A worker frozen between its check and its sends has its
   records refused when it runs again, and the refused batch is decided again only after a fresh check.

So every record a worker writes lands at most FRESH_S + LATE_WRITE_MAX_S + clock skew after a confirmation
of its membership was sent, which `CLOCK_SKEW_S` and the numbers below keep under the session timeout: it
lands before any successor reads the log. The bound needs the clocks of the workers' hosts and the brokers
within `CLOCK_SKEW_S` of each other (NTP keeps them within milliseconds).

The cost: a worker whose coordinator does not answer for FRESH_S (a broker failing over) holds its writes
until it does, and a batch refused as late is decided again.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from schemas.topics import LATE_WRITE_MAX_MS

SESSION_TIMEOUT_S = 6.0  # the streams worker's consumer-group session (streams.app)
HEARTBEAT_S = 2.0  # its heartbeat interval
# How old the last confirmation may be: one heartbeat interval plus a second for its round trip.
FRESH_S = 3.0
LATE_WRITE_MAX_S = LATE_WRITE_MAX_MS / 1000
CLOCK_SKEW_S = 0.5  # what the bound allows between the clocks of a worker's host and a broker's
assert FRESH_S + LATE_WRITE_MAX_S + CLOCK_SKEW_S < SESSION_TIMEOUT_S, "a zombie's writes could land late"
assert FRESH_S > HEARTBEAT_S, "a healthy member would go stale between two heartbeats"


class Stale(Exception):
    """This worker's membership was not confirmed recently enough to write (see the module doc)."""


class Membership:
    """When the coordinator last confirmed this member (the send time of the newest request it answered
    OK), on a monotonic clock; `stamp()` says whether that allows a write now. Written by the consumer's
    thread, read by the worker's."""

    def __init__(
        self,
        fresh_s: float = FRESH_S,
        monotonic: Callable[[], float] = time.monotonic,
        wall: Callable[[], float] = time.time,
    ) -> None:
        self.fresh_s = fresh_s
        self.monotonic = monotonic
        self.wall = wall
        self._confirmed: float | None = None
        self._lock = threading.Lock()

    def confirmed(self, sent_at: float) -> None:
        """The coordinator answered OK a request sent at `sent_at` (on `monotonic`'s clock)."""
        with self._lock:
            if self._confirmed is None or sent_at > self._confirmed:
                self._confirmed = sent_at

    def age(self) -> float | None:
        """Seconds since the newest confirmed request was sent; None before the first."""
        with self._lock:
            confirmed = self._confirmed
        return None if confirmed is None else self.monotonic() - confirmed

    def stamp(self) -> float | None:
        """The create time (wall clock, seconds) for the records of a batch about to be sent, or None when
        the membership is stale and nothing may be sent."""
        age = self.age()
        if age is None or age > self.fresh_s:
            return None
        return self.wall()
