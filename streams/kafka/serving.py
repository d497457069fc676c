"""Serving a request topic: wait for Kafka, consume one record at a time, answer it, commit it, survive a
broker restart. The floor of `streams.kafka.request_loop`, the one loop of the stateless workers (rollout,
sandbox, verifier), which differ only in how they answer a record.

Start-up: `connected` waits for the broker with a growing pause and says so, so a worker started before
Kafka (or during a broker restart) waits instead of crashing.

Serving: when Kafka cannot be reached while a record is answered or its offset committed (a broker restart,
a network blip), the consumer is rewound to that record and the loop waits: the record is served again
once Kafka answers. The answer may then go out twice, which is harmless: the episode's owner accepts one
answer per request key and ignores the repeat.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from kafka.errors import KafkaError
from kafka.structs import OffsetAndMetadata

from schemas.codec import Codec
from schemas.deadletter import DeadLetter
from schemas.origin import Origin
from streams.lifecycle import Health
from streams.telemetry import metrics, tracing

log = logging.getLogger(__name__)
RETRY_S = 1.0
# How often a consumer refreshes its metadata (kafka-python's default is 5 minutes). A group member that
# joined before a new topic's metadata reached it is assigned no partitions of that topic; the refresh
# notices the topic and the group rebalances, so a missed assignment heals within seconds.
METADATA_MAX_AGE_MS = 5_000
SEND_TIMEOUT_S = 60.0
DETAIL_LIMIT = 2000
# The most of a dead-lettered record's value kept in its letter. The letter wraps the value with its own
# fields, so a request near the broker's limit (message.max.bytes, 1 MiB by default) would make a letter
# over it: refused on every retry, the partition stuck behind it. Half the default keeps the letter sendable.
VALUE_LIMIT = 512 * 1024
# Start-up: the first pause between tries, doubled up to the last; each try waits this long for a broker.
CONNECT_FIRST_WAIT_S = 0.5
CONNECT_MAX_WAIT_S = 8.0
CONNECT_TRY_MS = 5_000
# A consumer outside a settled generation this long subscribes afresh (see `serve_requests`).
REJOIN_AFTER_S = 30.0


@dataclass(frozen=True, slots=True)
class LoopSettings:
    """Where a stateless worker's requests come from: the broker, the run, the consumer group, the timings.
    The one settings class of the request-serving loop (rollout, sandbox, verifier)."""

    bootstrap: str
    group_id: str
    run: str = ""  # topic prefix of the run ("" for the bare names)
    poll_timeout_ms: int = 500
    # Longer than one request may take to handle (a sandbox step: timeout + snapshot; a verification: the
    # task's tests), or the group would think this worker dead.
    max_poll_interval_ms: int = 900_000
    # A worker killed without leaving the group holds its partitions this long (heartbeats come from a
    # thread of their own, so a long request does not count). kafka-python's default is 45 s.
    session_timeout_ms: int = 15_000
    # Requests taken per poll and answered together by a worker that batches (the rollout's generation);
    # a worker that does not takes one at a time, so a slow request never holds others back.
    max_batch: int = 1
    # The longest the broker holds a fetch none of whose partitions has data. kafka-python's default
    # (500 ms) delays a request: a fetch names only the partitions without unread records, so a request
    # arriving meanwhile on one that had some waits for it. Measured on an idle consumer here: 10 ms costs
    # 14% of a core in empty fetches, 50 ms 2.9%, 500 ms 0.4%.
    fetch_max_wait_ms: int = 50
    # How long a batching worker holds a batch open for more requests once it has some, until it has
    # `max_batch` (Kafka's linger.ms, for a consumer). Episodes in flight fall into cohorts: the requests
    # that arrive while a batch is generating form the next one, so a rollout serving 8 episodes can keep
    # answering alternating batches of 3 and 5 at half the tokens per second of one batch of 8 (measured:
    # BENCHMARKS.md "learning: pipeline against the loop"). 0 answers what one poll brought.
    batch_linger_ms: int = 0


def connected(bootstrap: str, stopping: threading.Event, say: Callable[[str], None] | None = None) -> bool:
    """Wait until a Kafka broker at `bootstrap` answers, saying so (`say`, else the log: a warning while
    waiting); False when `stopping` is set first."""
    from streams.kafka import clients

    pause = CONNECT_FIRST_WAIT_S
    while not stopping.is_set():
        try:
            clients.admin(bootstrap, client_id="trialog-probe", bootstrap_timeout_ms=CONNECT_TRY_MS).close()
        except KafkaError as exc:
            line = f"waiting for Kafka at {bootstrap} ({type(exc).__name__}); trying again in {pause:.1f} s"
            (say or log.warning)(line)
            stopping.wait(pause)
            pause = min(pause * 2, CONNECT_MAX_WAIT_S)
            continue
        (say or log.info)(f"connected to Kafka at {bootstrap}")
        return True
    return False


def subscribe_when_known(
    consumer: Any, topic: str, stopping: threading.Event, say: Callable[[str], None] | None = None
) -> bool:
    """Subscribe `consumer` to `topic` once its partitions are known to it; False if `stopping` is set first.

    A member that joins its group before the topic's metadata reached it is assigned nothing (kafka-python's
    assignor skips a topic without partition metadata: "No partition metadata for topic ...") and served
    nothing until a later metadata refresh made the group rebalance; a CI run saw a verifier serve nothing
    for 120 s that way. Asking for the partitions first fetches the metadata, so the first join sees them."""
    while not stopping.is_set():
        try:
            known = consumer.partitions_for_topic(topic)
        except KafkaError as exc:
            known = set()
            log.warning("metadata of %s not readable yet (%s)", topic, exc)
        if known:
            consumer.subscribe([topic])
            return True
        (say or log.info)(f"waiting for the partitions of {topic}")
        stopping.wait(RETRY_S)
    return False


def serve_requests(
    settings: LoopSettings,
    topic: str,
    serve: Callable[[Any, Any], None],
    stopping: threading.Event,
    say: Callable[[str], None] | None = None,
    *,
    prepare: Callable[[Sequence[Any]], None] | None = None,
    health: Health | None = None,
) -> None:
    """Call `serve(record, producer)` for each record of `topic` (a full name), one at a time, committing
    each after it is served, until `stopping` is set. At least once: a crash before the commit serves it
    again. `prepare`, when given, first sees all the records of each poll (up to `settings.max_batch`) to
    answer them together; without it a poll takes one record. `health` hears the loop turn (a beat per
    poll; before a record, one that allows `max_poll_interval_ms`, the longest a record may take) and is
    told `topic` is ready once the consumer is subscribed."""
    health = health or Health()
    health.ready(topic, False, f"waiting for Kafka at {settings.bootstrap} and the partitions of {topic}")
    from streams.kafka import clients

    if not connected(settings.bootstrap, stopping, say):
        return
    consumer = clients.consumer(
        settings.bootstrap,
        group_id=settings.group_id,
        enable_auto_commit=False,
        auto_offset_reset="earliest",
        max_poll_records=settings.max_batch if prepare is not None else 1,
        fetch_max_wait_ms=settings.fetch_max_wait_ms,
        max_poll_interval_ms=settings.max_poll_interval_ms,
        session_timeout_ms=settings.session_timeout_ms,
        heartbeat_interval_ms=settings.session_timeout_ms // 5,
        metadata_max_age_ms=METADATA_MAX_AGE_MS,
    )
    if not subscribe_when_known(consumer, topic, stopping, say):
        consumer.close()
        return
    producer = clients.producer(settings.bootstrap)

    longest_s = settings.max_poll_interval_ms / 1000  # what the group itself allows one poll's work

    def served(record: Any) -> None:
        health.beat(topic, within_s=longest_s)
        serve(record, producer)
        health.beat(topic)

    unstable_since: float | None = None
    try:
        health.ready(topic)
        while not stopping.is_set():
            health.beat(topic)
            polled = poll(consumer, settings.poll_timeout_ms, stopping)
            if polled and not group_stable(consumer):
                # Not (or no longer) a member of a settled generation: what is served now could not be
                # committed, and would be served again (a grading redone every second). Put the records
                # back and poll, which completes the rejoin; a consumer that stays outside its group
                # (seen with kafka-python after a session lapse on a loaded machine: its group Empty, its
                # commits refused as "rebalancing" for minutes) subscribes afresh.
                rewind(consumer, polled)
                now = time.monotonic()
                unstable_since = unstable_since or now
                if now - unstable_since > REJOIN_AFTER_S:
                    log.warning("%s: still outside its group after %.0f s; subscribing again", topic,
                                now - unstable_since)  # fmt: skip
                    consumer.unsubscribe()
                    if not subscribe_when_known(consumer, topic, stopping, say):
                        return
                    unstable_since = None
                continue
            unstable_since = None
            if prepare is not None and polled and settings.batch_linger_ms > 0:
                polled = lingered(consumer, polled, settings, stopping)
            if prepare is not None and polled:
                health.beat(topic, within_s=longest_s)
                try:
                    prepare([record for records in polled.values() for record in records])
                except Exception:  # `serve` answers each record alone instead
                    log.exception("answering a poll's %d records together failed", len(polled))
            serve_in_order(consumer, polled, served, stopping)
    finally:
        consumer.close()
        producer.close()


def dead_letter(
    producer: Any, topic: str, record: Any, origin: Origin, codec: Codec, reason: str, detail: str
) -> None:
    """Send `record` to the dead-letter `topic` with why it was not answered; wait for the broker's ack."""
    metrics.dead_letter(reason, origin.producer.kind)
    value = record.value
    if value is not None and len(value) > VALUE_LIMIT:
        detail = f"{detail[: DETAIL_LIMIT - 80]} (value cut from {len(value)} to {VALUE_LIMIT} bytes)"
        value = value[:VALUE_LIMIT]
    letter = DeadLetter(
        origin.record_meta(),
        record.topic,
        record.partition,
        record.offset,
        record.key,
        value,
        reason,
        detail[:DETAIL_LIMIT],
        tuple(record.headers or ()),
    )
    producer.send(topic, value=codec.encode(letter)).get(SEND_TIMEOUT_S)


