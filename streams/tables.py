"""What the streams worker keeps: the `episodes` table row codec and the tasks it knows.

A row of the `episodes` table is an `OwnerState` plus two numbers the crash recovery needs (see
`streams.worker`): the partition the episode lives on and the offset on `episode.events` of the last
event appended for it. The folded episode is stored as its `EpisodeSnapshot` record (Avro single-object
bytes: schema-checked and upcast like any record); the owner's extras (task, sampling, outstanding
request) are small and stored as JSON next to it. The row is versioned (`"v"`).

`TaskCache` is the tasks table: every worker reads the whole compacted `tasks` topic (it is small and has
one partition, so it cannot be co-partitioned with the episodes) and catches up on a miss, so a task
published before a StartEpisode is always seen. Since v2 `TaskPublished` carries the task's quotas and the
snapshot of its repo/ (the first step's restore point); a v1 record gets `ResourceLimits()` defaults and
`initial_snapshot_id=None` (an empty workspace).
"""

from __future__ import annotations

import base64
import json
import logging
from dataclasses import dataclass
from typing import Any

from schemas.codec import DecodeError, default_codec
from schemas.publications import TaskPublished
from schemas.requests import ResourceLimits, SamplingParams
from schemas.state import EpisodeState
from streams.owner import OwnerState, TaskInfo

log = logging.getLogger(__name__)

ROW_VERSION = 1


@dataclass(frozen=True, slots=True)
class Row:
    """One episode's row: the owner state, its partition and the offset of its last appended event."""

    state: OwnerState
    partition: int
    log_offset: int = -1  # -1: nothing appended yet

    def encode(self) -> bytes:
        rec = self.state.to_record()
        body: dict[str, Any] = {
            "v": ROW_VERSION,
            "partition": self.partition,
            "log_offset": self.log_offset,
            "episode": base64.b64encode(default_codec().encode(self.state.episode)).decode("ascii"),
            "task": rec["task"],
            "sampling": rec["sampling"],
            "outstanding": rec["outstanding"],
        }
        return json.dumps(body, sort_keys=True, separators=(",", ":")).encode()

    @classmethod
    def decode(cls, data: bytes) -> Row:
        body = json.loads(data)
        if body.get("v") != ROW_VERSION:
            raise ValueError(f"episodes row version {body.get('v')!r} is not {ROW_VERSION}")
        episode = default_codec().decode(base64.b64decode(body["episode"]))
        if not isinstance(episode, EpisodeState):
            raise ValueError(f"episodes row holds a {type(episode).__name__}, not an EpisodeSnapshot")
        rec = {**body, "episode": episode.to_record()}
        return cls(OwnerState.from_record(rec), body["partition"], body["log_offset"])


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
        self._consumer: Any = None

    def _open(self) -> Any:
        if self._consumer is None:
            from kafka import KafkaConsumer, TopicPartition

            consumer = KafkaConsumer(bootstrap_servers=self.bootstrap, enable_auto_commit=False)
            parts = consumer.partitions_for_topic(self.topic) or {0}
            consumer.assign([TopicPartition(self.topic, p) for p in sorted(parts)])
            consumer.seek_to_beginning()
            self._consumer = consumer
        return self._consumer

    def catch_up(self) -> int:
        """Read the topic up to its current end; returns how many records were read."""
        consumer = self._open()
        assigned = consumer.assignment()
        ends = consumer.end_offsets(list(assigned))
        seen = 0
        while any(consumer.position(tp) < ends[tp] for tp in assigned):
            for records in consumer.poll(timeout_ms=500).values():
                for record in records:
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
        if self._consumer is not None:
            self._consumer.close()
            self._consumer = None


def sampling_for(seed: int) -> SamplingParams:
    return SamplingParams(seed=seed)
