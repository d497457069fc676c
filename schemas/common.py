"""Parts shared by many records: headers, bounded outputs, episode limits and the verdict/failure classes."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any, ClassVar

from schemas.blobs import TEXT_PLAIN, BlobRef, ObjectStore
from schemas.record import AvroDict, from_optional, optional

GENESIS_HASH = "0" * 64
"""prev_hash of the first event of an episode: there is no previous event."""


class Verdict(StrEnum):
    PASS = "pass"
    PARTIAL = "partial"
    FAIL = "fail"
    BUILD_FAILED = "build_failed"
    TAMPERED = "tampered"
    ERROR = "error"


class FailureClass(StrEnum):
    POLICY_TIMEOUT = "policy_timeout"
    SANDBOX_TIMEOUT = "sandbox_timeout"
    SANDBOX_CRASH = "sandbox_crash"
    INVALID_ACTION = "invalid_action"
    INVALID_TASK = "invalid_task"
    VERIFIER_ERROR = "verifier_error"
    STEP_LIMIT = "step_limit"
    ABORTED = "aborted"
    OTHER = "other"


@dataclass(frozen=True, slots=True)
class Producer:
    SCHEMA: ClassVar[str] = "trialog.common.Producer"

    kind: str
    instance: str

    def to_record(self) -> AvroDict:
        return {"kind": self.kind, "instance": self.instance}

    @classmethod
    def from_record(cls, rec: Mapping[str, Any]) -> Producer:
        return cls(rec["kind"], rec["instance"])


@dataclass(frozen=True, slots=True)
class EventMeta:
    """Header of every episode-scoped record (see trialog.common.EventMeta.avsc for each field)."""

    SCHEMA: ClassVar[str] = "trialog.common.EventMeta"

    event_id: str
    occurred_at_us: int
    producer: Producer
    run_id: str
    episode_id: str
    task_id: str
    task_version: str
    step: int
    attempt: int
    policy_version: int
    snapshot_id: str | None
    prev_hash: str
    traceparent: str | None = None

    def to_record(self) -> AvroDict:
        return {
            "event_id": self.event_id,
            "occurred_at_us": self.occurred_at_us,
            "producer": self.producer.to_record(),
            "run_id": self.run_id,
            "episode_id": self.episode_id,
            "task_id": self.task_id,
            "task_version": self.task_version,
            "step": self.step,
            "attempt": self.attempt,
            "policy_version": self.policy_version,
            "snapshot_id": self.snapshot_id,
            "prev_hash": self.prev_hash,
            "traceparent": self.traceparent,
        }

    @classmethod
    def from_record(cls, rec: Mapping[str, Any]) -> EventMeta:
        return cls(
            rec["event_id"],
            rec["occurred_at_us"],
            Producer.from_record(rec["producer"]),
            rec["run_id"],
            rec["episode_id"],
            rec["task_id"],
            rec["task_version"],
            rec["step"],
            rec["attempt"],
            rec["policy_version"],
            rec["snapshot_id"],
            rec["prev_hash"],
            rec["traceparent"],
        )


@dataclass(frozen=True, slots=True)
class RecordMeta:
    """Header of records not tied to an episode step (commands, publications, dead letters)."""

    SCHEMA: ClassVar[str] = "trialog.common.RecordMeta"

    event_id: str
    occurred_at_us: int
    producer: Producer
    traceparent: str | None = None

    def to_record(self) -> AvroDict:
        return {
            "event_id": self.event_id,
            "occurred_at_us": self.occurred_at_us,
            "producer": self.producer.to_record(),
            "traceparent": self.traceparent,
        }

    @classmethod
    def from_record(cls, rec: Mapping[str, Any]) -> RecordMeta:
        return cls(
            rec["event_id"], rec["occurred_at_us"], Producer.from_record(rec["producer"]), rec["traceparent"]
        )


@dataclass(frozen=True, slots=True)
class Output:
    """A bounded capture of a text stream; the whole stream may sit in the object store."""

    SCHEMA: ClassVar[str] = "trialog.common.Output"

    text: str
    truncated: bool = False
    total_bytes: int = 0
    full: BlobRef | None = None

    @classmethod
    def capture(cls, data: bytes, limit: int, store: ObjectStore | None = None) -> Output:
        """Keep the first `limit` bytes inline (at most `limit` bytes of UTF-8 text, replacement characters
        counted); with a store, keep the whole stream there when cut."""
        truncated = len(data) > limit
        full = store.put(data, TEXT_PLAIN) if truncated and store is not None else None
        text = data[:limit].decode("utf-8", "replace")
        encoded = text.encode("utf-8")
        if len(encoded) > limit:  # each invalid byte became U+FFFD, three bytes: keep `limit` on the wire
            text, truncated = encoded[:limit].decode("utf-8", "ignore"), True
        return cls(text, truncated, len(data), full)

    def to_record(self) -> AvroDict:
        return {
            "text": self.text,
            "truncated": self.truncated,
            "total_bytes": self.total_bytes,
            "full": optional(self.full),
        }

    @classmethod
    def from_record(cls, rec: Mapping[str, Any]) -> Output:
        return cls(
            rec["text"], rec["truncated"], rec["total_bytes"], from_optional(rec["full"], BlobRef.from_record)
        )


@dataclass(frozen=True, slots=True)
class EpisodeConfig:
    SCHEMA: ClassVar[str] = "trialog.common.EpisodeConfig"

    max_steps: int
    max_attempts: int = 3
    policy_timeout_s: float = 120.0
    sandbox_timeout_s: float = 60.0
    verify_timeout_s: float = 600.0
    output_limit_bytes: int = 16384

    def to_record(self) -> AvroDict:
        return {
            "max_steps": self.max_steps,
            "max_attempts": self.max_attempts,
            "policy_timeout_s": self.policy_timeout_s,
            "sandbox_timeout_s": self.sandbox_timeout_s,
            "verify_timeout_s": self.verify_timeout_s,
            "output_limit_bytes": self.output_limit_bytes,
        }

    @classmethod
    def from_record(cls, rec: Mapping[str, Any]) -> EpisodeConfig:
        return cls(
            rec["max_steps"],
            rec["max_attempts"],
            rec["policy_timeout_s"],
            rec["sandbox_timeout_s"],
            rec["verify_timeout_s"],
            rec["output_limit_bytes"],
        )
