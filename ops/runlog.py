"""A run read back from its topics: records from Kafka (the adapter) and their decoded, per-episode view.

`read_topics` is the one Kafka reader of the audit side (`audit`, `replay`, `reproduce`, `report`): one
consumer without a group (nothing is committed), every partition of the named topics assigned by hand, read
from the beginning, or from the first record at or after a timestamp (`offsets_for_times`), up to the end
offsets taken when reading starts (records appended meanwhile are left for the next reading).

`LoggedRun.collect` is pure: records in, each episode's events in log order (with the trajectory published
for it), the tasks the run published (by id and version) and the policy versions, out. A run can be
audited on a machine that never ran it: this and the object store are all the audit side reads.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from ops.audit import LogRecord
from schemas.codec import Codec, DecodeError, default_codec
from schemas.events import (
    EPISODE_EVENT_TYPES,
    ActionProposed,
    EpisodeCompleted,
    EpisodeEvent,
    EpisodeFailed,
    EpisodeStarted,
    RewardAssigned,
    StepExecuted,
)
from schemas.publications import PolicyPublished, TaskPublished
from schemas.trajectories import TrajectoryCompleted, TrajectoryFailed
from streams.kafka.topics import topic_name

EVENTS = "episode.events"
TASKS = "tasks"
POLICY_VERSIONS = "policy.versions"
TRAJECTORIES = ("trajectories.completed", "trajectories.failed")


class LogReadError(Exception):
    """The run's topics could not be read (Kafka unreachable, a topic missing, silence past the timeout)."""


# -- reading (Kafka) --------------------------------------------------------------------------------------


def read_topics(
    bootstrap: str,
    run: str,
    bases: Sequence[str],
    *,
    timeout_s: float = 60.0,
    since_ms: int | None = None,
    progress: Callable[[int, int], None] | None = None,
) -> Iterator[LogRecord]:
    """Every record of the run's topics `bases` (base names), each partition in offset order, from the
    beginning (or from the first record at or after `since_ms`, ms since the epoch) to the end offsets at
    the start. Raises `LogReadError` when Kafka cannot be reached or a topic is missing."""
    from kafka import KafkaConsumer
    from kafka.errors import KafkaError

    names = {topic_name(run, base): base for base in bases}
    try:
        consumer = KafkaConsumer(
            bootstrap_servers=bootstrap,
            group_id=None,
            enable_auto_commit=False,
            client_id="trialog-audit",
            request_timeout_ms=30_000,
            # A shorter --timeout bounds the wait for a broker as well (a broker that accepts connections
            # but never answers would otherwise hold the command for the full 10 s).
            bootstrap_timeout_ms=int(min(10.0, timeout_s) * 1000),
        )
    except KafkaError as exc:
        raise LogReadError(f"cannot reach Kafka at {bootstrap}: {exc!r}") from exc
    try:
        partitions = _assign(consumer, names, run, bootstrap)
        begin = _begin_offsets(consumer, partitions, since_ms)
        end: dict[Any, int] = consumer.end_offsets(partitions)
        for tp in partitions:
            consumer.seek(tp, begin[tp])
        yield from _drain(consumer, names, begin, end, timeout_s, bootstrap, progress)
    finally:
        consumer.close()


def _assign(consumer: Any, names: dict[str, str], run: str, bootstrap: str) -> list[Any]:
    from kafka import TopicPartition
    from kafka.errors import KafkaError

    try:
        existing = consumer.topics()
    except KafkaError as exc:
        raise LogReadError(f"cannot list the topics on {bootstrap}: {exc!r}") from exc
    missing = sorted(name for name in names if name not in existing)
    if missing:
        what = "none of its topics exist" if len(missing) == len(names) else f"missing {', '.join(missing)}"
        raise LogReadError(f"run {run!r} on {bootstrap}: {what} (is the run name right?)")
    partitions = [
        TopicPartition(name, partition)
        for name in names
        for partition in sorted(consumer.partitions_for_topic(name) or ())
    ]
    consumer.assign(partitions)
    return partitions


def _begin_offsets(consumer: Any, partitions: list[Any], since_ms: int | None) -> dict[Any, int]:
    begin: dict[Any, int] = consumer.beginning_offsets(partitions)
    if since_ms is None:
        return begin
    found = consumer.offsets_for_times({tp: since_ms for tp in partitions})
    end: dict[Any, int] = consumer.end_offsets(partitions)
    # No record at or after the time on a partition: nothing of it is read.
    return {tp: (found[tp].offset if found.get(tp) is not None else end[tp]) for tp in partitions}


