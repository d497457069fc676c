"""The registry-free codec: Avro single-object encoding of trialog records.

Wire format (Avro specification, "Single-object encoding"):

    0xC3 0x01 | 8-byte little-endian CRC-64-AVRO fingerprint of the writer schema | Avro binary body

The writer always writes today's schema. A reader finds the writer schema among all known versions by its
fingerprint, resolves it to today's reader schema (only when they differ) and runs the upcasters in
between. Everything per schema is compiled once; a call does framing, one dict lookup and fastavro.

fastavro writes any Python int into an `int` (32-bit) field and Java's Avro reads 2**31 back as 0, so the
writer checks every `int` it would write against the 32-bit range first (`range_check`, built once per
schema from its fields) and refuses a value outside it with an `EncodeError` naming the field; a `long`
past 64 bits fastavro refuses itself, and the error then names the field too.

Bytes that cannot be decoded raise `DecodeError` with a stable `reason`, which the stream layer puts in the
dead letter it writes for the record.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from enum import StrEnum
from functools import cache
from io import BytesIO
from typing import Any, TypeVar

from fastavro import schemaless_reader, schemaless_writer

from schemas.alerts import Alert
from schemas.canaries import CanaryGraded
from schemas.catalog import SchemaCatalog, SchemaError
from schemas.commands import AbortEpisode, StartEpisode
from schemas.deadletter import DeadLetter
from schemas.difficulty import TaskDifficulty
from schemas.events import EPISODE_EVENT_TYPES
from schemas.progress import StepGraded
from schemas.publications import PolicyPublished, TaskPublished, TaskReviewed
from schemas.record import AvroDict, Record
from schemas.requests import PolicyRequest, SandboxRequest, VerifyRequest
from schemas.run_control import CONTROL_TYPES
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


INT_RANGE = (-(2**31), 2**31 - 1)
LONG_RANGE = (-(2**63), 2**63 - 1)
_RANGES = {"int": INT_RANGE, "long": LONG_RANGE}

RangeCheck = Callable[[Mapping[str, Any]], None]


class IntegerOutOfRange(EncodeError):
    """A value too large (or small) for its field's Avro `int` or `long`; `path` names the field."""

    def __init__(self, path: str, value: int, kind: str, schema: str = "") -> None:
        lo, hi = _RANGES[kind]
        prefix = f"{schema}: " if schema else ""
        super().__init__(f"{prefix}{path} = {value} is outside the range of an Avro {kind} [{lo}, {hi}]")
        self.path = path
        self.value = value
        self.kind = kind


def _out_of_range(path: str, value: int, kind: str) -> None:
    raise IntegerOutOfRange(path, value, kind)


