"""Ownership as a lease: a streams worker writes for its partitions only while the group coordinator has
recently confirmed it as a member, so that a worker that stalls (a long pause, a freeze, a cut-off link)
and comes back never writes for episodes whose partitions moved to another worker meanwhile.

Kafka's group protocol alone does not fence such a worker: its partitions move once its session expires,
but the stalled process does not know that until its next heartbeat is answered, and it may first decide
and append events for the inputs it already holds: two owners of one episode (the chaos test saw it as
duplicate steps and a broken hash chain, after a streams worker was frozen past its session timeout).

The lease is renewed by each heartbeat the coordinator answers without error (not while the group is
rebalancing), from the moment that heartbeat was *sent*: the coordinator got it later, so it keeps the
member at least a session timeout past that moment. The worker may write while the lease is younger than
the session timeout less a margin (for a write already on its way); once it lapses, the worker stops, forgets
its partitions and recovers them from the log once a heartbeat has confirmed it again (`streams.worker`)."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field


class OwnershipLapsed(Exception):
    """The worker is not known to still own its partitions: nothing may be written for them."""


@dataclass
class Lease:
    """`held()` while the last confirmed heartbeat was sent less than `term_s` ago. Until the first
    renewal (a worker not yet in its group, or one without a coordinator to ask) it is held: the group's
    first assignment is itself the confirmation."""

    term_s: float
    clock: Callable[[], float] = time.monotonic
    _since: float | None = field(default=None, init=False)

    def renew(self, sent_at: float) -> None:
        if self._since is None or sent_at > self._since:
            self._since = sent_at

    def held(self) -> bool:
        return self._since is None or self.clock() - self._since < self.term_s

    def age_s(self) -> float | None:
        return None if self._since is None else self.clock() - self._since
