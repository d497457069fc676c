"""Batches of the streams worker on a fake bus and table: order of effects, per-partition watermarks, row
format v2 (and v1 still read), a failed batch rebuilt and retried."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import dataclasses
import json
import threading
from collections.abc import Awaitable, Iterator

import pytest
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from ops.telemetry.otel import OtelTracer
from schemas.chain import digest, verify_chain
from schemas.commands import AbortEpisode, StartEpisode
from schemas.events import ActionProposed
from schemas.requests import PolicyRequest
from schemas.state import Phase
from streams.ports import Headers, Input
from streams.rows import ROW_MAGIC_V2, Row
from streams.telemetry import tracing
from streams.telemetry.ids import TRACEPARENT, SpanRef, episode_trace_id, traceparent_from_headers
from streams.worker import EpisodeWorker
from tests.unit.streams.fake_rows import Crash, Rows
from tests.unit.streams.test_worker import CODEC, Log, World, _play
from tests.unit.streams.world import EPISODE, abort_command, start_command

OTHER = "ep-0002"


def _start(episode: str) -> StartEpisode:
    command = start_command()
    meta = dataclasses.replace(command.meta, event_id=f"cmd-start-{episode}")
    return dataclasses.replace(command, meta=meta, episode_id=episode, group_id=f"g-{episode}")


def _abort(episode: str) -> AbortEpisode:
    command = abort_command()
    meta = dataclasses.replace(command.meta, event_id=f"cmd-abort-{episode}")
    return dataclasses.replace(command, meta=meta, episode_id=episode)


class Journal(Log):
    """The bus, recording sends and acks in one journal with the table's writes."""

    def __init__(self, journal: list[str]) -> None:
        super().__init__()
        self.journal = journal

    async def send(
        self,
        topic: str,
        key: bytes | None,
        value: bytes,
        headers: Headers = (),
        timestamp_s: float | None = None,
    ) -> Awaitable[int]:
        self.journal.append(f"send {topic}")
        ack = await super().send(topic, key, value, headers, timestamp_s)

        async def acked() -> int:
            self.journal.append("ack")
            return await ack

        return acked()


class JournalRows(Rows):
    def __init__(self, journal: list[str]) -> None:
        super().__init__()
        self.journal = journal

    def put(self, partition: int, key: str, value: bytes) -> None:
        self.journal.append(f"put {key}")
        super().put(partition, key, value)


def _input(world: World, topic: str, record: object, key: str) -> Input:
    offset = world.offsets.get(topic, 0)
    world.offsets[topic] = offset + 1
    return Input(topic, 0, offset, key.encode(), CODEC.encode(record))  # type: ignore[arg-type]


def _policy(world: World, episode: str) -> PolicyRequest:
    requests = [r for r in world.requests("policy.requests") if isinstance(r, PolicyRequest)]
    return [r for r in requests if r.meta.episode_id == episode][-1]


def test_a_batch_is_decided_in_order_sent_acked_then_each_row_written_once() -> None:
    journal: list[str] = []
    world = World(log=Journal(journal), rows=JournalRows(journal))
    worker = world.worker()
    journal.clear()
    starts = [_input(world, "episode.commands", _start(e), e) for e in (EPISODE, OTHER)]
    asyncio.run(worker.handle_batch(starts))
    first = world.workers.act(_policy(world, EPISODE))
    second = world.workers.act(_policy(world, OTHER))
    journal.clear()
    batch = [
        _input(world, "policy.results", first, EPISODE),
        _input(world, "policy.results", second, OTHER),
        _input(world, "episode.commands", _abort(EPISODE), EPISODE),  # EPISODE twice in one batch
    ]
    asyncio.run(worker.handle_batch(batch))
    puts = [line for line in journal if line.startswith("put")]
    assert sorted(puts) == [f"put {EPISODE}", f"put {OTHER}"]  # one write per changed row
    first_put = journal.index(puts[0])
    sends = [n for n, line in enumerate(journal) if line.startswith("send")]
    acks = [n for n, line in enumerate(journal) if line == "ack"]
    assert len(sends) == len(acks) == 6  # 3 events, 2 sandbox requests, 1 failed trajectory
    assert max(sends) < min(acks) and max(acks) < first_put  # sent without waiting, acked, then rows
    names = [type(e).__name__ for e in world.events()]
    assert names == ["EpisodeStarted", "EpisodeStarted", "ActionProposed", "ActionProposed", "EpisodeFailed"]
    assert world.state().episode.phase is Phase.FAILED
    assert Row.decode(world.rows[OTHER]).state.episode.phase is Phase.AWAITING_EXECUTION
    assert verify_chain(world.log.values("episode.events"), CODEC).ok


