"""The registry-free codec: Avro single-object encoding of trialog records.

Wire format (Avro specification, "Single-object encoding"):

    0xC3 0x01 | 8-byte little-endian CRC-64-AVRO fingerprint of the writer schema | Avro binary body

The writer always writes today's schema. A reader finds the writer schema among all known versions by its
fingerprint, resolves it to today's reader schema (only when they differ) and runs the upcasters in
between. Everything per schema is compiled once; a call does framing, one dict lookup and fastavro.

Bytes that cannot be decoded raise `DecodeError` with a stable `reason`, which the stream layer puts in the
dead letter it writes for the record.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from enum import StrEnum
from functools import cache
from io import BytesIO
from typing import Any, TypeVar

from fastavro import schemaless_reader, schemaless_writer

from schemas.catalog import SchemaCatalog, SchemaError
from schemas.commands import AbortEpisode, StartEpisode
from schemas.deadletter import DeadLetter
from schemas.events import EPISODE_EVENT_TYPES
from schemas.publications import PolicyPublished, TaskPublished
from schemas.record import AvroDict, Record
from schemas.requests import PolicyRequest, SandboxRequest, VerifyRequest
from schemas.state import EpisodeState
from schemas.trajectories import TrajectoryCompleted, TrajectoryFailed
from schemas.upcasters import UPCASTERS, Upcaster, upcast_chain

MAGIC = b"\xc3\x01"
HEADER_SIZE = len(MAGIC) + 8

R = TypeVar("R", bound=Record)


class DecodeReason(StrEnum):
    TOO_SHORT = "too_short"  # fewer bytes than the 10-byte header
    WRONG_MAGIC = "wrong_magic"  # not single-object encoded
    UNKNOWN_FINGERPRINT = "unknown_fingerprint"  # written with a schema this reader does not know
    TRUNCATED = "truncated"  # the body ends before the record does (or claims a length past its end)
    MALFORMED = "malformed"  # the body does not parse under the writer schema
    TRAILING_BYTES = "trailing_bytes"  # bytes left after the record
    UPCAST_FAILED = "upcast_failed"
    INVALID_RECORD = "invalid_record"  # parsed, but not a valid domain object
    UNEXPECTED_TYPE = "unexpected_type"  # a valid record of another type than asked for


class DecodeError(Exception):
    """Bytes that are not a readable trialog record. `reason` is stable; `detail` is for people."""

    def __init__(self, reason: DecodeReason, detail: str) -> None:
        super().__init__(f"{reason.value}: {detail}")
        self.reason = reason
        self.detail = detail


class EncodeError(Exception):
    """A domain object that does not fit its schema (a bug in the producer, never a data problem)."""


@dataclass(frozen=True, slots=True)
class _ReadPlan:
    name: str
    version: int
    writer: dict[str, Any]
    reader: dict[str, Any] | None  # None when the writer schema is today's: no resolution needed
    upcasters: tuple[Upcaster, ...]
    tag_unions: bool  # has a union of several records, read as (name, record) to know the branch


def _walk(schema: Any) -> Iterator[Any]:
    """Every schema node under `schema` (named types once, at their definition)."""
    yield schema
    if isinstance(schema, list):
        for branch in schema:
            yield from _walk(branch)
    elif isinstance(schema, dict):
        kind = schema.get("type")
        if kind == "record":
            for field in schema["fields"]:
                yield from _walk(field["type"])
        elif kind == "array":
            yield from _walk(schema["items"])
        elif kind == "map":
            yield from _walk(schema["values"])


def _has_record_choice(schema: Any) -> bool:
    """Whether a (parsed) schema has a union with several record branches (defined there or named)."""
    nodes = list(_walk(schema))
    records = {n["name"] for n in nodes if isinstance(n, dict) and n.get("type") == "record"}

    def is_record(branch: Any) -> bool:
        if isinstance(branch, str):
            return branch in records
        return isinstance(branch, dict) and branch.get("type") == "record"

    return any(isinstance(n, list) and sum(map(is_record, n)) > 1 for n in nodes)


DEFAULT_TYPES: tuple[type[Record], ...] = (
    *EPISODE_EVENT_TYPES,
    StartEpisode,
    AbortEpisode,
    PolicyRequest,
    SandboxRequest,
    VerifyRequest,
    TrajectoryCompleted,
    TrajectoryFailed,
    PolicyPublished,
    TaskPublished,
    DeadLetter,
    EpisodeState,
)
"""Every message type, with the schema it is written with."""


class Codec:
    """Encodes domain records (or plain record dicts) to single-object bytes and back."""

    def __init__(
        self,
        catalog: SchemaCatalog,
        types: Iterable[type[Record]] | None = None,
        upcasters: Mapping[tuple[str, int], Upcaster] = UPCASTERS,
    ) -> None:
        self.catalog = catalog
        self._writers: dict[str, tuple[bytes, dict[str, Any]]] = {}
        self._plans: dict[bytes, _ReadPlan] = {}
        for name in catalog.names():
            current = catalog.current(name)
            self._writers[name] = (MAGIC + current.fingerprint, current.parsed)
            for sv in catalog.versions(name):
                reader = None if sv is current else current.parsed
                chain = upcast_chain(name, sv.version, current.version, upcasters)
                tag = _has_record_choice(current.parsed)
                self._plans[sv.fingerprint] = _ReadPlan(name, sv.version, sv.parsed, reader, chain, tag)
        self._types: dict[str, type[Record]] = {}
        for cls in DEFAULT_TYPES if types is None else types:
            if cls.SCHEMA not in self._writers:
                raise SchemaError(f"{cls.__name__}: no message schema named {cls.SCHEMA}")
            self._types[cls.SCHEMA] = cls

    # -- records (plain dicts) ------------------------------------------------------------------------

    def encode_record(self, name: str, record: Mapping[str, Any]) -> bytes:
        try:
            header, schema = self._writers[name]
        except KeyError:
            raise EncodeError(f"no message schema named {name!r}") from None
        out = BytesIO()
        out.write(header)
        try:
            schemaless_writer(out, schema, record)
        except (TypeError, ValueError, KeyError, AttributeError, OverflowError) as exc:
            raise EncodeError(f"{name}: {exc}") from exc
        return out.getvalue()

    def _plan(self, data: bytes) -> _ReadPlan:
        if len(data) < HEADER_SIZE:
            raise DecodeError(
                DecodeReason.TOO_SHORT, f"{len(data)} bytes, a record has at least {HEADER_SIZE}"
            )
        if data[:2] != MAGIC:
            raise DecodeError(DecodeReason.WRONG_MAGIC, f"starts with {bytes(data[:2]).hex()}, expected c301")
        fingerprint = bytes(data[2:HEADER_SIZE])
        plan = self._plans.get(fingerprint)
        if plan is None:
            raise DecodeError(
                DecodeReason.UNKNOWN_FINGERPRINT, f"no known schema has fingerprint {fingerprint.hex()}"
            )
        return plan

    def decode_record(self, data: bytes) -> tuple[str, AvroDict]:
        """(schema name, record in today's shape)."""
        plan = self._plan(data)
        buf = BytesIO(data)
        buf.seek(HEADER_SIZE)
        try:
            if plan.tag_unions:  # the options cost per call, so only schemas that need them pay
                record = schemaless_reader(
                    buf, plan.writer, plan.reader, return_record_name=True, return_record_name_override=True
                )
            else:
                record = schemaless_reader(buf, plan.writer, plan.reader)
        except Exception as exc:  # fastavro raises many types on bad input; running out of bytes is one case
            ended = isinstance(exc, EOFError) or buf.tell() >= len(data)
            reason = DecodeReason.TRUNCATED if ended else DecodeReason.MALFORMED
            raise DecodeError(reason, f"{plan.name} v{plan.version}: {exc!r}") from exc
        if buf.tell() != len(data):
            extra = len(data) - buf.tell()
            raise DecodeError(
                DecodeReason.TRAILING_BYTES, f"{plan.name} v{plan.version}: {extra} bytes after it"
            )
        if not isinstance(record, dict):
            raise DecodeError(DecodeReason.MALFORMED, f"{plan.name}: not a record")
        return plan.name, self._upcast(plan, record) if plan.upcasters else record

    @staticmethod
    def _upcast(plan: _ReadPlan, record: AvroDict) -> AvroDict:
        try:
            for upcaster in plan.upcasters:
                record = upcaster(record)
        except Exception as exc:
            raise DecodeError(DecodeReason.UPCAST_FAILED, f"{plan.name} v{plan.version}: {exc!r}") from exc
        return record

    def schema_of(self, data: bytes) -> tuple[str, int]:
        """(schema name, writer version) from the header alone, without decoding the body."""
        plan = self._plan(data)
        return plan.name, plan.version

    # -- domain objects -------------------------------------------------------------------------------

    def encode(self, obj: Record) -> bytes:
        try:
            record = obj.to_record()
        except (AttributeError, TypeError, ValueError) as exc:
            raise EncodeError(f"{type(obj).__name__}: {exc}") from exc
        return self.encode_record(obj.SCHEMA, record)

    def encode_at(self, obj: Record, version: int) -> bytes:
        """`obj` written with `version` of its schema (fields that version lacks left out): the bytes a writer
        of that version produced. For checking records logged before their schema's current version against
        the hashes that name them (rows v1 re-encode their events, `streams.rows`)."""
        sv = self.catalog.version(obj.SCHEMA, version)
        out = BytesIO()
        out.write(MAGIC + sv.fingerprint)
        try:
            schemaless_writer(out, sv.parsed, obj.to_record())
        except (TypeError, ValueError, KeyError, AttributeError, OverflowError) as exc:
            raise EncodeError(f"{obj.SCHEMA} v{version}: {exc}") from exc
        return out.getvalue()

    def decode(self, data: bytes) -> Record:
        name, record = self.decode_record(data)
        cls = self._types.get(name)
        if cls is None:
            raise DecodeError(DecodeReason.INVALID_RECORD, f"{name} has no domain type in this codec")
        try:
            return cls.from_record(record)
        except (KeyError, ValueError, TypeError) as exc:
            raise DecodeError(DecodeReason.INVALID_RECORD, f"{name}: {exc!r}") from exc

    def decode_as(self, data: bytes, cls: type[R]) -> R:
        obj = self.decode(data)
        if not isinstance(obj, cls):
            raise DecodeError(DecodeReason.UNEXPECTED_TYPE, f"expected {cls.SCHEMA}, got {type(obj).SCHEMA}")
        return obj


@cache
def default_codec() -> Codec:
    """The codec over the schemas shipped in this package (built once per process)."""
    return Codec(SchemaCatalog.from_folder())
