"""The `episodes` table of the unit tests: a dict, with a changelog beside it (`streams.ports.Rows`).

It keeps the real table's contract (`tests/rows_contract.py`, which `FaustRows` on Kafka and RocksDB also
passes): every row of a write goes to the changelog first and is acknowledged, and only then to the local
store (the dict), so the local store is never ahead of the changelog; a row too large for the changelog
(`max_row_bytes`, as the broker's `max.message.bytes`) fails the write and leaves the local store as it
was. `crash_next` makes the next local write die (the process is killed after the changelog acked).
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator, Sequence

DEFAULT_MAX_ROW_BYTES = 1024 * 1024  # the broker's default max.message.bytes


class RowRefused(Exception):
    """The changelog refused a row (the broker's MESSAGE_TOO_LARGE)."""


class Crash(BaseException):
    """The process dies here (not an Exception: nothing in the worker catches it)."""


class Rows(dict[str, bytes]):
    """The table; `crash_next` makes the next write die (after the effects were acked)."""

    crash_next = False

    def __init__(self, max_row_bytes: int = DEFAULT_MAX_ROW_BYTES) -> None:
        super().__init__()
        self.partitions: dict[str, int] = {}
        self.changelog: list[tuple[int, str, bytes]] = []  # every row written, in order
        self.max_row_bytes = max_row_bytes
        self.stamps: list[float | None] = []  # each write's create time, in order

    async def write(self, rows: Sequence[tuple[int, str, bytes]], timestamp_s: float | None = None) -> None:
        self.stamps.append(timestamp_s)
        for partition, key, value in rows:  # the changelog first, every row acknowledged
            if len(value) > self.max_row_bytes:
                raise RowRefused(f"row {key!r} of {len(value)} bytes is over {self.max_row_bytes}")
            self.changelog.append((partition, key, value))
            await asyncio.sleep(0)  # its acknowledgement comes later (others may run meanwhile)
        for partition, key, value in rows:  # then the local store
            self.put(partition, key, value)

    def put(self, partition: int, key: str, value: bytes) -> None:
        if self.crash_next:
            self.crash_next = False
            raise Crash("before the table write")
        self.partitions[key] = partition
        self[key] = value

    def partition_items(self, partition: int) -> Iterator[tuple[str, bytes]]:
        return ((k, v) for k, v in list(self.items()) if self.partitions.get(k, 0) == partition)
