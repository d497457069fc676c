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
  a second timer reads from Kafka the inputs given back that Faust never delivered again (`streams.skipped`);
* the tasks come from the compacted `tasks` topic (`streams.rows.TaskCache`);
* short consumer-group timeouts (`SESSION_TIMEOUT_S` and friends) so that a killed worker's partitions move
  to a survivor within seconds;
* a stalled worker (a zombie) is fenced by time (`streams.fencing`): `watch_membership` notes every answer
  of the group coordinator that confirms this member, the worker writes only within `fencing.FRESH_S` of
  one and stamps its records with the time it checked, and `episode.events` and the changelog refuse late
  records. A batch a stale worker cannot handle waits until the membership is confirmed, unless a
  rebalance reads its inputs again anyway (`streams.batches`);
* `tune_fetcher` removes aiokafka's prefetch backoff and Faust's 1.5 s fetch wait (see there);
* at-least-once processing (exactly-once has open bugs in faust-streaming: docs/crash-consistency.md).
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import logging
import os
import signal
import time
from collections.abc import Iterator
from contextvars import ContextVar
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import faust

from schemas import topics
from schemas.origin import Origin
from schemas.requests import SamplingParams
from schemas.topics import topic_name
from streams import fencing
from streams.adapters import EventLogReader, FaustBus, FaustRows, read_partition
from streams.assignment import Assignment
from streams.batches import BatchHandler
from streams.kafka import clients
from streams.kafka.serving import METADATA_MAX_AGE_MS
from streams.kafka.topics import Durability
from streams.lifecycle import Grace, Health
from streams.ports import Input
from streams.rows import TaskCache
from streams.skipped import StuckCommits, skipped
from streams.step_grading import OFF as NO_STEP_GRADING
from streams.step_grading import StepGrading
from streams.telemetry import metrics
from streams.worker import COMMANDS, EVENTS, INPUTS, NO_FAULTS, EpisodeWorker, Faults

log = logging.getLogger(__name__)

