"""A minimal file format for logs of records outside Kafka (golden logs, exported topics):
each record is a 4-byte big-endian length followed by that many bytes of single-object encoding."""

from __future__ import annotations

import struct
from collections.abc import Iterable, Iterator
from pathlib import Path

_LENGTH = struct.Struct(">I")


class LogFormatError(Exception):
    """The framing itself is broken at record `index` (byte `offset` of the file)."""

    def __init__(self, index: int, offset: int, message: str) -> None:
        super().__init__(f"record #{index} at byte {offset}: {message}")
        self.index = index
        self.offset = offset


def encode_log(records: Iterable[bytes]) -> bytes:
    return b"".join(_LENGTH.pack(len(record)) + record for record in records)


def iter_log(data: bytes) -> Iterator[bytes]:
    offset = index = 0
    while offset < len(data):
        if offset + _LENGTH.size > len(data):
            raise LogFormatError(index, offset, f"{len(data) - offset} stray bytes where a length should be")
        (size,) = _LENGTH.unpack_from(data, offset)
        start = offset + _LENGTH.size
        if start + size > len(data):
            raise LogFormatError(index, offset, f"length {size} runs past the end of the log")
        yield data[start : start + size]
        offset, index = start + size, index + 1


def write_log(path: Path, records: Iterable[bytes]) -> None:
    path.write_bytes(encode_log(records))


def read_log(path: Path) -> list[bytes]:
    return list(iter_log(path.read_bytes()))