def _as_v1(row: Row, log_offset: int) -> bytes:
    """A row as the one-input-at-a-time worker wrote it (format v1, frozen here)."""
    rec = row.state.to_record()
    body = {
        "v": 1,
        "partition": row.partition,
        "log_offset": log_offset,
        "episode": base64.b64encode(CODEC.encode(row.state.episode)).decode("ascii"),
        "task": rec["task"],
        "sampling": rec["sampling"],
        "outstanding": rec["outstanding"],
    }
    return json.dumps(body, sort_keys=True, separators=(",", ":")).encode()


class PerEpisodeOffsetRows(Rows):
    """The old scheme: each row records the offset of its own episode's last event (and nothing else)."""

    def __init__(self, log: Log) -> None:
        super().__init__()
        self.log = log

    def put(self, partition: int, key: str, value: bytes) -> None:
        row = Row.decode(value)
        logged = [digest(v) for v in self.log.values("episode.events")]
        own = max(logged.index(digest(data)) for data in row.events)
        super().put(partition, key, _as_v1(row, own))


@pytest.mark.parametrize("scheme", ["per-episode offset", "per-partition watermark"])
def test_a_crash_between_two_row_writes_of_interleaved_episodes(scheme: str) -> None:
    """One batch appends EPISODE's action, OTHER's action, EPISODE's failure (an abort); the rows are then
    written OTHER first; the process dies before EPISODE's row. With per-episode offsets OTHER's row records
    an offset past EPISODE's action, recovery starts after it, and the redelivered action is appended a
    second time (a forked chain); with the partition's watermark recovery reads the whole batch again."""
    world = World()
    if scheme == "per-episode offset":
        world.rows = PerEpisodeOffsetRows(world.log)
    worker = world.worker()
    starts = [_input(world, "episode.commands", _start(e), e) for e in (EPISODE, OTHER)]
    asyncio.run(worker.handle_batch(starts))
    first = world.workers.act(_policy(world, EPISODE))
    second = world.workers.act(_policy(world, OTHER))
    batch = [
        _input(world, "policy.results", first, EPISODE),
        _input(world, "policy.results", second, OTHER),
        _input(world, "episode.commands", _abort(EPISODE), EPISODE),
    ]
    puts = 0
    original = world.rows.put

    def put(partition: int, key: str, value: bytes) -> None:
        nonlocal puts
        puts += 1
        if puts == 2:
            raise Crash("between the row writes")
        original(partition, key, value)

    world.rows.put = put  # type: ignore[method-assign]
    with pytest.raises(Crash):
        asyncio.run(worker.handle_batch(batch))
    world.rows.put = original  # type: ignore[method-assign]
    restarted = world.worker()  # recovery; then the uncommitted batch comes again
    asyncio.run(restarted.handle_batch(batch))
    actions = [e for e in world.events() if isinstance(e, ActionProposed) and e.meta.episode_id == EPISODE]
    report = verify_chain(world.log.values("episode.events"), CODEC)
    if scheme == "per-episode offset":
        assert len(actions) == 2 and not report.ok  # the loss: a second action for step 0, a fork
        return
    assert len(actions) == 1 and report.ok and report.duplicates == 0
    assert Row.decode(world.rows[EPISODE]).state.episode.phase is Phase.FAILED
    assert Row.decode(world.rows[OTHER]).state.episode.phase is Phase.AWAITING_EXECUTION
    assert {d.reason for d in world.dead()} <= {"duplicate", "ended"}


def test_rows_v2_hold_the_logged_bytes() -> None:
    """(v1 rows, as the v1 worker wrote them, are read in `test_rows_v1`.)"""
    world = World()
    _play(world, world.worker())
    data = world.rows[EPISODE]
    assert data.startswith(ROW_MAGIC_V2)
    row = Row.decode(data)
    assert row.events == tuple(world.log.values("episode.events"))
    assert Row.decode(row.encode()) == row


class FlakyLog(Log):
    """A broker that fails one send (a timeout, say) after `fail_at` sends."""

    def __init__(self, fail_at: int) -> None:
        super().__init__()
        self.fail_at = fail_at

    async def send(
        self,
        topic: str,
        key: bytes | None,
        value: bytes,
        headers: Headers = (),
        timestamp_s: float | None = None,
    ) -> Awaitable[int]:
        self.fail_at -= 1
        if self.fail_at == 0:
            raise TimeoutError("the broker did not answer")
        return await super().send(topic, key, value, headers, timestamp_s)


