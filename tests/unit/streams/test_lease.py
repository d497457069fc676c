"""The ownership lease of a streams worker: held while a confirmed heartbeat is recent."""

from __future__ import annotations

from streams.lease import Lease


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_held_until_the_first_renewal_then_for_its_term_from_the_heartbeat_sent() -> None:
    clock = Clock()
    lease = Lease(5.0, clock)
    assert lease.held() and lease.age_s() is None  # a worker not yet asked about is its group's choice
    lease.renew(sent_at=100.0)
    clock.now = 104.9
    assert lease.held()
    clock.now = 105.0  # the coordinator may drop the member a session after it got that heartbeat
    assert not lease.held()
    lease.renew(sent_at=104.5)
    assert lease.held() and lease.age_s() == 0.5


def test_an_older_heartbeat_answered_late_does_not_move_the_lease_back() -> None:
    clock = Clock()
    lease = Lease(5.0, clock)
    lease.renew(sent_at=103.0)
    lease.renew(sent_at=101.0)
    clock.now = 107.5
    assert lease.held()
