"""A run read back from its topics: records from Kafka (the adapter) and their decoded, per-episode view.

`read_topics` is the Kafka reader of the audit side (`audit`, `replay`, `reproduce`, `report`): the run's
topics by base name over `streams.kafka.reader.LogReader` (no group, nothing committed, every partition),
from the beginning or from the first record at or after a timestamp, up to the end offsets taken when
reading starts (records appended meanwhile are left for the next reading).

`LoggedRun.collect` is pure: records in, each episode's events in log order (with the trajectory published
for it), the tasks the run published (by id and version) and the policy versions, out. A run can be
audited on a machine that never ran it: this and the object store are all the audit side reads.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from ops.audit import LogRecord
from schemas import topics
from schemas.alerts import Alert
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
from schemas.topics import topic_name
from schemas.trajectories import TrajectoryCompleted, TrajectoryFailed
from streams.kafka.reader import LogReader, ReadError

# Base names (a `LogRecord` names its topic by the base name, whatever the run).
EVENTS = topics.EPISODE_EVENTS.name
TASKS = topics.TASKS.name
POLICY_VERSIONS = topics.POLICY_VERSIONS.name
TRAJECTORIES = tuple(topic.name for topic in topics.TRAJECTORIES)
ALERTS = topics.ALERTS.name


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
    from kafka.errors import KafkaError

    names = {topic_name(run, base): base for base in bases}
    try:
        reader = LogReader(
            bootstrap,
            list(names),
            since_ms=since_ms,
            require_topics=True,
            client_id="trialog-audit",
            # A shorter --timeout bounds the wait for a broker as well (a broker that accepts connections
            # but never answers would otherwise hold the command for the full 10 s).
            connect_timeout_s=min(10.0, timeout_s),
        )
    except KafkaError as exc:
        raise LogReadError(f"cannot reach Kafka at {bootstrap}: {exc!r}") from exc
    except ReadError as exc:
        raise LogReadError(f"run {run!r}: {exc} (is the run name right?)") from exc
    try:
        for message in reader.to_end(timeout_s=timeout_s, progress=progress):
            yield LogRecord(
                names[message.topic],
                message.partition,
                message.offset,
                message.key,
                message.value,
                message.timestamp,
                tuple(message.headers or ()),
            )
    except ReadError as exc:
        raise LogReadError(str(exc)) from exc
    finally:
        reader.close()


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
    alerts: dict[str, Alert] = field(default_factory=dict)  # alert id -> alert, in the order written
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
        elif record.topic == ALERTS and isinstance(obj, Alert):
            self.alerts.setdefault(obj.alert_id, obj)
