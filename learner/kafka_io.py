"""The learner's Kafka side: the trajectories it reads (`Feed`, `KafkaFeed`: every partition of the run's
`trajectories.completed` from the checkpointed offsets, no consumer group) turned into planner inputs
(`inputs`), the run's control log it obeys (`ControlFeed`, `KafkaControlFeed`: `run.control` from its
beginning at every start, then what came since at every poll; `MemoryControlFeed` for tests), and the
versions it announces on `policy.versions` (`KafkaAnnouncer`).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from typing import NamedTuple, Protocol

from learner.state import Arrival, Input, Position, Unreadable
from schemas.codec import Codec, DecodeError, default_codec
from schemas.origin import Clock
from schemas.publications import PolicyPublished
from schemas.topics import POLICY_VERSIONS, PROGRESS_RESULTS, RUN_CONTROL, TRAJECTORIES_COMPLETED
from schemas.trajectories import TrajectoryCompleted

log = logging.getLogger(__name__)
SEND_TIMEOUT_S = 60.0


class Polled(NamedTuple):
    """A consumed record: where it was read, its value, its Kafka headers (the owner's `traceparent`)."""

    position: Position
    value: bytes | None
    headers: tuple[tuple[str, bytes], ...] = ()


class Feed(Protocol):
    def poll(self, timeout_ms: int) -> list[Polled]: ...


def inputs(
    records: Iterable[tuple[Position, bytes | None] | Polled], codec: Codec, clock: Clock
) -> list[Input]:
    """Planner inputs for raw records: a trajectory, or an unreadable record (only its offset counts)."""
    out: list[Input] = []
    for record in records:
        position, value = record[0], record[1]
        trajectory = _decoded(value, codec)
        if trajectory is None:
            log.warning("unreadable record at %s", position)
            out.append(Unreadable(position))
        else:
            out.append(Arrival(trajectory, position, clock.now_us()))
    return out


def _decoded(value: bytes | None, codec: Codec) -> TrajectoryCompleted | None:
    if value is None:
        return None
    try:
        return codec.decode_as(value, TrajectoryCompleted)
    except DecodeError:
        return None


class KafkaFeed:
    """Every partition of the run's `trajectories.completed`, from the planner's offsets (or the start)."""

    def __init__(self, bootstrap: str, run: str, offsets: Mapping[tuple[str, int], int]) -> None:
        from kafka import TopicPartition

        from streams.kafka import clients

        self.topic = TRAJECTORIES_COMPLETED.of(run)
        self._consumer = clients.consumer(bootstrap, enable_auto_commit=False, auto_offset_reset="earliest")
        partitions = self._consumer.partitions_for_topic(self.topic)
        if not partitions:
            raise RuntimeError(f"topic {self.topic} does not exist (create the run's topics first)")
        assigned = [TopicPartition(self.topic, p) for p in sorted(partitions)]
        self._consumer.assign(assigned)
        for tp in assigned:
            offset = offsets.get((self.topic, tp.partition))
            if offset is None:
                self._consumer.seek_to_beginning(tp)
            else:
                self._consumer.seek(tp, offset)

    def poll(self, timeout_ms: int) -> list[Polled]:
        polled = self._consumer.poll(timeout_ms=timeout_ms)
        return [
            Polled(Position(r.topic, r.partition, r.offset), r.value, tuple(r.headers or ()))
            for records in polled.values()
            for r in records
        ]

    def close(self) -> None:
        self._consumer.close()


class ControlFeed(Protocol):
    def poll(self) -> list[object]:
        """The decoded records of `run.control` that came since the last poll (the first: all of them).
        Raises `KafkaError` when they cannot be read now."""
        ...


class MemoryControlFeed:
    """A control log in memory: `append` records, `poll` hands out the new ones."""

    def __init__(self, records: Iterable[object] = ()) -> None:
        self.records: list[object] = list(records)
        self._read = 0

    def append(self, *records: object) -> None:
        self.records.extend(records)

    def poll(self) -> list[object]:
        new, self._read = self.records[self._read :], len(self.records)
        return new


class CatchUpFeed:
    """A small topic read from its beginning, then caught up at every poll: every decoded record since the
    last poll. Records read before an error are kept for the next poll (the reader has gone past them)."""

    def __init__(self, bootstrap: str, topic: str, client_id: str, read_timeout_s: float = 10.0) -> None:
        from streams.kafka.reader import LogReader, ReadError

        self.topic = topic
        self.read_timeout_s = read_timeout_s
        self._unreturned: list[object] = []
        try:
            self._reader = LogReader(bootstrap, [topic], require_topics=True, client_id=client_id)
        except ReadError as exc:
            raise RuntimeError(f"{exc} (create the run's topics first)") from None

    def poll(self) -> list[object]:
        from kafka.errors import KafkaTimeoutError

        from streams.kafka.reader import ReadError, decoded

        read = self._unreturned
        try:
            for _topic, value in decoded(self._reader.to_end(timeout_s=self.read_timeout_s)):
                read.append(value)
        except ReadError as exc:
            raise KafkaTimeoutError(str(exc)) from None
        self._unreturned = []
        return read

    def close(self) -> None:
        self._reader.close()


class KafkaControlFeed(CatchUpFeed):
    """The run's `run.control` (one partition): small (a pin, pauses, rules, clearances), and the whole of
    it is what the learner obeys; it takes in no trajectory until it has the control log up to its end."""

    def __init__(self, bootstrap: str, run: str, read_timeout_s: float = 10.0) -> None:
        super().__init__(bootstrap, RUN_CONTROL.of(run), "trialog-learner", read_timeout_s)


class KafkaProgressFeed(CatchUpFeed):
    """The run's `progress.results` (process grades). Read whole after a restart: the learner keeps every
    grade until the episode it belongs to is trained, the oldest episodes' dropped past a bound
    (`learner.learner.MAX_GRADED_EPISODES`)."""

    def __init__(self, bootstrap: str, run: str, read_timeout_s: float = 10.0) -> None:
        super().__init__(bootstrap, PROGRESS_RESULTS.of(run), "trialog-progress", read_timeout_s)


class KafkaAnnouncer:
    """`policy.versions` of the run: announcements are sent with acks=all and waited for."""

    def __init__(self, bootstrap: str, run: str, codec: Codec | None = None) -> None:
        from actors.rollout.weights import KafkaPublications
        from streams.kafka import clients

        self.codec = codec or default_codec()
        self.topic = POLICY_VERSIONS.of(run)
        self._reader = KafkaPublications(bootstrap, run, self.codec)
        self._producer = clients.producer(bootstrap)
        self._versions: dict[str, set[int]] = {}

    def announced_versions(self, run_id: str) -> set[int]:
        """Versions announced for `run_id`; a malformed announcement (`implausible`: version < 1, a broken
        base or blob reference) is not one the learner made, and must not stop it announcing that version."""
        from actors.rollout.weights import implausible

        for published in self._reader.poll():
            if (reason := implausible(published)) is not None:
                log.warning("ignoring an announcement of version %d on %s: %s", published.version, self.topic,
                            reason)  # fmt: skip
                continue
            self._versions.setdefault(published.run_id, set()).add(published.version)
        return set(self._versions.get(run_id, set()))

    def announce(self, published: PolicyPublished) -> None:
        self._producer.send(self.topic, value=self.codec.encode(published)).get(SEND_TIMEOUT_S)
        self._versions.setdefault(published.run_id, set()).add(published.version)

    def close(self) -> None:
        self._reader.close()
        self._producer.close()
