"""Forging a run: a tampered copy of a run's records, written to a new run's topics, with every episode's
hash chain re-linked over the tampered bytes, so that the plain audit finds nothing wrong. What only a
re-execution or a re-grading can catch is left for `audit --recheck` and `reproduce` to find."""

from __future__ import annotations

import dataclasses
import uuid
from collections.abc import Callable, Sequence
from typing import Any

from kafka import KafkaProducer

from ops.audit import AUDITED_TOPICS, LogRecord
from ops.runlog import EVENTS, TASKS, read_topics
from schemas.chain import digest
from schemas.codec import default_codec
from schemas.common import GENESIS_HASH
from schemas.topics import topic_name
from streams.kafka.topics import ensure_topics

Tamper = Callable[[Any], Any]


def read_all(bootstrap: str, run: str) -> list[LogRecord]:
    return list(read_topics(bootstrap, run, (*AUDITED_TOPICS, TASKS), timeout_s=60))


def relinked(records: Sequence[LogRecord], tamper: Tamper) -> list[LogRecord]:
    """`records` with `tamper` applied to every decoded episode event and trajectory, and each episode's
    chain (events, then the trajectory's link to its last event) recomputed over the new bytes."""
    codec = default_codec()
    heads: dict[str, str] = {}
    renamed: dict[str, str] = {}  # digest of an original event -> digest of its forged copy
    out: list[LogRecord] = []
    events = [r for r in records if r.topic == EVENTS]
    for record in sorted(events, key=lambda r: (r.partition, r.offset)):
        event = tamper(codec.decode(record.value or b""))
        episode = event.meta.episode_id
        meta = dataclasses.replace(event.meta, prev_hash=heads.get(episode, GENESIS_HASH))
        data = codec.encode(dataclasses.replace(event, meta=meta))
        renamed[digest(record.value or b"")] = heads[episode] = digest(data)
        out.append(dataclasses.replace(record, value=data))
    for record in records:
        if record.topic == EVENTS:
            continue
        if record.topic.startswith("trajectories."):
            trajectory = tamper(codec.decode(record.value or b""))
            link = renamed.get(trajectory.meta.prev_hash, trajectory.meta.prev_hash)
            meta = dataclasses.replace(trajectory.meta, prev_hash=link)
            record = dataclasses.replace(
                record, value=codec.encode(dataclasses.replace(trajectory, meta=meta))
            )
        out.append(record)
    return out


def write_run(bootstrap: str, records: Sequence[LogRecord]) -> str:
    """Write `records` to a new run's topics (same partitions, same order); returns its name."""
    run = f"forged{uuid.uuid4().hex[:8]}"
    ensure_topics(bootstrap, run)
    producer = KafkaProducer(bootstrap_servers=bootstrap, acks="all")
    try:
        for record in records:
            producer.send(
                topic_name(run, record.topic), value=record.value, key=record.key, partition=record.partition
            )
        producer.flush(timeout=60)
    finally:
        producer.close()
    return run


def forge(bootstrap: str, run: str, tamper: Tamper) -> str:
    return write_run(bootstrap, relinked(read_all(bootstrap, run), tamper))