def trace_headers(record: Any) -> list[tuple[str, bytes]]:
    """The headers of an answer to `record`: the trace context. Called inside the span of handling the
    request, it names that span (the answer's parent); with tracing off, the request's own `traceparent`
    travels on, so a chain is never cut."""
    return tracing.outgoing_headers(record.headers)


def poll(
    consumer: Any, timeout_ms: int, stopping: threading.Event, max_records: int | None = None
) -> Mapping[Any, Sequence[Any]]:
    """The next records (at most `max_records`, else the consumer's own limit), or none while Kafka is
    unreachable (after a pause)."""
    try:
        limit = {} if max_records is None else {"max_records": max_records}  # a bare poll as before
        polled: Mapping[Any, Sequence[Any]] = consumer.poll(timeout_ms=timeout_ms, **limit)
    except KafkaError as exc:
        log.warning("Kafka unreachable while polling (%s); retrying", exc)
        stopping.wait(RETRY_S)
        return {}
    metrics.kafka_python_lag(consumer)
    return polled


def lingered(
    consumer: Any,
    polled: Mapping[Any, Sequence[Any]],
    settings: LoopSettings,
    stopping: threading.Event,
    monotonic: Callable[[], float] = time.monotonic,
) -> dict[Any, list[Any]]:
    """`polled` and what more polls bring within `settings.batch_linger_ms`, up to `settings.max_batch`
    records in all; each partition's records stay in offset order (a later poll continues where the last
    one stopped), so serving and committing them in order is unchanged."""
    merged = {partition: list(records) for partition, records in polled.items()}
    count = sum(len(records) for records in merged.values())
    deadline = monotonic() + settings.batch_linger_ms / 1000
    while count < settings.max_batch and not stopping.is_set():
        left_ms = round((deadline - monotonic()) * 1000)
        if left_ms <= 0:
            break
        more = poll(consumer, min(left_ms, settings.poll_timeout_ms), stopping, settings.max_batch - count)
        for partition, records in more.items():
            merged.setdefault(partition, []).extend(records)
            count += len(records)
    return merged


