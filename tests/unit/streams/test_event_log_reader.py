"""`EventLogReader`'s loop on a stand-in for kafka-python's consumer: records up to the end offset as it was
when the read began, and a read that stops getting records (the broker gone mid-read) fails instead of
polling for ever under the worker's lock."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import pytest
from kafka import TopicPartition

from streams import adapters
from streams.kafka import clients


@dataclass
class Record:
    offset: int
    key: bytes | None
    value: bytes | None


@dataclass
class StandInConsumer:
    """Serves `log` from the position, `per_poll` records a poll, and nothing once `dead_from` is reached."""

    log: list[bytes]
    per_poll: int = 2
    dead_from: int | None = None
    at: int = 0
    closed: bool = False
    polls: list[int] = field(default_factory=list)

    def assign(self, partitions: list[TopicPartition]) -> None:
        self.tp = partitions[0]

    def end_offsets(self, partitions: list[TopicPartition]) -> dict[TopicPartition, int]:
        return {partitions[0]: len(self.log)}

    def beginning_offsets(self, partitions: list[TopicPartition]) -> dict[TopicPartition, int]:
        return {partitions[0]: 0}

    def seek(self, _tp: TopicPartition, offset: int) -> None:
        self.at = offset

    def position(self, _tp: TopicPartition) -> int:
        return self.at

    def poll(self, timeout_ms: int) -> dict[TopicPartition, list[Record]]:
        self.polls.append(self.at)
        if self.dead_from is not None and self.at >= self.dead_from:
            return {}
        end = min(self.at + self.per_poll, len(self.log))
        batch = [Record(offset, b"k", self.log[offset]) for offset in range(self.at, end)]
        self.at += len(batch)
        return {self.tp: batch} if batch else {}

    def close(self) -> None:
        self.closed = True


def _reading(monkeypatch: pytest.MonkeyPatch, consumer: StandInConsumer) -> None:
    def make(_bootstrap: str, *_topics: str, **_settings: Any) -> StandInConsumer:
        return consumer

    monkeypatch.setattr(clients, "consumer", make)


def test_the_partition_is_read_from_the_offset_to_its_end(monkeypatch: pytest.MonkeyPatch) -> None:
    consumer = StandInConsumer([b"a", b"b", b"c", b"d", b"e"])
    _reading(monkeypatch, consumer)
    got = list(adapters.EventLogReader("127.0.0.1:1", "episode.events")(0, 1))
    assert got == [(1, b"k", b"b"), (2, b"k", b"c"), (3, b"k", b"d"), (4, b"k", b"e")]
    assert consumer.closed


def test_a_read_that_gets_nothing_for_the_stall_time_fails_and_closes_its_consumer(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    consumer = StandInConsumer([b"a", b"b", b"c", b"d", b"e"], dead_from=2)
    _reading(monkeypatch, consumer)
    clock = iter(float(second) for second in range(1000))
    monkeypatch.setattr(adapters.time, "monotonic", lambda: next(clock))
    reader = adapters.EventLogReader("127.0.0.1:1", "episode.events", stall_s=5)
    got = []
    with pytest.raises(TimeoutError, match=r"episode.events\[0\]: no record for 5 s at offset 2 of 5"):
        for item in reader(0, 0):
            got.append(item)
    assert [offset for offset, _, _ in got] == [0, 1]
    assert consumer.closed and 4 <= len(consumer.polls) <= 8  # gave up after about 5 s of empty polls