TICK_S = 0.5
# A read of skipped inputs (`streams.skipped`) that gets no record this long gives up until the commit has
# stood another `skipped.GRACE_S`: the broker went away mid-read, and the partition may move meanwhile.
REREAD_STALL_S = 10.0
BATCH_MAX = 500  # inputs decided, sent and acknowledged together
QUEUE_MAX = 2 * BATCH_MAX  # events taken from Faust but not yet in a batch (then the agent waits)
# A killed worker is noticed when its session expires (Faust's default: 60 s); heartbeats every third of it.
# `streams.fencing` holds them: its bound on a stalled worker's writes is made of them.
SESSION_TIMEOUT_S = fencing.SESSION_TIMEOUT_S
HEARTBEAT_S = fencing.HEARTBEAT_S
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
        # Only the partition's owner writes it, as `episode.events`: late records refused (streams.fencing).
        extra_topic_configs={**settings.durability.topic_configs(), **topics.FENCED},
    )
    rows = FaustRows(table)
    tasks = TaskCache(settings.bootstrap, topics.TASKS.of(run))
    membership = fencing.Membership()
    worker = EpisodeWorker(
        rows=rows,
        bus=FaustBus(app),
        tasks=tasks,
        read_events=EventLogReader(settings.bootstrap, topic_name(run, EVENTS)),
        origin=Origin.system("streams", settings.instance),
        topic=lambda base: topic_name(run, base),
        faults=_fault_from_env(),
        sampling=settings.sampling,
        grading=settings.grading,
        membership=membership,
    )
    names = {topic_name(run, base): base for base in INPUTS}
    inputs = app.topic(*names, key_type=bytes, value_type=bytes, key_serializer="raw", value_serializer="raw")
    commands = topic_name(run, COMMANDS)

    assignment = Assignment(commands)  # what this worker owns now (not Faust's assignor: streams.assignment)
    assigned = assignment.current

    queue: asyncio.Queue[Any] = asyncio.Queue(maxsize=QUEUE_MAX)

    give_back_nth = _give_back_from_env()

    async def inputs_agent(stream: Any) -> None:
        seen = 0
        async for event in stream.noack().events():
            _note_lag(app, event.message)
            seen += 1
            if seen == give_back_nth:  # a test's fault: given back as in a rebalance, and not delivered again
                log.warning("%s: input %d given back (%s)", FAULT_ENV, seen, event.message.tp)
                _release(event)
                continue
            await queue.put(event)

    app.agent(inputs, name="episode-inputs")(inputs_agent)

    def settled() -> bool:
        """The current generation's assignment is known, no rebalance is going on and the table is
        recovered from its changelog: rows may be read."""
        recovery: Any = getattr(app.tables, "recovery", None)
        return (
            assignment.known and not app.rebalancing and recovery is not None and recovery.completed.is_set()
        )

    async def on_revoked(_app: Any, /, *_revoked: Any, **_kwargs: Any) -> None:
        # Sent before the worker joins the new generation: nothing is owned until its assignment. Under the
        # worker's lock: the batch in hand ends first, and none decides anything for these partitions after
        # it. Forgotten, not kept: the new assignment may give back a partition that another worker owned
        # meanwhile (this one expired while stalled), whose rows are then read again.
        assignment.revoked()
        await worker.forget_all("rebalance")

    async def on_assigned(_app: Any, /, *args: Any, **_kwargs: Any) -> None:
        assignment.assigned(args[0])  # the whole new assignment; sent once the tables' recovery has begun
        guard_acks(app.consumer, set(names))  # before this generation delivers anything

    app.on_partitions_revoked.connect(on_revoked)
    app.on_partitions_assigned.connect(on_assigned)

    batches = BatchHandler(
        worker, settled, assigned, lambda message: _input(names, message), ack=_ack, give_back=_release
    )

    async def process_batches() -> None:
        try:
            await batches.serve(queue, BATCH_MAX)
        except Exception as exc:  # a batch that keeps failing: stop, a restart recovers from the log
            log.exception("a batch failed for good; stopping the worker")
            await app.crash(exc)

    app.task(process_batches)

    async def tick() -> None:
        health.beat("episode-ticks")
        tune_fetcher(app)
        ready = settled()
        health.ready("episodes", ready, "rebalancing, or recovering the table from its changelog")
        if not ready:
            return
        watch_membership(app, membership)
        try:
            await worker.sync_assignment(assigned())
            await worker.tick()
        except Exception:
            log.exception("streams tick failed")

    stuck = StuckCommits()

    async def read_skipped_again() -> None:
        """Read from Kafka and handle the inputs nobody delivers again (`streams.skipped`). A timer of its
        own, not a step of `tick`: a read that meets a broker gone away waits up to `REREAD_STALL_S`, and
        the episodes' ticks and the liveness beat go on meanwhile."""
        if not settled():
            return
        try:
            await read_skipped_partitions()
        except Exception:
            log.exception("reading skipped inputs again failed (tried again after %.0f s)", stuck.grace_s)

    async def read_skipped_partitions() -> None:
        consumer: Any = app.consumer
        owned = {tp for tp in consumer.assignment() if tp.topic in names and tp.partition in worker.ready}
        stuck.keep_only(owned)
        for tp in sorted(owned):
            committed = consumer._committed_offset.get(tp) or 0
            end = consumer.highwater(tp)
            if end is None or end <= committed or not stuck.due(tp, committed, time.monotonic()):
                continue
            offsets = skipped(committed, end, set(consumer._acked.get(tp, ())))
            if offsets and worker.may_write():  # a stale worker gives back what it is given: wait
                await handle_again(consumer, tp, committed, offsets)

    async def handle_again(consumer: Any, tp: Any, committed: int, offsets: list[int]) -> None:
        wanted = set(offsets)

        def read() -> list[Any]:
            last = offsets[-1]
            reader = read_partition(settings.bootstrap, tp.topic, tp.partition, offsets[0], REREAD_STALL_S)
            with contextlib.closing(reader):
                upto = itertools.takewhile(lambda record: record.offset <= last, reader)
                return [record for record in upto if record.offset in wanted]

        records = await asyncio.get_running_loop().run_in_executor(None, read)
        inputs = [
            Input(names[tp.topic], tp.partition, r.offset, r.key, r.value, tuple(_header_items(r.headers)))
            for r in records
        ]
        handled = await worker.handle_batch(inputs)
        for record, done in zip(records, handled, strict=True):
            if done:
                _ack_read_again(consumer, tp, record.offset)
        log.warning(
            "%s[%d]: the commit stood at %d for %.0f s with inputs above it not handled; %d of them read "
            "again from Kafka, %d handled",
            tp.topic, tp.partition, committed, stuck.grace_s, len(records), sum(handled),
        )  # fmt: skip

    app.timer(TICK_S, name="episode-ticks")(tick)
    app.timer(TICK_S, name="read-skipped-again")(read_skipped_again)

    async def load_tasks() -> None:
        loop = asyncio.get_running_loop()
        async with worker.lock:  # the tasks consumer is also used by StartEpisode (never two at once)
            count = await loop.run_in_executor(None, tasks.catch_up)
        log.info("tasks: %d records read from %s", count, tasks.topic)

    app.task(load_tasks)
    return app, worker


