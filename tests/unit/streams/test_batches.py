"""What becomes of the inputs a batch leaves unhandled (`streams.batches`): held while the worker is stale
and the partition still assigned here (nobody else reads them again), given back when a rebalance or a
moved partition makes Kafka read them again."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass, field

from streams.batches import BatchHandler
from streams.ports import Input


@dataclass(frozen=True)
class Message:
    topic: str
    partition: int
    offset: int


@dataclass
class Event:
    message: Message
    acked: bool = False

    def ack(self) -> bool:
        self.acked = True
        return True


@dataclass
class FakeWorker:
    """Handles an input when its partition is recovered and the membership is fresh; recovers every
    assigned partition when fresh (as `EpisodeWorker.sync_assignment` does)."""

    fresh: bool = True
    ready: set[int] = field(default_factory=set)
    handled: list[int] = field(default_factory=list)  # offsets, in the order handled

    def may_write(self) -> bool:
        return self.fresh

    async def sync_assignment(self, assigned: set[int]) -> None:
        self.ready &= assigned
        if self.fresh:
            self.ready |= assigned

    async def handle_batch(self, inputs: Sequence[Input]) -> list[bool]:
        if not self.fresh:
            self.ready = set()  # stale: gives everything back (`EpisodeWorker._give_back_all`)
            return [False] * len(inputs)
        done = [record.partition in self.ready for record in inputs]
        self.handled += [record.offset for record, ok in zip(inputs, done, strict=True) if ok]
        return done


@dataclass
class Group:
    """The consumer group as the handler sees it, changed by a script run at each of its sleeps."""

    assigned: set[int]
    settled: bool = True
    sleeps: int = 0
    given_back: list[int] = field(default_factory=list)  # offsets, released to Kafka unacknowledged


def _handler(worker: FakeWorker, group: Group, at_sleep: dict[int, object]) -> BatchHandler:
    async def sleep(_seconds: float) -> None:
        group.sleeps += 1
        change = at_sleep.get(group.sleeps)
        if callable(change):
            change()

    return BatchHandler(
        worker,
        settled=lambda: group.settled,
        assigned=lambda: set(group.assigned),
        to_input=lambda m: Input("policy.results", m.partition, m.offset, b"k", b"v", ()),
        give_back=lambda event: group.given_back.append(event.message.offset),
        sleep=sleep,
    )


def _events(*spec: tuple[int, int]) -> list[Event]:
    return [Event(Message("run.policy.results", partition, offset)) for partition, offset in spec]


def test_a_stale_worker_holds_its_batch_until_the_membership_is_confirmed_then_handles_it_in_order() -> None:
    worker, group = FakeWorker(fresh=False), Group({0, 1})

    def confirmed() -> None:
        worker.fresh = True

    handler = _handler(worker, group, {5: confirmed})
    events = _events((0, 10), (1, 4), (0, 11))
    asyncio.run(handler.handle(events))
    assert worker.handled == [10, 4, 11] and all(event.acked for event in events)
    assert handler.held_batches == 1 and group.sleeps >= 5 and group.given_back == []


def test_nothing_is_acknowledged_while_the_batch_is_held() -> None:
    worker, group = FakeWorker(fresh=False), Group({0})
    events = _events((0, 1), (0, 2))
    seen_acked: list[bool] = []

    def look() -> None:
        seen_acked.append(any(event.acked for event in events))

    def confirmed() -> None:
        look()
        worker.fresh = True

    handler = _handler(worker, group, {1: look, 2: look, 3: confirmed})
    asyncio.run(handler.handle(events))
    assert seen_acked == [False, False, False] and all(event.acked for event in events)


def test_inputs_left_unhandled_in_a_rebalance_are_given_back_without_waiting() -> None:
    worker, group = FakeWorker(fresh=False), Group({0}, settled=False)
    handler = _handler(worker, group, {})
    events = _events((0, 1))
    asyncio.run(handler.handle(events))
    assert not events[0].acked and worker.handled == [] and group.sleeps == 0 and handler.held_batches == 0
    assert group.given_back == [1]


def test_a_hold_ends_when_a_rebalance_begins_and_gives_the_inputs_back() -> None:
    worker, group = FakeWorker(fresh=False), Group({0})

    def rebalancing() -> None:
        group.settled = False

    handler = _handler(worker, group, {3: rebalancing})
    events = _events((0, 1), (0, 2))
    asyncio.run(handler.handle(events))
    assert not any(event.acked for event in events) and worker.handled == [] and handler.held_batches == 1
    assert group.given_back == [1, 2]  # held until the rebalance began, then given back


def test_inputs_of_a_partition_that_moved_are_given_back_and_the_others_held() -> None:
    worker, group = FakeWorker(fresh=True), Group({0})
    worker.ready = {0}
    events = _events((0, 1), (3, 7), (0, 2))  # partition 3 moved away in a rebalance since it was fetched
    handler = _handler(worker, group, {})
    asyncio.run(handler.handle(events))
    assert [event.acked for event in events] == [True, False, True] and worker.handled == [1, 2]
    assert handler.held_batches == 0 and group.sleeps == 0 and group.given_back == [7]


def test_a_partition_recovered_only_after_a_hold_is_handled_then() -> None:
    # Fresh at the batch but stale at recovery: the worker recovers nothing, the batch waits, then both go.
    worker, group = FakeWorker(fresh=True), Group({2})

    async def stale_recovery(assigned: set[int]) -> None:
        worker.fresh = False

    original = worker.sync_assignment
    worker.sync_assignment = stale_recovery  # type: ignore[method-assign]

    def confirmed() -> None:
        worker.fresh = True
        worker.sync_assignment = original  # type: ignore[method-assign]

    handler = _handler(worker, group, {2: confirmed})
    events = _events((2, 5))
    asyncio.run(handler.handle(events))
    assert events[0].acked and worker.handled == [5] and handler.held_batches == 1
