from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pytest
from kafka.errors import KafkaConnectionError
from kafka.structs import TopicPartition

from streams.kafka import serving as kafka_serving
from streams.kafka.serving import poll, serve_in_order

TP = TopicPartition("sandbox.requests", 0)


@dataclass
class Record:
    offset: int


@dataclass
class FlakyConsumer:
    """Commits fail `failures` times (a broker restarting), then succeed."""

    failures: int = 0
    committed: list[int] = field(default_factory=list)
    seeks: list[int] = field(default_factory=list)

    def commit(self, offsets: dict[Any, Any]) -> None:
        if self.failures:
            self.failures -= 1
            raise KafkaConnectionError("111 ECONNREFUSED")
        self.committed.append(offsets[TP].offset)

    def seek(self, partition: Any, offset: int) -> None:
        self.seeks.append(offset)

    def poll(self, timeout_ms: int) -> dict[Any, list[Record]]:
        raise KafkaConnectionError("broker down")


def test_records_are_served_then_committed_in_order() -> None:
    consumer, served = FlakyConsumer(), []
    serve_in_order(
        consumer, {TP: [Record(5), Record(6)]}, lambda r: served.append(r.offset), threading.Event()
    )
    assert served == [5, 6] and consumer.committed == [6, 7] and consumer.seeks == []


def test_a_failed_commit_rewinds_to_the_record_instead_of_crashing(monkeypatch: Any) -> None:
    monkeypatch.setattr(kafka_serving, "RETRY_S", 0.0)
    consumer, served = FlakyConsumer(failures=1), []
    serve_in_order(
        consumer, {TP: [Record(5), Record(6)]}, lambda r: served.append(r.offset), threading.Event()
    )
    # 5 was answered but its commit failed: rewind to 5, leave 6 for the next poll (after the rewind).
    assert served == [5] and consumer.seeks == [5] and consumer.committed == []
    serve_in_order(
        consumer, {TP: [Record(5), Record(6)]}, lambda r: served.append(r.offset), threading.Event()
    )
    assert served == [5, 5, 6] and consumer.committed == [6, 7]


def test_a_poll_while_kafka_is_down_returns_nothing(monkeypatch: Any) -> None:
    monkeypatch.setattr(kafka_serving, "RETRY_S", 0.0)
    assert poll(FlakyConsumer(), 100, threading.Event()) == {}


@dataclass
class ArrivingConsumer:
    """Hands out scripted polls, one per call, and records what each call asked for; the clock moves by each
    poll's timeout when it returns nothing (the broker held the fetch that long)."""

    polls: list[dict[Any, list[Record]]]
    now: float = 0.0
    asked: list[tuple[int, int | None]] = field(default_factory=list)

    def poll(self, timeout_ms: int, max_records: int | None = None) -> dict[Any, list[Record]]:
        self.asked.append((timeout_ms, max_records))
        got = self.polls.pop(0) if self.polls else {}
        if not got:
            self.now += timeout_ms / 1000
        return got


TP1 = TopicPartition("sandbox.requests", 1)


def test_a_lingering_batch_waits_for_more_requests_until_it_is_full() -> None:
    consumer = ArrivingConsumer([{}, {TP: [Record(7)], TP1: [Record(3)]}, {TP: [Record(8)]}])
    settings = kafka_serving.LoopSettings("127.0.0.1:1", "g", max_batch=4, batch_linger_ms=2000)
    got = kafka_serving.lingered(
        consumer, {TP: [Record(6)]}, settings, threading.Event(), monotonic=lambda: consumer.now
    )
    assert got == {TP: [Record(6), Record(7), Record(8)], TP1: [Record(3)]}  # each partition in offset order
    # Each poll asks only for the room left, and the linger stops as soon as the batch is full.
    assert [limit for _, limit in consumer.asked] == [3, 3, 1]
    assert consumer.polls == []


def test_a_lingering_batch_is_answered_when_the_linger_runs_out() -> None:
    consumer = ArrivingConsumer([{}, {TP: [Record(7)]}])
    settings = kafka_serving.LoopSettings("127.0.0.1:1", "g", max_batch=8, batch_linger_ms=1200)
    got = kafka_serving.lingered(
        consumer, {TP: [Record(6)]}, settings, threading.Event(), monotonic=lambda: consumer.now
    )
    assert got == {TP: [Record(6), Record(7)]}
    assert consumer.now == pytest.approx(1.2)  # never past the linger: the last poll waits only what is left
    assert [timeout for timeout, _ in consumer.asked] == [500, 500, 500, 200]