# Set while the batch loop acknowledges the inputs it handled: the only acknowledgements `guard_acks` lets
# through to the commit.
_HANDLED: ContextVar[bool] = ContextVar("trialog_handled", default=False)


def _ack(event: Any) -> None:
    """Acknowledge an input the worker handled (its offset may be committed)."""
    token = _HANDLED.set(True)
    try:
        event.ack()
    finally:
        _HANDLED.reset(token)


def guard_acks(consumer: Any, topics: set[str]) -> None:
    """Let only the worker's own acknowledgements of `topics`' records reach the commit (once per consumer).

    Faust's choice of the offset to commit (`Consumer._new_offset`) lets the commit pass the one record
    right at the committed offset when it is not acknowledged but later ones are (it checks that the first
    acknowledged offset is more than one past the committed one, which is already the next to read; and
    nothing at all when the committed offset is 0): a record given back while its successors were handled
    was committed unhandled, and StartEpisode commands sent while their owner was frozen never began their
    episodes (the chaos test; they stopped once this was fixed). Here the commit waits until the record at
    the committed offset is handled.

    Two more ways to the same loss, found by reading Faust, not seen on their own: its stream
    *acknowledges* the records it skips instead of delivering them (fetched in an earlier group generation
    and handed out after a rebalance, or while its flow is paused), counting on reading them again from the
    committed offset; here such an acknowledgement only releases the record from Faust's tracking
    (`_untrack`). And when the offsets it hands out jump (for Faust, a compacted or transactional topic's
    holes), it lets the commit skip the offsets in between; the input topics have no holes (no compaction,
    no transactions), so a jump there is a record dropped as already read after a seek, and the commit stops
    before it.
    """
    if getattr(consumer, "_trialog_guarded", False):
        return
    original = consumer.ack

    def ack(message: Any) -> bool:
        if message.topic in topics and not _HANDLED.get():
            _untrack(message)
            return False
        return bool(original(message))

    add_gap = consumer._add_gap

    async def add_gap_elsewhere(tp: Any, offset_from: int, offset_to: int) -> None:
        if tp.topic not in topics:
            await add_gap(tp, offset_from, offset_to)

    new_offset = consumer._new_offset

    def new_offset_after_handled(tp: Any) -> int | None:
        if tp.topic in topics:
            acked, committed = consumer._acked[tp], consumer._committed_offset[tp]
            start = 0 if committed is None else committed  # the next offset to read
            if acked and min(acked) > start:
                return None  # the record at the committed offset is not handled yet
        result: int | None = new_offset(tp)
        return result

    consumer.ack = ack
    consumer._add_gap = add_gap_elsewhere
    consumer._new_offset = new_offset_after_handled
    consumer._trialog_guarded = True


class _ReadAgain:
    """What Faust's `Consumer.ack` reads of a message, for an input read again outside Faust."""

    def __init__(self, tp: Any, offset: int) -> None:
        self.tp, self.topic, self.offset, self.acked = tp, tp.topic, offset, False