def test_a_failed_batch_is_rebuilt_from_the_log_and_retried() -> None:
    """The send of the next request fails after the action was appended: the worker rebuilds the partition
    from the log (the action is in it), waits and decides again; the retried input is a duplicate (counted
    as ignored, not dead-lettered), the request is resent by the recovery, and the episode goes on without a
    second action."""
    world = World(log=FlakyLog(fail_at=4))  # 1 EpisodeStarted, 2 PolicyRequest, 3 ActionProposed, 4 fails
    worker = EpisodeWorker(
        rows=world.rows,
        bus=world.log,
        tasks=world.worker().tasks,
        read_events=world.log.read_events,
        origin=world.origin,
        clock=world.clock,
        retry_backoff_s=(0.001, 0.002),
    )
    asyncio.run(worker.sync_assignment({0}))
    world.deliver(worker, "episode.commands", start_command())
    world.deliver(worker, "policy.results", world.workers.act(_policy(world, EPISODE)))
    assert worker.stats.get("batch_retries") == 1
    names = [type(e).__name__ for e in world.events()]
    assert names == ["EpisodeStarted", "ActionProposed"]
    assert world.state().episode.phase is Phase.AWAITING_EXECUTION
    assert len(world.requests("sandbox.requests")) == 1
    assert world.dead() == []
    assert worker.stats.get("ignored.duplicate") == 1


LANDS_AFTER_S = 0.2  # the late record, against the retry's backoff of 1 ms


class LateThenRefusedLog(Log):
    """The chaos test's broker cut off and healed (2026-12-08): in the batch that decides an action, the
    episode's event reaches the log only later (its partition's leader was cut off; the producer retries it)
    while the next request's acknowledgement fails at once (the broker refused the record as late,
    `InvalidTimestampError`). Armed once `arm` is set; each happens once."""

    def __init__(self) -> None:
        super().__init__()
        self.armed = False
        self.landing: list[threading.Timer] = []  # the late record lands whatever the worker does meanwhile

    async def send(
        self,
        topic: str,
        key: bytes | None,
        value: bytes,
        headers: Headers = (),
        timestamp_s: float | None = None,
    ) -> Awaitable[int]:
        loop = asyncio.get_running_loop()
        if self.armed and topic == "episode.events" and not self.landing:
            future: asyncio.Future[int] = loop.create_future()

            def land() -> None:  # the producer's retry, once the leader is back
                records = self.topics.setdefault(topic, [])
                records.append((key, value))
                with contextlib.suppress(RuntimeError):  # the worker's loop may be gone (it did not wait)
                    loop.call_soon_threadsafe(future.set_result, len(records) - 1)

            self.landing.append(threading.Timer(LANDS_AFTER_S, land))
            self.landing[-1].start()
            return future
        if self.armed and topic == "sandbox.requests":
            self.armed = False
            refused: asyncio.Future[int] = loop.create_future()
            refused.set_exception(RuntimeError("InvalidTimestampError: the record is late"))
            return refused
        return await super().send(topic, key, value, headers, timestamp_s)


def test_a_batch_that_fails_is_rebuilt_only_once_every_record_it_sent_has_landed_or_failed() -> None:
    """The failed batch's event is still on its way when another of its records is refused: the worker must
    wait for it before it rebuilds the partition from the log, or the retry decides the action again and
    the episode's log holds the event twice (the audit's `duplicate_step`, found by the chaos test)."""
    log = LateThenRefusedLog()
    world = World(log=log)
    worker = EpisodeWorker(
        rows=world.rows, bus=world.log, tasks=world.worker().tasks, read_events=world.log.read_events,
        origin=world.origin, clock=world.clock, retry_backoff_s=(0.001, 0.002),
    )  # fmt: skip
    asyncio.run(worker.sync_assignment({0}))
    world.deliver(worker, "episode.commands", start_command())
    action = world.workers.act(_policy(world, EPISODE))
    log.armed = True
    world.deliver(worker, "policy.results", action)
    for landing in log.landing:
        landing.join()
    assert worker.stats.get("batch_retries") == 1
    event_ids = [e.meta.event_id for e in world.events()]
    assert len(event_ids) == len(set(event_ids)) == 2, [type(e).__name__ for e in world.events()]
    assert worker.stats.get("ignored.duplicate") == 1  # the retry found the event in the log
    assert world.state().episode.phase is Phase.AWAITING_EXECUTION
    assert len(world.requests("sandbox.requests")) == 1  # resent by the recovery
    assert verify_chain(world.log.values("episode.events"), CODEC).ok


class UnreadableLog(Log):
    """A log whose `episode.events` cannot be read `failures` times (a broker restarting: the reader's
    offsets request times out), then can."""

    def __init__(self, failures: int) -> None:
        super().__init__()
        self.failures = failures

    def read_events(self, partition: int, start: int) -> Iterator[tuple[int, bytes | None, bytes | None]]:
        if self.failures > 0:
            self.failures -= 1
            raise TimeoutError("offsets request timed out")
        return super().read_events(partition, start)


