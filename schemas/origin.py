"""Where timestamps and ids come from: created once at the source, injected everywhere else.

Decision code (the fold, the codec, the owner's rules) never reads a clock or draws an id. Producers are
given a `Clock` and an `IdSource`; tests and golden logs use the fixed implementations, so a run's records
can be reproduced byte for byte.
"""

from __future__ import annotations

import dataclasses
import time
import uuid
from dataclasses import dataclass
from typing import Protocol

from schemas.common import EventMeta, Producer, RecordMeta


class Clock(Protocol):
    def now_us(self) -> int:
        """Microseconds since the Unix epoch (UTC)."""
        ...


class IdSource(Protocol):
    def new_id(self) -> str: ...


class SystemClock:
    def now_us(self) -> int:
        return time.time_ns() // 1000


class FixedClock:
    """A clock that starts at `start_us` and advances by `step_us` on every reading."""

    def __init__(self, start_us: int = 1_700_000_000_000_000, step_us: int = 1_000) -> None:
        self._next = start_us
        self._step = step_us

    def now_us(self) -> int:
        now, self._next = self._next, self._next + self._step
        return now


class RandomIds:
    def new_id(self) -> str:
        return uuid.uuid4().hex


class SequentialIds:
    """Deterministic ids `<prefix>-000001`, `<prefix>-000002`, ..."""

    def __init__(self, prefix: str = "id") -> None:
        self._prefix = prefix
        self._count = 0

    def new_id(self) -> str:
        self._count += 1
        return f"{self._prefix}-{self._count:06d}"


@dataclass(frozen=True, slots=True)
class Origin:
    """A producer's identity with its clock and id source: stamps the headers of the records it creates."""

    producer: Producer
    clock: Clock
    ids: IdSource

    @classmethod
    def system(cls, kind: str, instance: str) -> Origin:
        return cls(Producer(kind, instance), SystemClock(), RandomIds())

    def record_meta(self, traceparent: str | None = None) -> RecordMeta:
        return RecordMeta(self.ids.new_id(), self.clock.now_us(), self.producer, traceparent)

    def event_meta(
        self,
        *,
        run_id: str,
        episode_id: str,
        task_id: str,
        task_version: str,
        step: int,
        attempt: int,
        policy_version: int,
        prev_hash: str,
        snapshot_id: str | None = None,
        traceparent: str | None = None,
    ) -> EventMeta:
        return EventMeta(
            event_id=self.ids.new_id(),
            occurred_at_us=self.clock.now_us(),
            producer=self.producer,
            run_id=run_id,
            episode_id=episode_id,
            task_id=task_id,
            task_version=task_version,
            step=step,
            attempt=attempt,
            policy_version=policy_version,
            snapshot_id=snapshot_id,
            prev_hash=prev_hash,
            traceparent=traceparent,
        )

    def reply_meta(self, request: EventMeta) -> EventMeta:
        """Header of an answer to `request`: same episode, step, attempt and chain head (`prev_hash`), so the
        owner can check it against its state; a new id, time and producer. Callers replace what they know
        better (the policy version that sampled, the snapshot taken)."""
        return dataclasses.replace(
            request, event_id=self.ids.new_id(), occurred_at_us=self.clock.now_us(), producer=self.producer
        )
