"""The Faust app of `trialog worker streams`: one app per run (app id and topics carry the run prefix).

It wires the episode worker (`streams.worker`) to the adapters of its ports (`streams.adapters`) and
starts the process (`run_worker`):

* one agent consumes `episode.commands`, `policy.results`, `sandbox.results` and `verify.results`
  (co-partitioned: keyed by episode id, same partition count) as raw bytes, so that undecodable records
  reach the worker and are dead-lettered instead of failing inside Faust. It acknowledges nothing itself
  (`noack`): it queues events, and one task takes everything queued (up to `BATCH_MAX`) as a batch for
  `EpisodeWorker.handle_batch`, and acknowledges the batch's events only after its rows were written;
* the `episodes` table (`rocksdb://`, rocksdict driver, small block cache, compacted changelog declared by
  Faust, standby replicas configurable) holds each episode's row (`streams.rows.Row`). Rows are written
  to an explicit partition (`FaustRows.write`: the changelog partition of that number, acknowledged, then
  the RocksDB database of that partition), the partition of the episode's inputs: Faust's own
  `table[key] = row` takes the partition from the current stream event and refuses to write outside one,
  i.e. from a timer, and writes the local store before the changelog;
* a timer ticks the episodes every `TICK_S` and first recovers partitions newly assigned (`streams.worker`);
* the tasks come from the compacted `tasks` topic (`streams.rows.TaskCache`);
* short consumer-group timeouts (`SESSION_TIMEOUT_S` and friends) so that a killed worker's partitions move
  to a survivor within seconds;
* `tune_fetcher` removes aiokafka's prefetch backoff and Faust's 1.5 s fetch wait (see there);
* at-least-once processing (exactly-once has open bugs in faust-streaming: docs/crash-consistency.md).
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import faust

from schemas import topics
from schemas.origin import Origin
from schemas.requests import SamplingParams
from schemas.topics import topic_name
from streams.adapters import EventLogReader, FaustBus, FaustRows
from streams.kafka import clients
from streams.kafka.serving import METADATA_MAX_AGE_MS
from streams.kafka.topics import Durability
from streams.lifecycle import Grace, Health
from streams.ports import Input
from streams.rows import TaskCache
from streams.step_grading import OFF as NO_STEP_GRADING
from streams.step_grading import StepGrading
from streams.telemetry import metrics
from streams.worker import COMMANDS, EVENTS, INPUTS, EpisodeWorker

log = logging.getLogger(__name__)

TICK_S = 0.5
BATCH_MAX = 500  # inputs decided, sent and acknowledged together
QUEUE_MAX = 2 * BATCH_MAX  # events taken from Faust but not yet in a batch (then the agent waits)
# A killed worker is noticed when its session expires (Faust's default: 60 s); heartbeats every third of it.
SESSION_TIMEOUT_S = 6.0
HEARTBEAT_S = 2.0
# How long the group waits for members to rejoin, and a broker request may take (>= the session: aiokafka).
REQUEST_TIMEOUT_S = 10.0
# The longest the broker holds the worker's fetch when none of its partitions has data (see `tune_fetcher`).
# Measured here: an idle worker spends 8% of a core on empty fetches with 10 ms (4% with 25 ms, 0.5% with
# Faust's 1500 ms); under load 10 ms gave ~400 steps/s where 25 ms gave ~310 (same run, alternating).
FETCH_MAX_WAIT_MS = 10
BLOCK_CACHE_BYTES = 8 * 1024 * 1024  # per table partition (Faust's default is 2 GiB each)
PARTITIONS = {topic.name: topic.partitions for topic in topics.TOPICS}
SINGLE_BROKER = Durability(1, 1)


@dataclass(frozen=True, slots=True)
class Settings:
    bootstrap: str
    run: str
    data_dir: str
    instance: str
    standby_replicas: int = 0
    sampling: SamplingParams | None = None  # the run's; None: SamplingParams' defaults
    grading: StepGrading = NO_STEP_GRADING  # which intermediate workspaces are graded (process rewards)
    durability: Durability = SINGLE_BROKER  # of the table's changelog topic, as of the run's topics

    @property
    def app_id(self) -> str:
        return topic_name(self.run, "trialog-streams")


def build_app(settings: Settings, health: Health | None = None) -> tuple[faust.App, EpisodeWorker]:
    """The app and its episode worker; `health` hears the tick timer beat and whether the tables are
    settled (no rebalance going on, rows recovered from the changelog)."""
    run = settings.run
    health = health or Health()
    Path(settings.data_dir).mkdir(parents=True, exist_ok=True)
    app = faust.App(
        settings.app_id,
        broker=clients.faust_broker(settings.bootstrap),
        broker_credentials=clients.security().faust_credentials(),
        # aiokafka's default (5 minutes) left a worker started before `run start` made the topics without
        # its partitions for that long (measured twice); a refresh every few seconds finds them.
        consumer_metadata_max_age_ms=METADATA_MAX_AGE_MS,
        producer_metadata_max_age_ms=METADATA_MAX_AGE_MS,
        topic_replication_factor=settings.durability.replication,
        store="rocksdb://",
        datadir=settings.data_dir,
        processing_guarantee="at_least_once",
        table_standby_replicas=settings.standby_replicas,
        topic_partitions=PARTITIONS[COMMANDS],
        topic_allow_declare=True,
        web_enabled=False,
        key_serializer="raw",  # the table's rows and keys are bytes (streams.rows.Row)
        value_serializer="raw",
        broker_commit_interval=1.0,
        broker_session_timeout=SESSION_TIMEOUT_S,
        broker_heartbeat_interval=HEARTBEAT_S,
        broker_rebalance_timeout=REQUEST_TIMEOUT_S,
        broker_request_timeout=REQUEST_TIMEOUT_S,
    )
    table = app.Table(
        "episodes",
        key_type=bytes,
        value_type=bytes,
        partitions=PARTITIONS[COMMANDS],
        use_partitioner=True,
        options={"driver": "rocksdict", "block_cache_size": BLOCK_CACHE_BYTES},
        extra_topic_configs=settings.durability.topic_configs(),
    )
    rows = FaustRows(table)
    tasks = TaskCache(settings.bootstrap, topics.TASKS.of(run))
    worker = EpisodeWorker(
        rows=rows,
        bus=FaustBus(app),
        tasks=tasks,
        read_events=EventLogReader(settings.bootstrap, topic_name(run, EVENTS)),
        origin=Origin.system("streams", settings.instance),
        topic=lambda base: topic_name(run, base),
        before_row_write=_fault_from_env(),
        sampling=settings.sampling,
        grading=settings.grading,
    )
    names = {topic_name(run, base): base for base in INPUTS}
    inputs = app.topic(*names, key_type=bytes, value_type=bytes, key_serializer="raw", value_serializer="raw")
    commands = topic_name(run, COMMANDS)

    def assigned() -> set[int]:
        return {tp.partition for tp in app.assignor.assigned_actives() if tp.topic == commands}

    queue: asyncio.Queue[Any] = asyncio.Queue(maxsize=QUEUE_MAX)

    async def inputs_agent(stream: Any) -> None:
        async for event in stream.noack().events():
            _note_lag(app, event.message)
            await queue.put(event)

    app.agent(inputs, name="episode-inputs")(inputs_agent)

    def settled() -> bool:
        """No rebalance going on and the table recovered from its changelog: rows may be read."""
        recovery: Any = getattr(app.tables, "recovery", None)
        return not app.rebalancing and recovery is not None and recovery.completed.is_set()

    async def process_batches() -> None:
        while True:
            events = await next_batch(queue, BATCH_MAX)
            try:
                partitions = assigned()  # recover new partitions only once their rows are restored
                await worker.sync_assignment(partitions if settled() else partitions & worker.ready)
                handled = await worker.handle_batch([_input(names, event.message) for event in events])
            except Exception as exc:  # a batch that keeps failing: stop, a restart recovers from the log
                log.exception("a batch failed for good; stopping the worker")
                await app.crash(exc)
                return
            for event, done in zip(events, handled, strict=True):
                if done:  # a skipped input stays unacknowledged: read again from the committed offset
                    event.ack()

    app.task(process_batches)

    async def tick() -> None:
        health.beat("episode-ticks")
        tune_fetcher(app)
        ready = settled()
        health.ready("episodes", ready, "rebalancing, or recovering the table from its changelog")
        if not ready:
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
    after the N-th batch that changed rows was acknowledged and before its rows are written."""
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


