"""What the streams worker keeps: the `episodes` table row codec and the tasks it knows.

A row of the `episodes` table is an `OwnerState`, the exact bytes of the episode's events as logged, the
partition the episode lives on, and that partition's *watermark*: an offset of `episode.events`[partition]
such that every event of the partition at or below it was folded into a row written no later than this one
(`streams.worker` explains why a per-partition watermark and not the episode's own last offset).

Row format v2 (`ROW_MAGIC_V2`, then a 4-byte big-endian header length, a JSON header, and each event as a
4-byte length and its bytes): the header holds the owner's extras (task, sampling, outstanding request),
which are small; the episode itself is the fold of the stored events (`schemas.fold.apply`), so a row is
checked by the same fold (ordering, duplicates, hash chain) as the log, and the bytes can be refolded or
audited without a snapshot schema. Rows of format v1 (JSON, the folded `EpisodeSnapshot` record in base64,
`log_offset` of the episode's last event) are still read: their events are re-encoded from the snapshot
(the codec is deterministic; an event logged before its schema's current version is written with the older
version whose digest the chain records; the result is checked against the recorded chain head, and
`tests/golden/rows_v1.json` holds rows the v1 worker wrote) and their
`log_offset` becomes the watermark, which is what it meant for the one-input-at-a-time worker that wrote
v1 rows (each row written right after its own appends, so the highest offset of a partition's rows
covered every earlier event).

`TaskCache` is the tasks table: every worker reads the whole compacted `tasks` topic (it is small and has
one partition, so it cannot be co-partitioned with the episodes) and catches up on a miss, so a task
published before a StartEpisode is always seen. Since v2 `TaskPublished` carries the task's quotas and the
snapshot of its repo/ (the first step's restore point); a v1 record gets `ResourceLimits()` defaults and
`initial_snapshot_id=None` (an empty workspace).
"""

from __future__ import annotations

import base64
import dataclasses
import json
import logging
import struct
from collections.abc import Iterable
from dataclasses import dataclass

from schemas.chain import digest
from schemas.codec import DecodeError, EncodeError, default_codec
from schemas.events import EPISODE_EVENT_TYPES, EpisodeEvent
from schemas.fold import apply
from schemas.publications import TaskPublished
from schemas.requests import ResourceLimits, SamplingParams
from schemas.state import EpisodeState
from streams.kafka.reader import LogReader
from streams.owner import Outstanding, OwnerState, TaskInfo

log = logging.getLogger(__name__)

ROW_VERSION = 2
ROW_MAGIC_V2 = b"TRw2"
_LENGTH = struct.Struct(">I")


@dataclass(frozen=True, slots=True)
class Row:
    """One episode's row: the owner state, the events' logged bytes, its partition and the watermark."""

    state: OwnerState
    partition: int
    watermark: int = -1  # -1: nothing of the partition is known to be folded
    events: tuple[bytes, ...] = ()

    def encode(self) -> bytes:
        state = self.state
        header = {
            "v": ROW_VERSION,
            "episode_id": state.episode.episode_id,
            "partition": self.partition,
            "watermark": self.watermark,
            "task": None if state.task is None else state.task.to_record(),
            "sampling": state.sampling.to_record(),
            "outstanding": None if state.outstanding is None else state.outstanding.to_record(),
        }
        head = json.dumps(header, sort_keys=True, separators=(",", ":")).encode()
        parts = [ROW_MAGIC_V2, _LENGTH.pack(len(head)), head]
        for data in self.events:
            parts += (_LENGTH.pack(len(data)), data)
        return b"".join(parts)

    @classmethod
    def decode(cls, data: bytes) -> Row:
        if data.startswith(ROW_MAGIC_V2):
            return _decode_v2(data)
        return _decode_v1(data)


def _decode_v2(data: bytes) -> Row:
    view = memoryview(data)
    at = len(ROW_MAGIC_V2)
    (size,) = _LENGTH.unpack_from(view, at)
    header = json.loads(bytes(view[at + 4 : at + 4 + size]))
    at += 4 + size
    events: list[bytes] = []
    while at < len(view):
        (size,) = _LENGTH.unpack_from(view, at)
        events.append(bytes(view[at + 4 : at + 4 + size]))
        at += 4 + size
    if at != len(view):
        raise ValueError("episodes row v2 is truncated")
    codec = default_codec()
    episode = EpisodeState.new(header["episode_id"])
    for event_bytes in events:
        event = codec.decode(event_bytes)
        if not isinstance(event, EPISODE_EVENT_TYPES):
            raise ValueError(f"episodes row holds a {type(event).__name__}, not an episode event")
        episode = apply(episode, event, digest(event_bytes))
    task, outstanding = header["task"], header["outstanding"]
    state = OwnerState(
        episode,
        None if task is None else TaskInfo.from_record(task),
        SamplingParams.from_record(header["sampling"]),
        None if outstanding is None else Outstanding.from_record(outstanding),
        sum(map(len, events)),
    )
    return Row(state, header["partition"], header["watermark"], tuple(events))


