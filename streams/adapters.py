"""The streams worker's ports (`streams.ports`) on Faust and Kafka: records go out through the app's
producer (`FaustBus`), rows live in the app's `episodes` table (`FaustRows`: RocksDB, written after its
Kafka changelog acknowledged them), and recovery reads `episode.events` with kafka-python
(`EventLogReader`). `streams.app` builds the app around them; `tests/rows_contract.py` holds `FaustRows` and
the unit tests' fake table to the same contract.
"""

from __future__ import annotations

import asyncio
import functools
import time
from collections.abc import Awaitable, Generator, Iterator, Sequence
from typing import Any

import faust

from streams.ports import Headers, send_all


class FaustBus:
    def __init__(self, app: faust.App) -> None:
        self.app = app

    async def send(
        self,
        topic: str,
        key: bytes | None,
        value: bytes,
        headers: Headers = (),
        timestamp_s: float | None = None,
    ) -> Awaitable[int]:
        # `headers`: the traceparent of the input's span that decided the record (taken when decided).
        future = await self.app.producer.send(topic, key, value, None, timestamp_s, list(headers) or None)

        async def offset() -> int:
            metadata = await future
            return int(metadata.offset)

        return asyncio.ensure_future(offset())


READ_STALL_S = 30.0  # `read_partition`: no record for this long while some are due is a failed read


def read_partition(
    bootstrap: str, topic: str, partition: int, start: int, stall_s: float = READ_STALL_S
) -> Generator[Any, None, None]:
    """The kafka-python records of `topic`[`partition`] from `start` up to the end offset it had when the
    read began. A read that gets no record for `stall_s` while some are still due raises `TimeoutError`
    (the broker went away mid-read): the caller retries later (`EpisodeWorker.sync_assignment` after a
    backoff), where an endless poll would hold the streams worker's lock, and so every partition, for good."""
    from kafka import TopicPartition

    from streams.kafka import clients

    tp = TopicPartition(topic, partition)
    consumer = clients.consumer(bootstrap, enable_auto_commit=False)
    try:
        consumer.assign([tp])
        end = consumer.end_offsets([tp])[tp]
        begin = consumer.beginning_offsets([tp])[tp]
        position = max(start, begin)
        if position >= end:
            return
        consumer.seek(tp, position)
        quiet_since = time.monotonic()
        while consumer.position(tp) < end:
            records = consumer.poll(timeout_ms=500).get(tp, [])
            if records:
                quiet_since = time.monotonic()
            elif time.monotonic() - quiet_since > stall_s:
                raise TimeoutError(
                    f"{topic}[{partition}]: no record for {stall_s:g} s at offset "
                    f"{consumer.position(tp)} of {end} ({bootstrap})"
                )
            for record in records:
                if record.offset < end:
                    yield record
    finally:
        consumer.close()


class EventLogReader:
    """Reads `episode.events`[p] from an offset to its end (`read_partition`, in an executor thread)."""

    def __init__(self, bootstrap: str, topic: str, stall_s: float = READ_STALL_S) -> None:
        self.bootstrap = bootstrap
        self.topic = topic
        self.stall_s = stall_s

    def __call__(self, partition: int, start: int) -> Iterator[tuple[int, bytes | None, bytes | None]]:
        for record in read_partition(self.bootstrap, self.topic, partition, start, self.stall_s):
            yield record.offset, record.key, record.value


class FaustRows:
    """The table seen with str keys (episode ids) and bytes rows, written to an explicit partition."""

    def __init__(self, table: Any) -> None:
        self.table = table

    def get(self, key: str) -> bytes | None:
        value = self.table.get(key.encode())
        return None if value is None else bytes(value)

    async def write(self, rows: Sequence[tuple[int, str, bytes]], timestamp_s: float | None = None) -> None:
        """What `table[key] = value` does inside a stream event, with the partition given (any context), in
        the other order: Faust writes the local store, then hands the changelog record to its producer
        buffer, so a worker killed before the buffer was flushed leaves the local store ahead of the
        changelog (`streams.worker` says why that loses events). Here the changelog records are sent at
        once, acknowledged together, and only then written to the local store. Faust's own callback
        records each acknowledged offset in the store, as for its own writes."""
        table = self.table
        # Every row's record settled before a failure is raised (`send_all`): one still in flight could land
        # after the retried batch's row for the same episode and be the changelog's last word on it.
        await send_all(
            functools.partial(
                table.changelog_topic.send,
                key=key.encode(),
                value=value,
                partition=partition,
                timestamp=timestamp_s,
                key_serializer=table.key_serializer,
                value_serializer=table.value_serializer,
                callback=table._on_changelog_sent,
                force=True,  # never deferred to the current stream event's acknowledgement
            )
            for partition, key, value in rows
        )
        for partition, key, value in rows:
            self._put_local(partition, key.encode(), value)

    def _put_local(self, partition: int, raw: bytes, value: bytes) -> None:
        store = self.table.data
        encoded = store._encode_key(raw)
        store._key_index[encoded] = partition
        store._db_for_partition(partition).put(encoded, store._encode_value(value))

    def partition_items(self, partition: int) -> Iterator[tuple[str, bytes]]:
        store = self.table.data
        db = store._db_for_partition(partition)
        return ((bytes(k).decode(), bytes(v)) for k, v in store._visible_items(db))