async def next_batch(queue: asyncio.Queue[Any], limit: int) -> list[Any]:
    """Wait for one item, then take whatever else is queued already, up to `limit` in all."""
    batch = [await queue.get()]
    while len(batch) < limit and not queue.empty():
        batch.append(queue.get_nowait())
    return batch


def _input(names: dict[str, str], message: Any) -> Input:
    headers = tuple(_header_items(message.headers))  # the traceparent travels with the input in its batch
    return Input(names[message.topic], message.partition, message.offset, message.key, message.value, headers)


def tune_fetcher(app: Any) -> bool:
    """Remove aiokafka's prefetch backoff and shorten the broker's fetch wait on the app's consumer; True once
    done (call it again until then).

    aiokafka's fetcher (`aiokafka.consumer.fetcher.Fetcher`, `prefetch_backoff=0.1`) does not fetch from a
    broker while any partition it fetched from that broker holds records nobody consumed yet, for up to
    `prefetch_backoff` seconds. Faust assigns the table's changelog partitions to the same consumer and
    reads them only while recovering, so after the first changelog record arrives every fetch on our single
    broker waits 0.1 s: a request answered right after a fetch went out waited up to 100 ms (the p99 of
    `trialog bench pipeline`). With 0 the fetcher skips the unread partitions and fetches the others at
    once (those partitions are not fetched again while their records wait, so nothing spins).

    That fetch, though, names only the partitions without unread records, and the broker holds it until
    one of *them* gets data or `fetch_max_wait_ms` passes, which Faust hard-codes to 1500 ms: an answer
    arriving meanwhile on a partition that had unread records waits for it (one request in flight per
    broker). Under load, most answers did: `trialog bench pipeline` showed bursts of work every ~1.5 s and
    ~70 steps/s with 60 episodes in flight, 3-5x more with `FETCH_MAX_WAIT_MS`. The cost of a short wait
    is an idle consumer's empty fetches (one per `FETCH_MAX_WAIT_MS`, answered by the broker at once). Faust
    creates the aiokafka consumer itself, in its consumer thread, when the app starts; hence the attribute
    is set on the running fetcher.
    """
    thread = getattr(app.consumer, "_thread", None)
    consumer = getattr(thread, "_consumer", None)
    fetcher = getattr(consumer, "_fetcher", None)
    if fetcher is None or not hasattr(fetcher, "_prefetch_backoff"):
        return False
    fetcher._prefetch_backoff = 0.0
    fetcher._fetch_max_wait_ms = FETCH_MAX_WAIT_MS
    return True


def run_worker(settings: Settings, health: Health | None = None, grace: Grace | None = None) -> int:
    """Run the app until SIGTERM or SIGINT (Faust's worker stops it: commits what was acknowledged, leaves
    the group, closes the tables); `grace` bounds how long that stop may take, and `health` hears that
    the worker is stopping."""
    from streams.profiling import profile_from_env

    profile_from_env()
    probes = health if health is not None else Health()
    app, _worker = build_app(settings, probes)
    log.info(
        "streams worker %s: app %s on %s, data %s",
        settings.instance,
        app.conf.id,
        settings.bootstrap,
        settings.data_dir,
    )
    from mode import Worker

    class GracefulWorker(Worker):
        """mode's worker, whose own signal handlers start the stop: also arm the grace period."""

        def _schedule_shutdown(self, signal: Any) -> None:
            probes.stopping()
            if grace is not None:
                grace.start()
            super()._schedule_shutdown(signal)

    GracefulWorker(app, loglevel="INFO", quiet=True, redirect_stdouts=False).execute_from_commandline()
    return 0
