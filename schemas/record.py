"""What every encodable domain type provides, and the helpers its conversions share.

Domain objects are frozen dataclasses; Avro sees plain dicts. Each type converts explicitly in
`to_record` / `from_record`, so the wire shape is visible in one place and no reflection runs per call.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, ClassVar, Protocol, Self, TypeVar

AvroDict = dict[str, Any]
T = TypeVar("T")


class Record(Protocol):
    """A domain type with an Avro schema of its own (SCHEMA is the schema's full name)."""

    SCHEMA: ClassVar[str]

    def to_record(self) -> AvroDict: ...

    @classmethod
    def from_record(cls, rec: Mapping[str, Any]) -> Self: ...


def tagged(record: Record) -> tuple[str, AvroDict]:
    """A union branch in fastavro's tuple notation: the writer picks the branch by name, not by validation."""
    return (record.SCHEMA, record.to_record())


def optional(record: Record | None) -> tuple[str, AvroDict] | None:
    return None if record is None else (record.SCHEMA, record.to_record())


def untag(value: Any) -> tuple[str | None, Any]:
    """Split a decoded union value: fastavro returns (name, dict) only for unions of several records."""
    if isinstance(value, tuple):
        return value[0], value[1]
    return None, value


def from_optional(value: Any, parse: Callable[[Mapping[str, Any]], T]) -> T | None:
    if value is None:
        return None
    return parse(untag(value)[1])
