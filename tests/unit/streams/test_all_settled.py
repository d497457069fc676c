"""`streams.ports.all_settled` and `send_all`: a batch's acknowledgements are all awaited before its
failure is raised."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable
from functools import partial

import pytest

from streams.ports import all_settled, send_all


async def _late(order: list[str], offset: int) -> int:
    await asyncio.sleep(0.05)
    order.append(f"landed {offset}")
    return offset


async def _refused(order: list[str]) -> int:
    order.append("refused")
    raise RuntimeError("InvalidTimestampError")


def test_the_offsets_in_order_when_every_record_landed() -> None:
    assert asyncio.run(all_settled([_late([], 7), _late([], 3)])) == [7, 3]


def test_a_refused_record_is_raised_only_once_the_records_still_in_flight_have_landed() -> None:
    order: list[str] = []

    async def batch() -> None:
        try:
            await all_settled([_late(order, 12), _refused(order)])
        finally:
            order.append("raised")

    with pytest.raises(RuntimeError, match="InvalidTimestampError"):
        asyncio.run(batch())
    assert order == ["refused", "landed 12", "raised"]


def test_a_send_that_raised_before_the_others_were_acknowledged_is_raised_after_them() -> None:
    order: list[str] = []
    with pytest.raises(TimeoutError, match="no metadata"):
        asyncio.run(all_settled([_late(order, 4)], TimeoutError("no metadata")))
    assert order == ["landed 4"]


async def _send(order: list[str], offset: int) -> Awaitable[int]:
    order.append(f"sent {offset}")
    return asyncio.ensure_future(_late(order, offset))


async def _no_metadata(order: list[str]) -> Awaitable[int]:
    order.append("send raised")
    raise TimeoutError("no metadata")


def test_send_all_starts_no_send_after_one_that_raised_and_raises_it_once_the_started_ones_landed() -> None:
    order: list[str] = []
    sends = [
        partial(_send, order, 1),
        partial(_send, order, 2),
        partial(_no_metadata, order),
        partial(_send, order, 3),
    ]
    with pytest.raises(TimeoutError, match="no metadata"):
        asyncio.run(send_all(sends))
    assert order == ["sent 1", "sent 2", "send raised", "landed 1", "landed 2"]
    assert asyncio.run(send_all([partial(_send, [], 5), partial(_send, [], 6)])) == [5, 6]