class _RangeCheckSource:
    """The source of one function that checks the integers of `kinds` in a record of one (parsed) schema.

    The check runs on every encode, so it is generated as straight-line code (one `get` per field on the
    way to an int, one comparison per int): a closure per field cost 16% of the encode rate of a step
    event, this 2% (`trialog bench codec`). Paths name fields as people read them (`meta.step`,
    `history[].result.exit_code`). A named type is expanded where it is used; a recursive one is checked
    down to its first repetition.

    Unions are checked where fastavro does not validate: a branch given by name in tuple notation
    (`schemas.record.tagged`, how trialog writes every union of records), or a plain dict when the union
    has a single record branch. A plain int in a union, or a plain dict among several records, is written
    only after fastavro has validated it against the branch, range included.
    """

    def __init__(self, schema: Mapping[str, Any], kinds: Iterable[str]) -> None:
        self.named = {n["name"]: n for n in _walk(schema) if isinstance(n, dict) and "name" in n}
        self.kinds = frozenset(kinds)
        self.lines: list[str] = []
        self.names = 0
        self.checks = 0
        self.node(schema, "record", "", 1, frozenset())

    def var(self) -> str:
        self.names += 1
        return f"v{self.names}"

    def emit(self, depth: int, line: str) -> None:
        self.lines.append("    " * depth + line)

    def function(self) -> RangeCheck | None:
        if not self.checks:
            return None
        source = "\n".join(["def check(record):", *self.lines])
        namespace: dict[str, Any] = {"Mapping": Mapping, "fail": _out_of_range}
        exec(
            compile(source, "<avro range check>", "exec"), namespace
        )  # the source is ours, built from the schema
        check: RangeCheck = namespace["check"]
        return check

    def holds_ints(self, node: Any, expanding: frozenset[str]) -> bool:
        mark = len(self.lines), self.names, self.checks
        self.node(node, "x", "", 0, expanding)
        found = self.checks > mark[2]
        del self.lines[mark[0] :]
        self.names, self.checks = mark[1], mark[2]
        return found

    def node(self, node: Any, var: str, path: str, depth: int, expanding: frozenset[str]) -> None:
        if isinstance(node, list):
            self.union(node, var, path, depth, expanding)
            return
        if isinstance(node, str):
            if node in self.named and node not in expanding:
                self.node(self.named[node], var, path, depth, expanding)
            elif node in self.kinds:
                self.integer(node, var, path, depth)
            return
        kind = node.get("type")
        if kind == "record":
            self.record(node, var, path, depth, expanding | {node["name"]})
        elif kind == "array":
            self.array(node["items"], var, f"{path}[]", depth, expanding)
        elif kind == "map" and self.holds_ints(node["values"], expanding):
            item = self.var()
            self.emit(depth, f"if isinstance({var}, dict) or isinstance({var}, Mapping):")
            self.emit(depth + 1, f"for {item} in {var}.values():")
            self.node(node["values"], item, f"{path}{{}}", depth + 2, expanding)
        elif isinstance(kind, str) and kind in self.kinds:  # an int or long with a logical type
            self.integer(kind, var, path, depth)

    def integer(self, kind: str, var: str, path: str, depth: int) -> None:
        lo, hi = _RANGES[kind]
        self.checks += 1
        self.emit(depth, f"if isinstance({var}, int) and not {lo} <= {var} <= {hi}:")
        self.emit(depth + 1, f"fail({path!r}, {var}, {kind!r})")

    def record(
        self, node: Mapping[str, Any], var: str, path: str, depth: int, expanding: frozenset[str]
    ) -> None:
        fields = [f for f in node["fields"] if self.holds_ints(f["type"], expanding)]
        if not fields:
            return
        if var != "record":  # the top-level record is a Mapping by encode_record's contract
            self.emit(depth, f"if isinstance({var}, dict) or isinstance({var}, Mapping):")
            depth += 1
        for field in fields:
            value = self.var()
            self.emit(depth, f"{value} = {var}.get({field['name']!r})")
            field_path = f"{path}.{field['name']}" if path else field["name"]
            self.node(field["type"], value, field_path, depth, expanding)

    def array(self, items: Any, var: str, path: str, depth: int, expanding: frozenset[str]) -> None:
        if isinstance(items, str) and items in self.kinds:
            # token ids: thousands per action, so the extremes are found in C and only they are compared
            low, high = self.var(), self.var()
            self.emit(depth, f"if isinstance({var}, list | tuple) and {var}:")
            self.emit(depth + 1, "try:")
            self.emit(depth + 2, f"{low}, {high} = min({var}), max({var})")
            self.emit(depth + 1, "except TypeError:  # not all numbers: fastavro's own check speaks")
            self.emit(depth + 2, "pass")
            self.emit(depth + 1, "else:")
            self.integer(items, low, path, depth + 2)
            self.integer(items, high, path, depth + 2)
        elif self.holds_ints(items, expanding):
            item = self.var()
            self.emit(depth, f"if isinstance({var}, list | tuple):")
            self.emit(depth + 1, f"for {item} in {var}:")
            self.node(items, item, path, depth + 2, expanding)

    def union(self, branches: list[Any], var: str, path: str, depth: int, expanding: frozenset[str]) -> None:
        records = []
        for branch in branches:
            definition = self.named.get(branch, branch) if isinstance(branch, str) else branch
            if isinstance(definition, dict) and definition.get("type") == "record":
                records.append((definition["name"], branch, self.holds_ints(branch, expanding)))
        if not any(holds for _, _, holds in records):
            return
        value = self.var()
        self.emit(depth, f"if isinstance({var}, tuple) and len({var}) == 2:")
        self.emit(depth + 1, f"{value} = {var}[1]")
        test = "if"
        for name, branch, holds in records:
            if holds:
                self.emit(depth + 1, f"{test} {var}[0] == {name!r}:")
                self.node(branch, value, path, depth + 2, expanding)
                test = "elif"
        if len(records) == 1:
            self.emit(depth, "else:")
            self.node(records[0][1], var, path, depth + 1, expanding)


def range_check(schema: Mapping[str, Any], kinds: Iterable[str] = ("int", "long")) -> RangeCheck | None:
    """A check of every field of `schema` whose type is one of `kinds` (None when it has none).

    Raises `IntegerOutOfRange` naming the first field found outside its type's range.
    """
    return _RangeCheckSource(schema, kinds).function()


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
    TaskDifficulty,
    TaskReviewed,
    DeadLetter,
    EpisodeState,
    *CONTROL_TYPES,
    CanaryGraded,
    Alert,
    StepGraded,
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
        # Only `int` fields are checked on every encode: fastavro writes any Python int there without a word.
        # A `long` past 64 bits it refuses itself (OverflowError); the full check then names the field.
        self._int_checks: dict[str, RangeCheck | None] = {}
        self._range_checks: dict[str, RangeCheck | None] = {}
        self._plans: dict[bytes, _ReadPlan] = {}
        for name in catalog.names():
            current = catalog.current(name)
            self._writers[name] = (MAGIC + current.fingerprint, current.parsed)
            self._int_checks[name] = range_check(current.parsed, ("int",))
            self._range_checks[name] = range_check(current.parsed)
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
        check_ints = self._int_checks[name]
        try:
            if check_ints is not None:
                check_ints(record)
        except IntegerOutOfRange as exc:
            raise IntegerOutOfRange(exc.path, exc.value, exc.kind, name) from None
        out = BytesIO()
        out.write(header)
        try:
            schemaless_writer(out, schema, record)
        except (TypeError, ValueError, KeyError, AttributeError, OverflowError) as exc:
            too_large = self._out_of_range(name, record)
            if too_large is not None:
                raise too_large from exc
            raise EncodeError(f"{name}: {exc}") from exc
        return out.getvalue()

    def _out_of_range(self, name: str, record: Mapping[str, Any]) -> IntegerOutOfRange | None:
        """Why fastavro refused `record`, when the reason is an integer too large for its field."""
        check = self._range_checks[name]
        try:
            if check is not None:
                check(record)
        except IntegerOutOfRange as exc:
            return IntegerOutOfRange(exc.path, exc.value, exc.kind, name)
        except Exception:  # a record fastavro refused may trip the check too; fastavro's reason stands
            return None
        return None

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
