"""The unit tests' fake `episodes` table meets the contract `FaustRows` meets on Kafka and RocksDB
(`tests/integration/streams/test_rows_contract.py`)."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

import pytest

from tests.rows_contract import CONTRACT, Check, check_name
from tests.unit.streams.fake_rows import Rows

MAX_ROW_BYTES = 4096


@dataclass
class FakeRowsUnderTest:
    rows: Rows = field(default_factory=lambda: Rows(max_row_bytes=MAX_ROW_BYTES))
    refused_row: bytes = b"x" * (MAX_ROW_BYTES + 1)

    def durable(self, partition: int) -> list[tuple[str, bytes]]:
        return [(key, value) for p, key, value in self.rows.changelog if p == partition]


@pytest.mark.parametrize("check", CONTRACT, ids=check_name)
def test_the_fake_table_meets_the_rows_contract(check: Check) -> None:
    asyncio.run(check(FakeRowsUnderTest()))