def test_a_partition_whose_recovery_fails_stays_unrecovered_and_is_tried_again_after_a_backoff() -> None:
    """A recovery that fails leaves the partition unrecovered (its inputs unhandled), the worker running,
    and is tried again once its backoff (doubling) has passed; then the partition serves."""
    world = World()
    _play(world, world.worker())  # one episode logged: the recovery has something to read
    log = UnreadableLog(failures=2)
    log.topics = world.log.topics
    worker = EpisodeWorker(
        rows=world.rows, bus=log, tasks=world.worker().tasks, read_events=log.read_events,
        origin=world.origin, clock=world.clock, retry_backoff_s=(1.0, 1.5),
    )  # fmt: skip
    asyncio.run(worker.sync_assignment({0}))
    assert worker.ready == set() and worker.stats["recovery_failed"] == 1
    start_other = _input(world, "episode.commands", _start(OTHER), OTHER)
    assert asyncio.run(worker.handle_batch([start_other])) == [False]  # left for a later try
    asyncio.run(worker.sync_assignment({0}))  # within the backoff (1 s): not tried
    assert worker.stats["recovery_failed"] == 1 and log.failures == 1
    world.clock.now += 1_000_000
    asyncio.run(worker.sync_assignment({0}))  # tried, fails again: the next backoff is 1.5 s (the cap)
    assert worker.stats["recovery_failed"] == 2 and worker.recovery_retry[0][1] == 1.5
    world.clock.now += 1_000_000
    asyncio.run(worker.sync_assignment({0}))
    assert worker.ready == set()
    world.clock.now += 600_000
    asyncio.run(worker.sync_assignment({0}))
    assert worker.ready == {0} and worker.recovery_retry == {}
    assert asyncio.run(worker.handle_batch([start_other])) == [True]
    log.failures = 1
    asyncio.run(worker.sync_assignment(set()))  # moved away
    asyncio.run(worker.sync_assignment({0}))  # and back: its recovery fails, the backoff starts afresh
    assert worker.ready == set() and worker.recovery_retry[0][1] == 1.0
    asyncio.run(worker.sync_assignment(set()))
    assert worker.recovery_retry == {}


def test_inputs_of_a_partition_not_recovered_here_are_skipped_and_reported() -> None:
    world = World()
    worker = world.worker()  # partition 0 only
    elsewhere = dataclasses.replace(_input(world, "episode.commands", _start(OTHER), OTHER), partition=1)
    here = _input(world, "episode.commands", _start(EPISODE), EPISODE)
    assert asyncio.run(worker.handle_batch([elsewhere, here])) == [False, True]
    assert [e.meta.episode_id for e in world.events()] == [EPISODE]
    assert worker.stats["skipped.unassigned"] == 1


class HeaderLog(Log):
    """The bus, keeping the headers each record was sent with."""

    def __init__(self) -> None:
        super().__init__()
        self.sent: list[tuple[str, bytes | None, Headers]] = []

    async def send(
        self,
        topic: str,
        key: bytes | None,
        value: bytes,
        headers: Headers = (),
        timestamp_s: float | None = None,
    ) -> Awaitable[int]:
        self.sent.append((topic, key, tuple(headers)))
        return await super().send(topic, key, value, headers, timestamp_s)


def test_each_input_of_a_batch_has_its_span_and_what_it_caused_names_that_span() -> None:
    log = HeaderLog()
    world = World(log=log)
    worker = world.worker()
    senders = {
        EPISODE: SpanRef(episode_trace_id(EPISODE), 0x51),
        OTHER: SpanRef(episode_trace_id(OTHER), 0x52),
    }
    batch = [
        dataclasses.replace(
            _input(world, "episode.commands", _start(e), e),
            headers=((TRACEPARENT, senders[e].traceparent().encode()),),
        )
        for e in (EPISODE, OTHER)
    ]
    exporter = InMemorySpanExporter()
    tracer = OtelTracer("trialog-streams", SimpleSpanProcessor(exporter))
    log.sent.clear()
    with tracing.installed(tracer):
        assert asyncio.run(worker.handle_batch(batch)) == [True, True]
    tracer.shutdown()
    owner_spans = [s for s in exporter.get_finished_spans() if s.name == "owner.episode.commands"]
    assert len(owner_spans) == 2
    by_episode = {dict(s.attributes or {})["trialog.episode"]: s for s in owner_spans}
    for episode, sender in senders.items():
        span = by_episode[episode]
        context = span.get_span_context()
        assert context is not None and span.parent is not None
        assert context.trace_id == episode_trace_id(episode) and span.parent.span_id == sender.span_id
        caused = [headers for _topic, key, headers in log.sent if key == episode.encode()]
        assert caused and all(
            traceparent_from_headers(headers) == SpanRef(context.trace_id, context.span_id)
            for headers in caused
        )  # the events and the policy request, sent after the batch was decided, name the input's span