def test_a_full_poll_or_a_stopping_worker_does_not_linger() -> None:
    settings = kafka_serving.LoopSettings("127.0.0.1:1", "g", max_batch=2, batch_linger_ms=5000)
    full = ArrivingConsumer([])
    polled = {TP: [Record(1), Record(2)]}
    assert kafka_serving.lingered(full, polled, settings, threading.Event()) == polled and full.asked == []
    stopping = threading.Event()
    stopping.set()
    stopped = ArrivingConsumer([])
    assert kafka_serving.lingered(stopped, {TP: [Record(1)]}, settings, stopping) == {TP: [Record(1)]}
    assert stopped.asked == []


def test_connected_waits_for_kafka_saying_so_until_stopped(
    monkeypatch: Any, closed_port: Callable[[], int]
) -> None:
    monkeypatch.setattr(kafka_serving, "CONNECT_TRY_MS", 200)
    monkeypatch.setattr(kafka_serving, "CONNECT_FIRST_WAIT_S", 0.1)
    stopping, said = threading.Event(), []

    def say(line: str) -> None:
        said.append(line)
        if len(said) == 3:
            stopping.set()

    nobody = f"127.0.0.1:{closed_port()}"
    assert kafka_serving.connected(nobody, stopping, say) is False
    assert len(said) == 3 and all(line.startswith(f"waiting for Kafka at {nobody}") for line in said)
    assert [line.rsplit("again in ", 1)[1] for line in said] == ["0.1 s", "0.2 s", "0.4 s"]  # backoff


def test_serving_stops_before_connecting_when_asked_to() -> None:
    stopping = threading.Event()
    stopping.set()
    served: list[Any] = []
    settings = kafka_serving.LoopSettings("127.0.0.1:1", "group")
    kafka_serving.serve_requests(settings, "topic", lambda record, producer: served.append(record), stopping)
    assert served == []


class _Captured(Exception):
    pass


def test_a_serving_consumer_asks_the_broker_for_a_short_fetch_wait(monkeypatch: pytest.MonkeyPatch) -> None:
    """kafka-python's 500 ms default would hold a request arriving on a partition left out of the fetch."""
    import kafka

    seen: dict[str, Any] = {}

    def consumer(*topics: str, **kwargs: Any) -> None:
        seen.update(kwargs, topics=topics)
        raise _Captured

    monkeypatch.setattr(kafka_serving, "connected", lambda *args, **kwargs: True)
    monkeypatch.setattr(kafka, "KafkaConsumer", consumer)
    settings = kafka_serving.LoopSettings("127.0.0.1:1", "group", max_batch=4)
    with pytest.raises(_Captured):
        kafka_serving.serve_requests(
            settings, "topic", lambda record, producer: None, threading.Event(), prepare=lambda records: None
        )
    assert seen["topics"] == () and seen["max_poll_records"] == 4  # subscribed once the topic is known
    assert seen["fetch_max_wait_ms"] == settings.fetch_max_wait_ms <= 100
    with pytest.raises(_Captured):  # a loop that answers one by one takes one request per poll
        kafka_serving.serve_requests(settings, "topic", lambda record, producer: None, threading.Event())
    assert seen["max_poll_records"] == 1


class _Consumer:
    """Knows a topic's partitions only after `unknown_for` asks (the metadata has not reached it yet)."""

    def __init__(self, unknown_for: int) -> None:
        self.unknown_for = unknown_for
        self.asked = 0
        self.subscribed: list[list[str]] = []

    def partitions_for_topic(self, topic: str) -> set[int]:
        self.asked += 1
        return set() if self.asked <= self.unknown_for else {0, 1}

    def subscribe(self, topics: list[str]) -> None:
        assert self.asked > self.unknown_for, "subscribed before the partitions were known"
        self.subscribed.append(topics)


