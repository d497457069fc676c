"""The contract every `episodes` table (`streams.ports.Rows`) keeps, run against the unit tests' fake
(`tests.unit.streams.fake_rows`) and `FaustRows` on real Kafka and RocksDB (integration).

The streams worker's crash consistency (`streams.worker`) rests on it: a row is read back as written, per
partition; a written row is durable (in the changelog, what a worker restored on another machine reads);
the local store is never ahead of the changelog, at any moment of a write; and a write the changelog
refuses leaves the local store as it was (and the table usable: the worker rebuilds and retries).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Protocol

import pytest

from streams.ports import Rows


class RowsUnderTest(Protocol):
    @property
    def rows(self) -> Rows: ...

    @property
    def refused_row(self) -> bytes:
        """A row the durable store refuses (over its size limit)."""
        ...

    def durable(self, partition: int) -> list[tuple[str, bytes]]:
        """Every (key, row) the durable store (the changelog) holds for `partition`, in the order written."""
        ...


Check = Callable[[RowsUnderTest], Awaitable[None]]


def _items(rows: Rows, partition: int) -> dict[str, bytes]:
    items = list(rows.partition_items(partition))
    assert all(isinstance(k, str) and isinstance(v, bytes) for k, v in items)
    assert len({k for k, _ in items}) == len(items), items
    return dict(items)


def _latest(records: list[tuple[str, bytes]]) -> dict[str, bytes]:
    return dict(records)  # a later record of a key replaces an earlier one (compaction keeps the last)


async def unknown_keys_and_empty_partitions_read_as_nothing(t: RowsUnderTest) -> None:
    assert t.rows.get("ep-none") is None
    assert _items(t.rows, 0) == {} and _items(t.rows, 1) == {}


async def rows_read_back_as_written_per_partition(t: RowsUnderTest) -> None:
    await t.rows.write([(0, "ep-a", b"row a"), (1, "ep-b", b"row b\x00\xff"), (0, "ep-c", b"")])
    assert (t.rows.get("ep-a"), t.rows.get("ep-b"), t.rows.get("ep-c")) == (b"row a", b"row b\x00\xff", b"")
    assert _items(t.rows, 0) == {"ep-a": b"row a", "ep-c": b""}
    assert _items(t.rows, 1) == {"ep-b": b"row b\x00\xff"}
    assert _items(t.rows, 2) == {}


async def a_later_write_replaces_the_row(t: RowsUnderTest) -> None:
    await t.rows.write([(1, "ep-a", b"first")])
    await t.rows.write([(1, "ep-a", b"second")])
    assert t.rows.get("ep-a") == b"second"
    assert _items(t.rows, 1) == {"ep-a": b"second"}


async def a_written_row_is_durable(t: RowsUnderTest) -> None:
    """What a worker restored from the changelog alone (another machine, a rebalance) reads."""
    await t.rows.write([(0, "ep-a", b"a1"), (1, "ep-b", b"b1")])
    await t.rows.write([(0, "ep-a", b"a2")])
    assert t.durable(0) == [("ep-a", b"a1"), ("ep-a", b"a2")]
    assert t.durable(1) == [("ep-b", b"b1")]


async def the_local_store_is_never_ahead_of_the_changelog(t: RowsUnderTest) -> None:
    """Sampled all through a large write: every row the local store holds was acknowledged already."""
    rows = [
        (n % 2, f"ep-{n % 2}-{n % 7}", b"row %d " % n * 50) for n in range(60)
    ]  # a key keeps its partition
    writing = asyncio.ensure_future(t.rows.write(rows))
    samples = 0
    while True:
        done = writing.done()
        for partition in (0, 1):
            local, durable = _items(t.rows, partition), set(t.durable(partition))
            assert set(local.items()) <= durable, f"partition {partition}: local rows the changelog lacks"
        samples += 1
        if done:
            break
        await asyncio.sleep(0)  # one step of the write between samples
    await writing
    for partition in (0, 1):
        assert _items(t.rows, partition) == _latest(t.durable(partition))
    assert samples >= 1


async def a_refused_write_leaves_the_local_store_unchanged(t: RowsUnderTest) -> None:
    await t.rows.write([(0, "ep-a", b"kept")])
    with pytest.raises(Exception):  # noqa: B017 (each store fails with its own error)
        await t.rows.write([(0, "ep-a", b"replaced"), (0, "ep-b", t.refused_row), (1, "ep-c", b"c")])
    assert t.rows.get("ep-a") == b"kept" and t.rows.get("ep-b") is None and t.rows.get("ep-c") is None
    assert _items(t.rows, 0) == {"ep-a": b"kept"} and _items(t.rows, 1) == {}
    assert ("ep-b", t.refused_row) not in t.durable(0)
    await t.rows.write([(0, "ep-b", b"after")])  # the table is still usable (the worker retries)
    assert _items(t.rows, 0) == {"ep-a": b"kept", "ep-b": b"after"}


CONTRACT: tuple[Check, ...] = (
    unknown_keys_and_empty_partitions_read_as_nothing,
    rows_read_back_as_written_per_partition,
    a_later_write_replaces_the_row,
    a_written_row_is_durable,
    the_local_store_is_never_ahead_of_the_changelog,
    a_refused_write_leaves_the_local_store_unchanged,
)


def check_name(check: Check) -> str:
    return getattr(check, "__name__", repr(check))
