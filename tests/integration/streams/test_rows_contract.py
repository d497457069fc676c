"""`FaustRows` meets the `episodes` table contract (`tests/rows_contract.py`) on real Kafka and RocksDB: the
app's own table (RocksDB under a fresh data folder), its changelog topic on the test broker, the app's
producer; the changelog read back with kafka-python. The changelog topic is created beforehand with a small
`max.message.bytes`, so that the broker itself refuses an oversized row (MESSAGE_TOO_LARGE)."""

from __future__ import annotations

import asyncio
import os
import uuid
from pathlib import Path
from typing import Any

import pytest
from kafka import KafkaAdminClient, KafkaConsumer, TopicPartition
from kafka.admin import NewTopic

from streams.adapters import FaustRows
from streams.app import PARTITIONS, Settings, build_app
from streams.worker import COMMANDS
from tests.rows_contract import CONTRACT, Check, check_name

MAX_MESSAGE_BYTES = 16 * 1024  # the changelog's limit: the refused row is over it, under the client's 1 MB


class FaustRowsUnderTest:
    def __init__(self, bootstrap: str, data_dir: Path) -> None:
        self.app, _worker = build_app(Settings(bootstrap, f"rows-{uuid.uuid4().hex[:8]}", str(data_dir), "t"))
        self.table: Any = self.app.tables["episodes"]
        self.topic = self.table.changelog_topic.get_topic_name()
        admin = KafkaAdminClient(bootstrap_servers=bootstrap)
        try:
            config = {"cleanup.policy": "compact", "max.message.bytes": str(MAX_MESSAGE_BYTES)}
            admin.create_topics([NewTopic(self.topic, PARTITIONS[COMMANDS], 1, topic_configs=config)])
        finally:
            admin.close()
        self.rows = FaustRows(self.table)
        self.refused_row = os.urandom(4 * MAX_MESSAGE_BYTES)  # random: no compression brings it under
        self.consumer = KafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False)

    def durable(self, partition: int) -> list[tuple[str, bytes]]:
        tp = TopicPartition(self.topic, partition)
        self.consumer.assign([tp])
        end = self.consumer.end_offsets([tp])[tp]
        self.consumer.seek_to_beginning(tp)
        out: list[tuple[str, bytes]] = []
        while self.consumer.position(tp) < end:
            for record in self.consumer.poll(timeout_ms=1000).get(tp, []):
                if record.offset < end:
                    out.append((bytes(record.key).decode(), bytes(record.value)))
        return out

    async def close(self) -> None:
        await self.app.producer.stop()
        self.consumer.close()


@pytest.mark.parametrize("check", CONTRACT, ids=check_name)
def test_faust_rows_meet_the_rows_contract(check: Check, kafka_bootstrap: str, tmp_path: Path) -> None:
    async def scenario() -> None:
        under_test = FaustRowsUnderTest(kafka_bootstrap, tmp_path / "data")
        try:
            await check(under_test)
        finally:
            await under_test.close()

    asyncio.run(scenario())