def _decode_v1(data: bytes) -> Row:
    """A row of format v1: the episode as an `EpisodeSnapshot` record and the offset of its last event."""
    body = json.loads(data)
    if body.get("v") != 1:
        raise ValueError(f"episodes row version {body.get('v')!r} is unknown")
    episode = default_codec().decode(base64.b64decode(body["episode"]))
    if not isinstance(episode, EpisodeState):
        raise ValueError(f"episodes row holds a {type(episode).__name__}, not an EpisodeSnapshot")
    rec = {**body, "episode": episode.to_record()}
    events = _logged_bytes(episode)
    state = dataclasses.replace(OwnerState.from_record(rec), logged_bytes=sum(map(len, events)))
    return Row(state, body["partition"], body["log_offset"], events)


def _logged_bytes(episode: EpisodeState) -> tuple[bytes, ...]:
    """The events of a folded episode as they were logged: re-encoded in chain order, each link checked."""
    ordered: list[EpisodeEvent] = [] if episode.started is None else [episode.started]
    for step in episode.history:
        ordered.append(step.action)
        if step.result is not None:
            ordered.append(step.result)
    ordered += [e for e in (episode.pending_action, episode.reward, episode.outcome) if e is not None]
    links = [event.meta.prev_hash for event in ordered[1:]] + ([episode.head_hash] if ordered else [])
    encoded = [_as_logged(event, link) for event, link in zip(ordered, links, strict=True)]
    return _checked_chain(episode, encoded, ordered)


def _as_logged(event: EpisodeEvent, link: str | None) -> bytes:
    """The event's bytes as they were logged, found by the digest `link` the chain records for them: today's
    encoding, or that of an older version of its schema for an event logged before the current one (an
    ActionProposed v1 of a v1 row); none matching: today's (`_checked_chain` then refuses the row)."""
    codec = default_codec()
    current = codec.encode(event)
    if digest(current) == link:
        return current
    for version in reversed(codec.catalog.versions(event.SCHEMA)):
        try:
            data = codec.encode_at(event, version.version)
        except EncodeError:
            continue
        if digest(data) == link:
            return data
    return current


def _checked_chain(
    episode: EpisodeState, encoded: list[bytes], ordered: Iterable[EpisodeEvent]
) -> tuple[bytes, ...]:
    head = None
    for data, event in zip(encoded, ordered, strict=True):
        if head is not None and event.meta.prev_hash != head:
            raise ValueError(f"episodes row v1 of {episode.episode_id}: re-encoded events do not chain")
        head = digest(data)
    if encoded and head != episode.head_hash:
        raise ValueError(f"episodes row v1 of {episode.episode_id}: re-encoded events miss the chain head")
    return tuple(encoded)


def task_info(published: TaskPublished) -> TaskInfo:
    """The owner's view of a published task (a v1 record has no limits or initial snapshot: defaults)."""
    return TaskInfo(
        published.task_id,
        published.task_version,
        published.instruction,
        published.image,
        published.timeout_s,
        published.limits or ResourceLimits(),
        published.initial_snapshot_id,
    )


class TaskCache:
    """Task id -> TaskInfo, filled from the compacted `tasks` topic (kafka-python; call from one thread)."""

    def __init__(self, bootstrap: str, topic: str) -> None:
        self.bootstrap = bootstrap
        self.topic = topic
        self.tasks: dict[str, TaskInfo] = {}
        self._reader: LogReader | None = None

    def catch_up(self) -> int:
        """Read the topic up to its current end (from where the last call stopped); returns how many
        records were read."""
        if self._reader is None:
            self._reader = LogReader(self.bootstrap, [self.topic])
        seen = 0
        for record in self._reader.to_end():
            seen += 1
            self.add(record.value)
        return seen

    def add(self, value: bytes | None) -> None:
        if value is None:
            return
        try:
            record = default_codec().decode(value)
        except DecodeError as exc:
            log.warning("tasks: undecodable record (%s)", exc.reason)
            return
        if isinstance(record, TaskPublished):
            self.tasks[record.task_id] = task_info(record)

    def get(self, task_id: str, *, refresh: bool = True) -> TaskInfo | None:
        if task_id not in self.tasks and refresh:
            self.catch_up()
        return self.tasks.get(task_id)

    def close(self) -> None:
        if self._reader is not None:
            self._reader.close()
            self._reader = None


def sampling_for(seed: int, run: SamplingParams | None = None) -> SamplingParams:
    """An episode's sampling parameters: the run's, with the episode's own seed."""
    return SamplingParams(seed=seed) if run is None else dataclasses.replace(run, seed=seed)
