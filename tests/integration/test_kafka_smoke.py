"""Kafka in a locally built container: records go in and come back out, and topics are never auto-created."""

from __future__ import annotations

import time
import uuid

import pytest
from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer
from kafka.admin import NewTopic
from kafka.errors import KafkaTimeoutError


def test_produce_then_consume_round_trips_a_record(kafka_bootstrap: str) -> None:
    topic = f"smoke-{uuid.uuid4().hex[:8]}"
    admin = KafkaAdminClient(bootstrap_servers=kafka_bootstrap)
    admin.create_topics([NewTopic(topic, 2, 1)])
    admin.close()

    producer = KafkaProducer(bootstrap_servers=kafka_bootstrap)
    sent = producer.send(topic, key=b"episode-1", value=b"hello", headers=[("traceparent", b"00-x")])
    metadata = sent.get(timeout=30)
    producer.close()

    consumer = KafkaConsumer(
        topic, bootstrap_servers=kafka_bootstrap, auto_offset_reset="earliest", enable_auto_commit=False
    )
    records = []
    deadline = time.monotonic() + 30
    while not records and time.monotonic() < deadline:
        for batch in consumer.poll(timeout_ms=500).values():
            records.extend(batch)
    consumer.close()

    assert [(r.key, r.value, r.partition, r.offset) for r in records] == [
        (b"episode-1", b"hello", metadata.partition, metadata.offset)
    ]
    assert records[0].headers == [("traceparent", b"00-x")]


def test_topics_are_not_auto_created(kafka_bootstrap: str) -> None:
    topic = f"never-created-{uuid.uuid4().hex[:8]}"
    producer = KafkaProducer(bootstrap_servers=kafka_bootstrap, max_block_ms=3_000)
    with pytest.raises(KafkaTimeoutError):
        producer.send(topic, b"x").get(timeout=10)
    producer.close()
    admin = KafkaAdminClient(bootstrap_servers=kafka_bootstrap)
    assert topic not in admin.list_topics()
    admin.close()