def _drain(
    consumer: Any,
    names: dict[str, str],
    begin: dict[Any, int],
    end: dict[Any, int],
    timeout_s: float,
    bootstrap: str,
    progress: Callable[[int, int], None] | None,
) -> Iterator[LogRecord]:
    total = sum(max(end[tp] - begin[tp], 0) for tp in begin)
    pending = {tp for tp in begin if end[tp] > begin[tp]}
    for tp in set(begin) - pending:
        consumer.pause(tp)
    done = 0
    if progress is not None:
        progress(done, total)
    quiet_since = time.monotonic()
    while pending:
        batches = consumer.poll(timeout_ms=500, max_records=5_000)
        for tp, batch in batches.items():
            for message in batch:
                if message.offset >= end[tp]:
                    continue  # appended after the reading started
                done += 1
                yield LogRecord(
                    names[tp.topic],
                    tp.partition,
                    message.offset,
                    message.key,
                    message.value,
                    message.timestamp,
                )
        for tp in list(pending):
            if consumer.position(tp) >= end[tp]:
                pending.discard(tp)
                consumer.pause(tp)
        if batches:
            quiet_since = time.monotonic()
        elif time.monotonic() - quiet_since > timeout_s:
            left = ", ".join(f"{tp.topic}[{tp.partition}]" for tp in sorted(pending))
            raise LogReadError(f"no records for {timeout_s:g} s while reading {left} on {bootstrap}")
        if progress is not None:
            progress(done, total)


# -- the decoded view (pure) ------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class LoggedEvent:
    """An episode event with where it was read and its exact bytes (the chain hashes them)."""

    event: EpisodeEvent
    record: LogRecord

    @property
    def data(self) -> bytes:
        return self.record.value or b""


@dataclass
class EpisodeLog:
    episode_id: str
    events: list[LoggedEvent] = field(default_factory=list)
    trajectory: TrajectoryCompleted | TrajectoryFailed | None = None

    def _first(self, kind: type[Any]) -> Any:
        return next((e.event for e in self.events if isinstance(e.event, kind)), None)

    @property
    def started(self) -> EpisodeStarted | None:
        started: EpisodeStarted | None = self._first(EpisodeStarted)
        return started

    @property
    def reward(self) -> RewardAssigned | None:
        reward: RewardAssigned | None = self._first(RewardAssigned)
        return reward

    @property
    def completed(self) -> EpisodeCompleted | None:
        completed: EpisodeCompleted | None = self._first(EpisodeCompleted)
        return completed

    @property
    def failed(self) -> EpisodeFailed | None:
        failed: EpisodeFailed | None = self._first(EpisodeFailed)
        return failed

    @property
    def actions(self) -> list[ActionProposed]:
        return [e.event for e in self.events if isinstance(e.event, ActionProposed)]

    @property
    def executions(self) -> list[StepExecuted]:
        return [e.event for e in self.events if isinstance(e.event, StepExecuted)]

    @property
    def task(self) -> tuple[str, str] | None:
        """(task id, task version) from any event's header."""
        if not self.events:
            return None
        meta = self.events[0].event.meta
        return meta.task_id, meta.task_version

    @property
    def first_us(self) -> int:
        return min((e.event.meta.occurred_at_us for e in self.events), default=0)

    @property
    def last_us(self) -> int:
        return max((e.event.meta.occurred_at_us for e in self.events), default=0)


@dataclass
class LoggedRun:
    episodes: dict[str, EpisodeLog] = field(default_factory=dict)
    tasks: dict[tuple[str, str], TaskPublished] = field(default_factory=dict)
    policies: list[PolicyPublished] = field(default_factory=list)
    undecodable: int = 0

    @classmethod
    def collect(cls, records: Iterable[LogRecord], codec: Codec | None = None) -> LoggedRun:
        run = cls()
        for record in records:
            run.add(record, codec or default_codec())
        return run

    def episode(self, episode_id: str) -> EpisodeLog:
        if episode_id not in self.episodes:
            self.episodes[episode_id] = EpisodeLog(episode_id)
        return self.episodes[episode_id]

    def add(self, record: LogRecord, codec: Codec) -> None:
        try:
            obj = codec.decode(record.value or b"")
        except DecodeError:
            self.undecodable += 1  # the audit reports these by reason; the views skip them
            return
        if record.topic == EVENTS and isinstance(obj, EPISODE_EVENT_TYPES):
            self.episode(obj.meta.episode_id).events.append(LoggedEvent(obj, record))
        elif record.topic in TRAJECTORIES and isinstance(obj, (TrajectoryCompleted, TrajectoryFailed)):
            episode = self.episode(obj.meta.episode_id)
            episode.trajectory = episode.trajectory or obj  # a repeated publication changes nothing
        elif record.topic == TASKS and isinstance(obj, TaskPublished):
            self.tasks[(obj.task_id, obj.task_version)] = obj
        elif record.topic == POLICY_VERSIONS and isinstance(obj, PolicyPublished):
            self.policies.append(obj)
