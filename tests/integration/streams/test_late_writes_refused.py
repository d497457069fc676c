"""The broker's half of the time fence (`streams.fencing`): a run's `episode.events` refuses a record whose
create time is older than `LATE_WRITE_MAX_MS` (what a streams worker frozen between its membership check
and its sends would write), and takes one stamped just now. The table's changelog gets the same setting
from the streams app (`test_frozen_owner` runs one)."""

from __future__ import annotations

import time
import uuid

import pytest
from kafka.errors import InvalidTimestampError

from schemas.topics import EPISODE_EVENTS, LATE_WRITE_MAX_MS
from streams.kafka import clients
from streams.kafka.topics import ensure_topics


def test_episode_events_refuses_a_late_record_and_takes_a_fresh_one(kafka_bootstrap: str) -> None:
    run = f"itlate{uuid.uuid4().hex[:8]}"
    ensure_topics(kafka_bootstrap, run)
    producer = clients.producer(kafka_bootstrap, linger_ms=0)
    try:
        now_ms = int(time.time() * 1000)
        fresh = producer.send(EPISODE_EVENTS.of(run), key=b"e", value=b"fresh", timestamp_ms=now_ms)
        assert fresh.get(timeout=30).offset == 0
        late = producer.send(
            EPISODE_EVENTS.of(run), key=b"e", value=b"late", timestamp_ms=now_ms - LATE_WRITE_MAX_MS - 3000
        )
        with pytest.raises(InvalidTimestampError):
            late.get(timeout=30)
    finally:
        producer.close()
