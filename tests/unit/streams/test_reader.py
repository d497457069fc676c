"""The one "read a topic to its end" reader, on a fake consumer: each record once, up to the end offsets
taken when a read starts, from given offsets, and a read that catches up from where the last stopped."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import kafka
import pytest
from kafka.structs import TopicPartition

from streams.kafka import reader as reader_module
from streams.kafka.reader import LogReader, ReadError

TP = TopicPartition("r.tasks", 0)


@dataclass
class _Record:
    topic: str
    partition: int
    offset: int
    value: bytes | None = b"x"


class _Consumer:
    """One partition holding `log` offsets; each poll returns up to two records from the position, the
    first poll after `refetch_at` again from one offset back (a fetch repeated after a broker restart)."""

    def __init__(self, log: int, refetch_at: int | None = None) -> None:
        self.log, self.refetch_at = log, refetch_at
        self.at = 0

    def partitions_for_topic(self, topic: str) -> set[int]:
        return {0}

    def assign(self, partitions: list[Any]) -> None:
        pass

    def beginning_offsets(self, partitions: list[Any]) -> dict[Any, int]:
        return {TP: 0}

    def end_offsets(self, partitions: list[Any]) -> dict[Any, int]:
        return {TP: self.log}

    def seek(self, tp: Any, offset: int) -> None:
        self.at = offset

    def position(self, tp: Any) -> int:
        return self.at

    def pause(self, *partitions: Any) -> None:
        pass

    def resume(self, *partitions: Any) -> None:
        pass

    def poll(self, timeout_ms: int, max_records: int) -> dict[Any, list[_Record]]:
        if self.refetch_at is not None and self.at >= self.refetch_at:
            self.at, self.refetch_at = self.at - 1, None
        batch = [_Record(TP.topic, 0, offset) for offset in range(self.at, min(self.at + 2, self.log))]
        self.at += len(batch)
        return {TP: batch} if batch else {}

    def close(self) -> None:
        pass


def _reader(monkeypatch: pytest.MonkeyPatch, consumer: _Consumer, **kwargs: Any) -> LogReader:
    monkeypatch.setattr(kafka, "KafkaConsumer", lambda **_: consumer)
    return LogReader("127.0.0.1:1", [TP.topic], **kwargs)


def test_each_record_once_up_to_the_end_at_the_start(monkeypatch: pytest.MonkeyPatch) -> None:
    consumer = _Consumer(log=5, refetch_at=2)
    reader = _reader(monkeypatch, consumer)
    assert [r.offset for r in reader.to_end()] == [0, 1, 2, 3, 4]  # offset 1 fetched twice, yielded once
    consumer.log = 7  # appended since: the next read catches up from where this one stopped
    assert [r.offset for r in reader.to_end()] == [5, 6]
    assert list(reader.to_end()) == []


def test_a_read_from_given_offsets(monkeypatch: pytest.MonkeyPatch) -> None:
    reader = _reader(monkeypatch, _Consumer(log=5), start={(TP.topic, 0): 3})
    assert [r.offset for r in reader.to_end()] == [3, 4]


def test_silence_while_records_are_due_is_an_error(monkeypatch: pytest.MonkeyPatch) -> None:
    consumer = _Consumer(log=5)
    reader = _reader(monkeypatch, consumer)
    consumer.poll = lambda timeout_ms, max_records: {}  # type: ignore[method-assign]
    monkeypatch.setattr(reader_module, "POLL_MS", 1)
    with pytest.raises(ReadError, match=r"no records for 0 s while reading r\.tasks"):
        list(reader.to_end(timeout_s=0.0))


def test_a_record_appended_during_a_read_and_fetched_with_it_is_read_by_the_next(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    consumer = _Consumer(log=5)
    reader = _reader(monkeypatch, consumer)
    consumer.end_offsets = lambda partitions: {TP: 3}  # type: ignore[method-assign]
    # The end when the read starts is 3; the fetch of 2 also brings 3, appended meanwhile.
    assert [r.offset for r in reader.to_end()] == [0, 1, 2]
    consumer.end_offsets = lambda partitions: {TP: 5}  # type: ignore[method-assign]
    assert [r.offset for r in reader.to_end()] == [3, 4]
