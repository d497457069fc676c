"""`streams.ports.all_settled`: a batch's acknowledgements are all awaited before its failure is raised."""

from __future__ import annotations

import asyncio

import pytest

from streams.ports import all_settled


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
