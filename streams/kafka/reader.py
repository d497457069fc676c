"""Reading a run's topics back (kafka-python): every partition from the beginning to its current end."""

from __future__ import annotations

import logging
from collections.abc import Iterator, Sequence
from typing import Any

from schemas.codec import DecodeError, default_codec

log = logging.getLogger(__name__)


def assign_all(consumer: Any, topics: Sequence[str]) -> list[Any]:
    """Assign every partition of `topics` to `consumer` (no group subscription), at the beginning."""
    from kafka import TopicPartition

    partitions = [
        TopicPartition(topic, partition)
        for topic in topics
        for partition in sorted(consumer.partitions_for_topic(topic) or {0})
    ]
    consumer.assign(partitions)
    consumer.seek_to_beginning(*partitions)
    return partitions


def decoded(records: Sequence[Any]) -> Iterator[tuple[str, object]]:
    """(topic, record) for each decodable value; others are logged and skipped (reading, not owning)."""
    for record in records:
        if record.value is None:
            continue
        try:
            yield record.topic, default_codec().decode(record.value)
        except DecodeError as exc:
            log.warning("%s[%d]@%d undecodable: %s", record.topic, record.partition, record.offset, exc)


def read_to_end(bootstrap: str, topics: Sequence[str]) -> Iterator[tuple[str, object]]:
    """(topic, decoded record) of everything on `topics` now, in partition order."""
    from kafka import KafkaConsumer

    consumer = KafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False)
    try:
        yield from drain(consumer, assign_all(consumer, topics))
    finally:
        consumer.close()


def drain(consumer: Any, partitions: Sequence[Any]) -> Iterator[tuple[str, object]]:
    """Poll `consumer` until each of `partitions` reached the end it had when this was called."""
    ends = consumer.end_offsets(list(partitions))
    while any(consumer.position(tp) < ends[tp] for tp in partitions):
        for records in consumer.poll(timeout_ms=500).values():
            yield from decoded(records)