def group_stable(consumer: Any) -> bool:
    """Whether the consumer is a member of a settled generation of its group (True when kafka-python does
    not say: a consumer without a group, or another version)."""
    coordinator = getattr(consumer, "_coordinator", None)
    stable = getattr(coordinator, "generation_if_stable", None)
    if coordinator is None or stable is None or not getattr(consumer, "_subscription", None):
        return True
    subscription = consumer._subscription
    if not subscription.partitions_auto_assigned():
        return True
    return stable() is not None


def rewind(consumer: Any, polled: Mapping[Any, Sequence[Any]]) -> None:
    """Seek each polled partition back to its first polled record (read again by a later poll)."""
    for partition, records in polled.items():
        if records:
            with contextlib.suppress(KafkaError, AssertionError, ValueError):
                consumer.seek(partition, records[0].offset)


def serve_in_order(
    consumer: Any,
    polled: Mapping[Any, Sequence[Any]],
    serve: Callable[[Any], None],
    stopping: threading.Event,
) -> None:
    """Serve each record, then commit past it; on a Kafka error rewind to it and pause. Any other error of
    `serve` (which should have dead-lettered the record itself) is logged and the record skipped: serving
    it again would fail again, a crash loop on one record."""
    for partition, records in polled.items():
        for record in records:
            if stopping.is_set():
                return
            try:
                try:
                    serve(record)
                except KafkaError:
                    raise
                except Exception:
                    log.exception("could not serve %s@%s; skipping it", partition, record.offset)
                consumer.commit({partition: OffsetAndMetadata(record.offset + 1, None, -1)})
            except KafkaError as exc:
                log.warning(
                    "Kafka unreachable at %s@%s (%s); will serve it again", partition, record.offset, exc
                )
                consumer.seek(partition, record.offset)
                stopping.wait(RETRY_S)
                break  # the rest of this partition comes again after the rewind
