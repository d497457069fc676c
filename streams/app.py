"""The Faust app of `trialog worker streams`: one app per run (app id and topics carry the run prefix).

* one agent consumes `episode.commands`, `policy.results`, `sandbox.results` and `verify.results`
  (co-partitioned: keyed by episode id, same partition count) as raw bytes, so that undecodable records
  reach the worker and are dead-lettered instead of failing inside Faust;
* the `episodes` table (`rocksdb://`, rocksdict driver, small block cache, compacted changelog declared by
  Faust, standby replicas configurable) holds each episode's row (`streams.tables.Row`); it uses the key
  partitioner, which sends a row to the partition of its episode id, the partition of the inputs (so the
  timer may write rows too);
* a timer ticks the episodes every `TICK_S` and first recovers partitions newly assigned (`streams.worker`);
* the tasks come from the compacted `tasks` topic (`streams.tables.TaskCache`);
* at-least-once processing (exactly-once has open bugs in faust-streaming: FIELD-NOTES).
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import faust

from ops.telemetry import metrics, tracing
from ops.topics import TOPICS, topic_name
from schemas.sources import Origin
from streams.tables import TaskCache
from streams.worker import COMMANDS, EVENTS, INPUTS, EpisodeWorker, Input

log = logging.getLogger(__name__)

TICK_S = 0.5
SESSION_TIMEOUT_S = 10.0  # a killed worker's partitions move after this long (Faust's default: 60 s)
BLOCK_CACHE_BYTES = 8 * 1024 * 1024  # per table partition (Faust's default is 2 GiB each)
PARTITIONS = {spec.name: spec.partitions for spec in TOPICS}


@dataclass(frozen=True, slots=True)
class Settings:
    bootstrap: str
    run: str
    data_dir: str
    instance: str
    standby_replicas: int = 0

    @property
    def app_id(self) -> str:
        return topic_name(self.run, "trialog-streams")


class FaustBus:
    def __init__(self, app: faust.App) -> None:
        self.app = app

    async def send(self, topic: str, key: bytes | None, value: bytes) -> Awaitable[int]:
        headers = tracing.outgoing_headers() or None  # the owner's span, as the requests' parent
        future = await self.app.producer.send(topic, key, value, None, None, headers)

        async def offset() -> int:
            metadata = await future
            return int(metadata.offset)

        return asyncio.ensure_future(offset())


class EventLogReader:
    """Reads `episode.events`[p] from an offset to its end (kafka-python, in an executor thread)."""

    def __init__(self, bootstrap: str, topic: str) -> None:
        self.bootstrap = bootstrap
        self.topic = topic

    def __call__(self, partition: int, start: int) -> Iterator[tuple[int, bytes | None, bytes | None]]:
        from kafka import KafkaConsumer, TopicPartition

        tp = TopicPartition(self.topic, partition)
        consumer = KafkaConsumer(bootstrap_servers=self.bootstrap, enable_auto_commit=False)
        try:
            consumer.assign([tp])
            end = consumer.end_offsets([tp])[tp]
            begin = consumer.beginning_offsets([tp])[tp]
            position = max(start, begin)
            if position >= end:
                return
            consumer.seek(tp, position)
            while consumer.position(tp) < end:
                for record in consumer.poll(timeout_ms=500).get(tp, []):
                    if record.offset < end:
                        yield record.offset, record.key, record.value
        finally:
            consumer.close()


def build_app(settings: Settings) -> tuple[faust.App, EpisodeWorker]:
    run = settings.run
    Path(settings.data_dir).mkdir(parents=True, exist_ok=True)
    app = faust.App(
        settings.app_id,
        broker=f"kafka://{settings.bootstrap}",
        store="rocksdb://",
        datadir=settings.data_dir,
        processing_guarantee="at_least_once",
        table_standby_replicas=settings.standby_replicas,
        topic_partitions=PARTITIONS[COMMANDS],
        topic_allow_declare=True,
        web_enabled=False,
        key_serializer="raw",  # the table's rows and keys are bytes (streams.tables.Row)
        value_serializer="raw",
        broker_commit_interval=1.0,
        broker_session_timeout=SESSION_TIMEOUT_S,
        broker_heartbeat_interval=SESSION_TIMEOUT_S / 4,
    )
    table = app.Table(
        "episodes",
        key_type=bytes,
        value_type=bytes,
        partitions=PARTITIONS[COMMANDS],
        use_partitioner=True,
        options={"driver": "rocksdict", "block_cache_size": BLOCK_CACHE_BYTES},
    )
    rows = _StrKeys(table)
    tasks = TaskCache(settings.bootstrap, topic_name(run, "tasks"))
    worker = EpisodeWorker(
        rows=rows,
        bus=FaustBus(app),
        tasks=tasks,
        read_events=EventLogReader(settings.bootstrap, topic_name(run, EVENTS)),
        origin=Origin.system("streams", settings.instance),
        topic=lambda base: topic_name(run, base),
        before_row_write=_fault_from_env(),
    )
    names = {topic_name(run, base): base for base in INPUTS}
    inputs = app.topic(*names, key_type=bytes, value_type=bytes, key_serializer="raw", value_serializer="raw")
    commands = topic_name(run, COMMANDS)

    def assigned() -> set[int]:
        return {tp.partition for tp in app.assignor.assigned_actives() if tp.topic == commands}

    async def inputs_agent(stream: Any) -> None:
        async for event in stream.events():
            message = event.message
            await worker.sync_assignment(assigned())
            _note_lag(app, message)
            headers = tuple(_header_items(message.headers))
            await worker.handle(
                Input(
                    names[message.topic],
                    message.partition,
                    message.offset,
                    message.key,
                    message.value,
                    headers,
                )
            )

    app.agent(inputs, name="episode-inputs")(inputs_agent)

    async def tick() -> None:
        recovery: Any = getattr(app.tables, "recovery", None)
        if app.rebalancing or recovery is None or not recovery.completed.is_set():
            return
        try:
            await worker.sync_assignment(assigned())
            await worker.tick()
        except Exception:
            log.exception("streams tick failed")

    app.timer(TICK_S, name="episode-ticks")(tick)

    async def load_tasks() -> None:
        loop = asyncio.get_running_loop()
        async with worker.lock:  # the tasks consumer is also used by StartEpisode (never two at once)
            count = await loop.run_in_executor(None, tasks.catch_up)
        log.info("tasks: %d records read from %s", count, tasks.topic)

    app.task(load_tasks)
    return app, worker


def _note_lag(app: faust.App, message: Any) -> None:
    """Consumer lag of the message's partition: records after it up to the partition's high watermark."""
    if metrics.metrics().enabled:
        end = app.consumer.highwater(message.tp)
        if end is not None:
            metrics.consumer_lag(message.topic, message.partition, int(end) - message.offset - 1)


def _header_items(headers: Any) -> Iterator[tuple[str, bytes]]:
    """Faust gives a record's headers as a list of pairs or a mapping."""
    items = headers.items() if isinstance(headers, dict) else headers or ()
    for key, value in items:
        if isinstance(key, str) and isinstance(value, bytes):
            yield key, value


