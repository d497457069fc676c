"""Reading topics back (kafka-python), outside any consumer group: the given partitions from given offsets
(or the beginning, or a time) up to the end offsets they had when the read started.

One reader for every "read it to its end" of the project: a run's status and log (audit, report, replay),
the scheduler's rebuild, the rollout worker's catch-up on `policy.versions`, the streams worker's task cache,
and the tests. `LogReader` holds its consumer, so `to_end` may be called again to read what came since (a
catch-up); `read_records` is one read; `read_to_end` decodes on top. A live tail that waits for new records
(the scheduler's follow, a serving loop) is a consumer of its own, not this: it has no end to reach.

Each record is yielded once, in offset order per partition, even when the consumer fetches an offset again
(a broker restart rewinds a fetch position): a record below a partition's next offset is skipped.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from types import TracebackType
from typing import Any

from schemas.codec import DecodeError, default_codec

log = logging.getLogger(__name__)

POLL_MS = 500
MAX_RECORDS = 5_000
DEFAULT_TIMEOUT_S = 60.0


class ReadError(Exception):
    """The topics could not be read: a topic missing, or silence past the timeout while records were still
    due. (Kafka unreachable is kafka-python's `KafkaError`, as for any client: callers that retry on it
    need not tell a reader apart.)"""


def assign_all(consumer: Any, topics: Sequence[str]) -> list[Any]:
    """Assign every partition of `topics` to `consumer` (no group subscription), at the beginning."""
    from kafka import TopicPartition

    partitions = [
        TopicPartition(topic, partition)
        for topic in topics
        for partition in sorted(consumer.partitions_for_topic(topic) or {0})
    ]
    consumer.assign(partitions)
    consumer.seek_to_beginning(*partitions)
    return partitions


class LogReader:
    """Every partition of `topics`, from `start` (offsets by (topic, partition)), else from the first
    record at or after `since_ms` (ms since the epoch), else from the beginning. `require_topics`: raise
    `ReadError` when a topic does not exist (instead of reading its partition 0, which yields nothing);
    `skip_missing`: leave out a topic that does not exist (a topic newer than the run, e.g. `run.control`)."""

    def __init__(
        self,
        bootstrap: str,
        topics: Sequence[str],
        *,
        start: Mapping[tuple[str, int], int] | None = None,
        since_ms: int | None = None,
        require_topics: bool = False,
        client_id: str = "trialog-reader",
        connect_timeout_s: float = 10.0,
        skip_missing: bool = False,
    ) -> None:
        from streams.kafka import clients

        self.bootstrap = bootstrap
        self.consumer: Any = clients.consumer(
            bootstrap,
            group_id=None,
            enable_auto_commit=False,
            client_id=client_id,
            request_timeout_ms=30_000,
            # How long to wait for a broker that accepts connections but does not answer (a command's shorter
            # --timeout bounds this wait too).
            bootstrap_timeout_ms=int(connect_timeout_s * 1000),
        )
        try:
            if skip_missing:
                existing = self.consumer.topics()
                topics = [name for name in topics if name in existing]
            self.partitions = self._assign(topics, require_topics)
            begin = self._begin(since_ms)
            for tp in self.partitions:
                offset = (start or {}).get((tp.topic, tp.partition), begin[tp])
                self.consumer.seek(tp, max(offset, begin[tp]))  # an offset aged out starts at the oldest kept
            # The next offset to yield per partition: anything below it was yielded already (or skipped).
            self._next: dict[Any, int] = {tp: self.consumer.position(tp) for tp in self.partitions}
        except BaseException:
            self.consumer.close()
            raise

    def _assign(self, topics: Sequence[str], require_topics: bool) -> list[Any]:
        from kafka import TopicPartition
        from kafka.errors import KafkaError

        if require_topics:
            try:
                existing = self.consumer.topics()
            except KafkaError as exc:
                raise ReadError(f"cannot list the topics on {self.bootstrap}: {exc!r}") from exc
            missing = sorted(name for name in topics if name not in existing)
            if missing:
                what = "none of its topics exist" if len(missing) == len(topics) else "missing"
                raise ReadError(f"{what} on {self.bootstrap}: {', '.join(missing)}")
        partitions = [
            TopicPartition(topic, partition)
            for topic in topics
            for partition in sorted(self.consumer.partitions_for_topic(topic) or {0})
        ]
        self.consumer.assign(partitions)
        return partitions

    def _begin(self, since_ms: int | None) -> dict[Any, int]:
        begin: dict[Any, int] = self.consumer.beginning_offsets(self.partitions)
        if since_ms is None:
            return begin
        found = self.consumer.offsets_for_times({tp: since_ms for tp in self.partitions})
        end: dict[Any, int] = self.consumer.end_offsets(self.partitions)
        # No record at or after the time on a partition: nothing of it is read.
        return {tp: (found[tp].offset if found.get(tp) is not None else end[tp]) for tp in self.partitions}

    def to_end(
        self, *, timeout_s: float = DEFAULT_TIMEOUT_S, progress: Callable[[int, int], None] | None = None
    ) -> Iterator[Any]:
        """The records (kafka-python `ConsumerRecord`s) from where the last read stopped up to each
        partition's end offset as it is now. `progress(done, total)` after each poll. Raises `ReadError`
        after `timeout_s` without a record while some are still due."""
        end: dict[Any, int] = self.consumer.end_offsets(self.partitions)
        total = sum(max(end[tp] - self._next[tp], 0) for tp in self.partitions)
        pending = {tp for tp in self.partitions if end[tp] > self._next[tp]}
        self.consumer.resume(*self.partitions)
        self.consumer.pause(*(set(self.partitions) - pending))
        done = 0
        if progress is not None:
            progress(done, total)
        quiet_since = time.monotonic()
        while pending:
            batches = self.consumer.poll(timeout_ms=POLL_MS, max_records=MAX_RECORDS)
            for tp, batch in batches.items():
                for record in batch:
                    if not self._next[tp] <= record.offset < end[tp]:
                        continue  # read already (a fetch again after a broker restart), or appended since
                    self._next[tp] = record.offset + 1
                    done += 1
                    yield record
            for tp in list(pending):
                if self.consumer.position(tp) >= end[tp]:
                    pending.discard(tp)
                    self.consumer.pause(tp)
                    self._next[tp] = max(self._next[tp], end[tp])  # compacted or aborted offsets: none due
                    if self.consumer.position(tp) > self._next[tp]:
                        # Records appended since the read began came with the last fetch and were
                        # passed over: the next read must fetch them again, not start after them.
                        self.consumer.seek(tp, self._next[tp])
            if batches:
                quiet_since = time.monotonic()
            elif time.monotonic() - quiet_since > timeout_s:
                left = ", ".join(f"{tp.topic}[{tp.partition}]" for tp in sorted(pending))
                raise ReadError(f"no records for {timeout_s:g} s while reading {left} on {self.bootstrap}")
            if progress is not None:
                progress(done, total)

    def close(self) -> None:
        self.consumer.close()

    def __enter__(self) -> LogReader:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None
    ) -> None:
        self.close()


def read_records(
    bootstrap: str,
    topics: Sequence[str],
    *,
    start: Mapping[tuple[str, int], int] | None = None,
    since_ms: int | None = None,
    require_topics: bool = False,
    timeout_s: float = DEFAULT_TIMEOUT_S,
    progress: Callable[[int, int], None] | None = None,
    skip_missing: bool = False,
) -> Iterator[Any]:
    """The raw records of `topics` now (one `LogReader.to_end`), each partition in offset order."""
    with LogReader(
        bootstrap, topics, start=start, since_ms=since_ms, require_topics=require_topics,
        skip_missing=skip_missing,
    ) as reader:  # fmt: skip
        yield from reader.to_end(timeout_s=timeout_s, progress=progress)


def decoded(records: Iterator[Any] | Sequence[Any]) -> Iterator[tuple[str, object]]:
    """(topic, record) for each decodable value; others are logged and skipped (reading, not owning)."""
    for record in records:
        if record.value is None:
            continue
        try:
            yield record.topic, default_codec().decode(record.value)
        except DecodeError as exc:
            log.warning("%s[%d]@%d undecodable: %s", record.topic, record.partition, record.offset, exc)


def read_to_end(bootstrap: str, topics: Sequence[str]) -> Iterator[tuple[str, object]]:
    """(topic, decoded record) of everything on `topics` now, in partition order."""
    return decoded(read_records(bootstrap, topics))
