"""Records that could not be decoded or were invalid, kept with the reason on the `deadletter` topic."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

from schemas.common import RecordMeta
from schemas.record import AvroDict


@dataclass(frozen=True, slots=True)
class DeadLetter:
    SCHEMA: ClassVar[str] = "trialog.ops.DeadLetter"

    meta: RecordMeta
    topic: str
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    reason: str  # a stable code, e.g. codec.DecodeReason values or fold error codes
    detail: str
    headers: tuple[tuple[str, bytes | None], ...] = ()

    def to_record(self) -> AvroDict:
        return {
            "meta": self.meta.to_record(),
            "topic": self.topic,
            "partition": self.partition,
            "offset": self.offset,
            "key": self.key,
            "value": self.value,
            "headers": [{"key": key, "value": value} for key, value in self.headers],
            "reason": self.reason,
            "detail": self.detail,
        }

    @classmethod
    def from_record(cls, rec: Mapping[str, Any]) -> DeadLetter:
        return cls(
            RecordMeta.from_record(rec["meta"]),
            rec["topic"],
            rec["partition"],
            rec["offset"],
            rec["key"],
            rec["value"],
            rec["reason"],
            rec["detail"],
            tuple((h["key"], h["value"]) for h in rec["headers"]),
        )
