"""Reading answers back from a run's topics, for the actor integration tests."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from kafka import KafkaConsumer

from schemas.codec import default_codec
from schemas.topics import topic_name
from streams.kafka.serving import METADATA_MAX_AGE_MS
from streams.kafka.topics import ensure_topics

CODEC = default_codec()


def new_run(bootstrap: str, prefix: str) -> str:
    run = f"{prefix}{uuid.uuid4().hex[:6]}"
    ensure_topics(bootstrap, run)
    return run


@contextmanager
def reading(bootstrap: str, run: str, *bases: str) -> Iterator[KafkaConsumer]:
    consumer = KafkaConsumer(
        *(topic_name(run, base) for base in bases),
        bootstrap_servers=bootstrap,
        auto_offset_reset="earliest",
        enable_auto_commit=False,
        metadata_max_age_ms=METADATA_MAX_AGE_MS,  # a topic missed at subscription is picked up soon
    )
    try:
        yield consumer
    finally:
        consumer.close()


def next_records(consumer: KafkaConsumer, count: int, timeout_s: float = 60.0) -> list[Any]:
    """The next `count` records (raw kafka-python records), or an AssertionError at the timeout."""
    found: list[Any] = []
    give_up = time.monotonic() + timeout_s
    while len(found) < count and time.monotonic() < give_up:
        for records in consumer.poll(timeout_ms=200).values():
            found.extend(records)
    assert len(found) >= count, f"{len(found)} of {count} records within {timeout_s} s"
    return found
