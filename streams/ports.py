"""What the episode worker (`streams.worker`) needs from the world, as ports: the bus it sends on, the
`episodes` table it keeps rows in, the tasks it starts episodes of, the log it recovers from, and the input
records it is given. `streams.adapters` implements them on Faust and Kafka; the unit tests on fakes that
meet the same contracts (`tests/rows_contract.py`).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Protocol, TypeVar

from streams.owner import TaskInfo

T = TypeVar("T")
Headers = tuple[tuple[str, bytes], ...]  # a record's Kafka headers (traceparent)


class Bus(Protocol):
    """Sends one record without waiting; the awaitable resolves to its offset once the broker acked it (or
    raises, e.g. when the broker refused it). `timestamp_s`: the record's create time (wall clock, seconds;
    None: the producer's clock), which `streams.fencing` sets and the broker checks."""

    async def send(
        self,
        topic: str,
        key: bytes | None,
        value: bytes,
        headers: Headers = (),
        timestamp_s: float | None = None,
    ) -> Awaitable[int]: ...


async def all_settled(acks: Sequence[Awaitable[T]], failure: BaseException | None = None) -> list[T]:
    """The results of `acks` (offsets), awaited to the last one, then the first failure raised (`failure`,
    a send that raised before these acks were all made, comes first). Not `asyncio.gather`'s default, which
    raises at the first failure and leaves the other records in flight: a batch rebuilt from the log
    meanwhile does not see them, and its retry sends them again once they have landed (the chaos test's
    duplicate event, 2026-12-08: a broker cut off, one record refused as late, the episode's event on its
    way)."""
    settled = await asyncio.gather(*acks, return_exceptions=True)
    if failure is not None:
        raise failure
    for outcome in settled:
        if isinstance(outcome, BaseException):
            raise outcome
    return [outcome for outcome in settled if not isinstance(outcome, BaseException)]


async def send_all(sends: Iterable[Callable[[], Awaitable[Awaitable[T]]]]) -> list[T]:
    """Start each send in order (each gives its acknowledgement), then await them all (`all_settled`). A
    send that raises starts no more; it is raised once those already started have settled."""
    acks: list[Awaitable[T]] = []
    refused: Exception | None = None
    for send in sends:
        try:
            acks.append(await send())
        except Exception as exc:
            refused = exc
            break
    return await all_settled(acks, refused)


class Rows(Protocol):
    """The `episodes` table as the worker sees it: episode id -> encoded `Row`, written per partition."""

    def get(self, key: str) -> bytes | None: ...

    async def write(self, rows: Sequence[tuple[int, str, bytes]], timestamp_s: float | None = None) -> None:
        """Write each (partition, key, row): durably first (the changelog, every write acknowledged), then
        where `get` and `partition_items` read (the local store), so that the local store is never ahead
        of the changelog (see the module doc). Raises if a write fails; then some rows may be written.
        `timestamp_s`: the changelog records' create time, as `Bus.send`'s."""
        ...

    def partition_items(self, partition: int) -> Iterable[tuple[str, bytes]]: ...


class Tasks(Protocol):
    def get(self, task_id: str, *, refresh: bool = True) -> TaskInfo | None: ...


EventReader = Callable[[int, int], Iterable[tuple[int, bytes | None, bytes | None]]]
"""(partition, start offset) -> (offset, key, value) of `episode.events`[partition] up to its end."""


@dataclass(frozen=True, slots=True)
class Input:
    topic: str  # the base name (without the run prefix)
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    headers: Headers = ()  # the record's Kafka headers (traceparent); they travel with it in a batch