def _ack_read_again(consumer: Any, tp: Any, offset: int) -> None:
    """Acknowledge an input read again from Kafka and handled (its offset may be committed)."""
    token = _HANDLED.set(True)
    try:
        consumer.ack(_ReadAgain(tp, offset))
    finally:
        _HANDLED.reset(token)


def _release(event: Any) -> None:
    """Give an input back to Kafka: leave its offset unacknowledged (the commit stops before it, so it is
    read again, by this worker or the partition's next owner), and let Faust stop tracking it. A rebalance
    first waits until every input Faust delivered is acknowledged or collected, and Faust's own stream holds
    on to the last input it delivered until the next one comes, which the paused rebalance never brings:
    a given-back input left tracked held both streams workers of the chaos test in that wait for good."""
    _untrack(event.message)


def _untrack(message: Any) -> None:
    """Mark the message done as Faust's `Message.ack` does before it tells the consumer the offset, without
    telling it: Faust's wait ends and nothing is committed; a later `ack` of it is a no-op."""
    message.acked = True


def _aiokafka_consumer(app: Any) -> Any:
    """The aiokafka consumer Faust runs in its consumer thread; None until the app has started it."""
    thread = getattr(app.consumer, "_thread", None)
    return getattr(thread, "_consumer", None)


def _coordinator(app: Any) -> Any:
    return getattr(_aiokafka_consumer(app), "_coordinator", None)


def watch_membership(app: Any, membership: fencing.Membership) -> bool:
    """Have the app's group coordinator client tell `membership` the send time of every heartbeat and
    SyncGroup the coordinator answers without error; True once done (call it again until then: Faust
    creates the aiokafka consumer when the app starts, in its consumer thread)."""
    from aiokafka.protocol.group import HeartbeatRequest, SyncGroupRequest

    coordinator = _coordinator(app)
    if coordinator is None or not hasattr(coordinator, "_send_req"):
        return False
    if getattr(coordinator, "_trialog_membership", None) is membership:
        return True
    send = coordinator._send_req

    async def send_req(request: Any) -> Any:
        sent_at = membership.monotonic()
        response = await send(request)
        confirms = isinstance(request, HeartbeatRequest | SyncGroupRequest)
        if confirms and getattr(response, "error_code", None) == 0:
            membership.confirmed(sent_at)
        return response

    coordinator._send_req = send_req
    coordinator._trialog_membership = membership
    return True


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


def _give_back_from_env() -> int | None:
    """Fault injection for tests, `give_back:N` in `TRIALOG_STREAMS_FAULT`: the N-th input Faust delivers
    is given back unhandled, as the batch loop gives back an input during a rebalance, with no rebalance to
    deliver it again (what `streams.skipped` finds and reads again)."""
    kind, _, count = os.environ.get(FAULT_ENV, "").partition(":")
    return int(count) if kind == "give_back" and count.isdigit() else None


def _fault_from_env() -> Faults:
    """Fault injection for tests, `KIND:N` in `TRIALOG_STREAMS_FAULT`, at the N-th batch that sends:
    `crash_before_row` kills the process (exit 137, no clean-up) after the batch's acks and before its rows
    are written; `stop_before_check` and `stop_after_check` stop the whole process (SIGSTOP, every thread:
    a stall, until the test sends SIGCONT) right before, or right after, the batch's membership check."""
    spec = os.environ.get(FAULT_ENV, "")
    kind, _, count = spec.partition(":")
    if kind not in ("crash_before_row", "stop_before_check", "stop_after_check") or not count.isdigit():
        return NO_FAULTS
    remaining = [int(count)]

    def fault() -> None:
        remaining[0] -= 1
        if remaining[0] != 0:
            return
        log.warning("%s=%s: now", FAULT_ENV, spec)
        if kind == "crash_before_row":
            os._exit(137)
        os.kill(os.getpid(), signal.SIGSTOP)

    if kind == "crash_before_row":
        return Faults(before_row_write=fault)
    if kind == "stop_before_check":
        return Faults(before_check=fault)
    return Faults(after_check=fault)


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
    fetcher = getattr(_aiokafka_consumer(app), "_fetcher", None)
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