def test_a_serving_consumer_joins_its_group_only_once_the_topic_has_partitions(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(kafka_serving, "RETRY_S", 0.01)
    said: list[str] = []
    consumer = _Consumer(unknown_for=2)
    assert kafka_serving.subscribe_when_known(consumer, "run.verify.requests", threading.Event(), said.append)
    assert consumer.subscribed == [["run.verify.requests"]] and consumer.asked == 3
    assert said == ["waiting for the partitions of run.verify.requests"] * 2
    stopping = threading.Event()
    stopping.set()
    assert not kafka_serving.subscribe_when_known(_Consumer(unknown_for=9), "t", stopping, said.append)


# -- a record the loop cannot serve never ends the loop (issue 14: no crash loop on one record) ----------


def test_a_record_serve_fails_on_is_skipped_and_the_next_served() -> None:
    consumer, served = FlakyConsumer(), []

    def serve(record: Record) -> None:
        if record.offset == 5:
            raise RuntimeError("a bug in dead-lettering")
        served.append(record.offset)

    serve_in_order(consumer, {TP: [Record(5), Record(6)]}, serve, threading.Event())
    # 5 would fail again on every redelivery: committed past (and logged), not served in a loop.
    assert served == [6] and consumer.committed == [6, 7] and consumer.seeks == []


def test_a_kafka_error_while_serving_still_rewinds(monkeypatch: Any) -> None:
    monkeypatch.setattr(kafka_serving, "RETRY_S", 0.0)
    consumer = FlakyConsumer()

    def serve(record: Record) -> None:
        raise KafkaConnectionError("broker gone mid-answer")

    serve_in_order(consumer, {TP: [Record(5), Record(6)]}, serve, threading.Event())
    assert consumer.seeks == [5] and consumer.committed == []


@dataclass
class _Letter:
    topic: str = "sandbox.requests"
    partition: int = 0
    offset: int = 9
    key: bytes | None = b"ep-1"
    value: bytes | None = b""
    headers: tuple[tuple[str, bytes], ...] = ()


class _Sent:
    def __init__(self) -> None:
        self.values: list[bytes] = []

    def send(self, topic: str, value: bytes) -> _Sent:
        self.values.append(value)
        return self

    def get(self, timeout: float) -> None:
        pass


def test_a_dead_letter_of_a_huge_record_keeps_a_bounded_part_of_it() -> None:
    from schemas.codec import default_codec
    from schemas.common import Producer
    from schemas.deadletter import DeadLetter
    from schemas.origin import FixedClock, Origin, SequentialIds

    codec = default_codec()
    origin = Origin(Producer("sandbox", "w1"), FixedClock(), SequentialIds("w1"))
    producer = _Sent()
    huge = b"x" * (kafka_serving.VALUE_LIMIT + 4096)
    kafka_serving.dead_letter(producer, "deadletter", _Letter(value=huge), origin, codec, "too_big", "why")
    letter = codec.decode_as(producer.values[0], DeadLetter)
    assert letter.value == huge[: kafka_serving.VALUE_LIMIT]
    assert f"cut from {len(huge)} to {kafka_serving.VALUE_LIMIT} bytes" in letter.detail
    assert len(producer.values[0]) < kafka_serving.VALUE_LIMIT + 4096


def test_records_polled_outside_a_settled_generation_are_put_back() -> None:
    """A consumer outside a settled generation cannot commit: what it serves would be served again."""
    from types import SimpleNamespace

    from streams.kafka.serving import group_stable, rewind

    def consumer(generation: object, auto: bool = True) -> Any:
        coordinator = SimpleNamespace(generation_if_stable=lambda: generation)
        subscription = SimpleNamespace(partitions_auto_assigned=lambda: auto)
        seeks: list[tuple[str, int]] = []
        return SimpleNamespace(
            _coordinator=coordinator, _subscription=subscription, seeks=seeks,
            seek=lambda tp, offset: seeks.append((tp, offset)),
        )  # fmt: skip

    assert group_stable(consumer(("gen", 3)))
    assert not group_stable(consumer(None))
    assert group_stable(consumer(None, auto=False))  # assigned by hand: no group to be outside of
    assert group_stable(SimpleNamespace())  # a consumer kafka-python does not describe so
    settled = consumer(None)
    rewind(settled, {"p0": [SimpleNamespace(offset=7), SimpleNamespace(offset=8)], "p1": []})
    assert settled.seeks == [("p0", 7)]