FAULT_ENV = "TRIALOG_STREAMS_FAULT"


def _fault_from_env() -> Callable[[], None] | None:
    """Fault injection for tests: `crash_before_row:N` kills the process (exit 137, no clean-up) right
    after the N-th set of effects was acknowledged and before its row is written."""
    spec = os.environ.get(FAULT_ENV, "")
    if not spec.startswith("crash_before_row:"):
        return None
    remaining = [int(spec.split(":", 1)[1])]

    def crash() -> None:
        remaining[0] -= 1
        if remaining[0] == 0:
            log.warning("%s=%s: crashing before the row write", FAULT_ENV, spec)
            os._exit(137)

    return crash


class _StrKeys:
    """The table seen with str keys (episode ids) and bytes rows."""

    def __init__(self, table: Any) -> None:
        self.table = table

    def get(self, key: str) -> bytes | None:
        value = self.table.get(key.encode())
        return None if value is None else bytes(value)

    def __setitem__(self, key: str, value: bytes) -> None:
        self.table[key.encode()] = value

    def items(self) -> Iterator[tuple[str, bytes]]:
        return ((bytes(key).decode(), bytes(value)) for key, value in self.table.items())


def run_worker(settings: Settings) -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s %(message)s")
    logging.getLogger("faust").setLevel(logging.WARNING)
    logging.getLogger("aiokafka").setLevel(logging.WARNING)
    logging.getLogger("kafka").setLevel(logging.WARNING)
    app, _worker = build_app(settings)
    log.info(
        "streams worker %s: app %s on %s, data %s",
        settings.instance,
        app.conf.id,
        settings.bootstrap,
        settings.data_dir,
    )
    from mode import Worker

    Worker(app, loglevel="INFO", quiet=True, redirect_stdouts=False).execute_from_commandline()
    return 0
