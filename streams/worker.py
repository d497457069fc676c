"""The episode owner at work: batches of Kafka inputs -> `streams.owner` -> effects on Kafka -> the table.

`EpisodeWorker` is the Faust-free core (tested with a fake bus and a dict table) over the ports of
`streams.ports`; `streams.adapters` implements them on Faust and Kafka, `streams.app` wires it to Faust
(agents, the RocksDB table, a timer) and `trialog worker streams` (`ops.cli.workers.streams`) runs it.

A batch: whatever inputs are queued when the worker is free (up to `streams.app.BATCH_MAX`), in the order
they arrived (per partition, the log's order). The order of its side effects is the crash-consistency
argument, so here it is, in full:

  1. decide: every input in order, with the pure owner (`streams.owner`), one clock reading per input;
     an input sees the state its predecessors in the batch left (rows live in memory, see below);
     rejected inputs and undecodable records become dead letters; nothing is sent yet;
  2. send: every produced record (the events' exact bytes to `episode.events`, keyed by episode id; the
     requests; the trajectories, `trajectories.completed` keyed by task id, `trajectories.failed` by
     episode id; the dead letters) goes to the producer without waiting;
  3. acknowledge: the batch's acks are awaited together, once (one flush);
  4. write: each row the batch changed is written once, to its partition (`Rows.write`), carrying the
     partition's watermark (below): to the changelog first, all acknowledged, then to the local store;
  5. only then are the batch's inputs acknowledged to Faust, which commits input offsets after flushing
     its producer (our appends and its changelog writes).
  So the table never gets ahead of the log, and an input is committed only after its row is written.
  A batch that fails in 2-4 (a broker error, a failed ack, a failed write) may have logged part of its
  events: the worker forgets its partitions' rows in memory, rebuilds them from the table and the log
  (recovery, below), waits (backoff doubling from `retry_backoff_s[0]` to `[1]`) and decides the batch
  again; inputs already applied are then duplicates (counted as ignored), the rest go on.

Crash consistency: the log is the truth, the table a cache of its fold.
  A crash between 3 and 4 (or between two row writes of 4) leaves `episode.events` ahead of rows (and the
  inputs uncommitted, so they come again). Deciding again from an old row would append *new* events (new
  ids, new times) after events already logged: a fork of the chain. So before a worker decides anything for
  a partition it has just been given (start, restart, rebalance, a failed batch), it folds the partition's
  tail of `episode.events` into the rows:
  * every row carries its partition's *watermark* W: every event of the partition at offset <= W was
    folded into rows written before this one. The worker keeps W per partition: after all rows of a batch
    are written, W moves to the batch's highest appended offset; rows are written with the W of before
    the batch (within a batch rows are written in no particular order, so a row may not vouch for the
    batch's other rows). Rows go to the changelog partition of their episode's partition, in processing
    order, and Kafka keeps that order: when a row survived, every row written before it did. That holds for
    the local RocksDB store too because a row reaches it only once the changelog acknowledged it: a worker
    restarted on the local store of a worker killed before its changelog writes were acknowledged would
    otherwise find rows the changelog lacks, write later rows whose W vouches for them, and a worker
    restored from the changelog alone (a new machine, a rebalance) would skip their events and decide again
    from an older row: a duplicate step and a forked chain (the fault test's kill -9 of the streams worker
    while the broker is down, then on a fresh folder, found it). So every event
    missing from the table lies after the highest W of the partition's rows, and the worker reads
    `episode.events`[p] from there to its end (no row: from the beginning). At most the last batch is
    read again; folding an event a row holds already changes nothing.
    Why not the offset of the episode's own last event (row format v1): with batches (or a timer) two
    episodes' rows are written one after the other; a crash between the writes leaves the second row
    with a high offset and the first one stale, and the highest offset then skips the first episode's
    events: they are never folded, and the next decision forks its chain. `tests/unit/streams` shows it.
  * each event is folded into its episode's row with `schemas.fold.apply` (an event already in the row is
    a duplicate and changes nothing; a row that never got written is rebuilt from EpisodeStarted on,
    with the task from the tasks table); the row keeps the event's bytes (row format v2);
  * an episode whose state moved is resumed (`streams.owner.resume`): the request its phase waits for
    is sent again with the key the lost write issued (attempt 1), an EpisodeCompleted due after a logged
    reward is appended, the trajectory of an ended episode is published again (at least once);
  * every other episode of the partition with an outstanding request gets it again, same idempotency key
    and chain head (`owner.outstanding_request`): the previous owner may have died before sending it.
  The redelivered inputs then meet the caught-up state and are rejected as duplicates (counted as
  `ignored.duplicate`, not dead-lettered: it is expected), so the log holds each event once. Only this
  worker appends to the partition while it owns it, so the tail read to the end is complete. A worker that
  lost its partition without noticing (a zombie, stalled past its session) could still append; the time
  fence of `streams.fencing` makes everything it sends land before its successor reads the tail, or be
  refused: before sending, a batch checks that the group coordinator confirmed this member recently
  (`Membership.stamp`), stamps its records with that moment, and the topics refuse late records. A stale
  worker sends nothing: it forgets all its partitions and gives the batch's inputs back unacknowledged;
  each partition still assigned is recovered (the tail folded again) once the membership is confirmed.
  Every rebalance forgets every partition too (`forget_all`, before the worker joins the new generation):
  a worker expired while stalled rejoins and may get its old partitions back, which another worker owned
  and appended to meanwhile; kept in memory, their rows would be stale (seen in the chaos test: a worker
  frozen past its session, with no batch while it was stale, went on from its old rows and appended
  duplicate steps).
  Costs: a recovery reads the rows of the new partitions once and the log from the watermark (every
  rebalance recovers every partition assigned: about 0.2 s a partition on the chaos test's machine); a
  trajectory may be published twice (consumers key it by episode).

Rows in memory: only the partition's owner writes its rows, so after recovery the worker keeps the rows of
its episodes in flight in memory (an ended episode's row is dropped from memory and read from the table if
an input still comes for it) and reads no row per input. Recovery fills them; a lost partition drops them.

Timers: `tick()` (every 0.5 s from Faust) calls `owner.on_tick` for the episodes whose outstanding
request is past its deadline, as one batch (without inputs: a failed tick is not retried, the next tick
decides again). Their deadlines are indexed in memory with the rows. A tick runs outside any Faust
stream event, which is why rows are written to an explicit partition (`Rows.write`).
One lock serialises batches, ticks and recovery.

Tracing (`ops.telemetry`): each input is decided inside its own span (`owner.<topic>`), under the span its
record's `traceparent` header names (the header travels with the `Input` through the batch); a timed-out
episode is decided inside an `owner.timeout` span. Records are sent only after the whole batch is decided,
so each takes the traceparent of the span current when it was decided (`_Work.send`) and carries it then.
The metric points and an ended episode's root span follow once the batch's events are acknowledged.
"""

from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace

from schemas import topics
from schemas.chain import digest
from schemas.codec import DecodeError, default_codec
from schemas.commands import AbortEpisode, StartEpisode
from schemas.common import RecordMeta
from schemas.deadletter import DeadLetter
from schemas.events import (
    EPISODE_EVENT_TYPES,
    ActionProposed,
    EpisodeFailed,
    EpisodeStarted,
    RewardAssigned,
    StepExecuted,
)
from schemas.fold import FoldError, apply
from schemas.origin import Clock, Origin, SystemClock
from schemas.record import Record
from schemas.requests import PolicyRequest, SamplingParams, SandboxRequest, VerifyRequest
from schemas.state import EpisodeState
from schemas.trajectories import TrajectoryCompleted
from streams import owner
from streams.fencing import Membership, Stale
from streams.owner import Appended, Effects, OwnerError, OwnerState, Request, TaskInfo, resume
from streams.ports import Bus, EventReader, Headers, Input, Rows, Tasks, send_all
from streams.rows import Row, sampling_for
from streams.step_grading import OFF as NO_STEP_GRADING
from streams.step_grading import StepGrading
from streams.telemetry import episodes as telemetry_episodes
from streams.telemetry import metrics, tracing

log = logging.getLogger(__name__)

DEAD_LETTER_VALUE_MAX = 512 * 1024  # bytes of a refused input a dead letter keeps (see _dead_letter)

COMMANDS, EVENTS, DEADLETTER = (
    topics.EPISODE_COMMANDS.name,
    topics.EPISODE_EVENTS.name,
    topics.DEADLETTER.name,
)
ANSWERS = tuple(topic.name for topic in topics.ANSWERS)
INPUTS = (COMMANDS, *ANSWERS)
RETRY_BACKOFF_S = (0.2, 5.0)
MAX_BATCH_ATTEMPTS = 12  # then the batch's error propagates and the process restarts (a crash is safe)
_REQUEST_TOPICS: dict[type[Request], str] = {
    PolicyRequest: topics.POLICY_REQUESTS.name,
    SandboxRequest: topics.SANDBOX_REQUESTS.name,
    VerifyRequest: topics.VERIFY_REQUESTS.name,
}
# What the owner accepts on each result topic: the catalogue's record types of the topic.
_ANSWER_TYPES: dict[str, tuple[type[Record], ...]] = {topic.name: topic.records for topic in topics.ANSWERS}


@dataclass(frozen=True, slots=True)
class Faults:
    """Fault injection for tests, each called at its point of a batch that sends something: before its
    membership check, between that check and its first send, and after its acks before its rows."""

    before_check: Callable[[], None] | None = None
    after_check: Callable[[], None] | None = None
    before_row_write: Callable[[], None] | None = None


NO_FAULTS = Faults()


@dataclass
class _Work:
    """What one batch sends (in order) and the rows it changed (the newest of each, in order of change)."""

    # (topic, key, value, partition of an appended event or None, headers)
    records: list[tuple[str, bytes | None, bytes, int | None, Headers]] = field(default_factory=list)
    rows: dict[str, Row] = field(default_factory=dict)
    appended: int = 0
    # (the episode's state, the events appended to it): telemetry's, once the events are acknowledged
    logged: list[tuple[EpisodeState, tuple[Appended, ...]]] = field(default_factory=list)

    def send(self, topic: str, key: bytes | None, value: bytes, event_of: int | None = None) -> None:
        # Sent at the end of the batch, outside the input's span: the span current now (the input that
        # caused the record) is captured as the record's `traceparent` here.
        self.records.append((topic, key, value, event_of, tuple(tracing.outgoing_headers())))

    def change(self, key: str, row: Row) -> None:
        self.rows.pop(key, None)
        self.rows[key] = row


class EpisodeWorker:
    def __init__(
        self,
        *,
        rows: Rows,
        bus: Bus,
        tasks: Tasks,
        read_events: EventReader,
        origin: Origin,
        topic: Callable[[str], str] = lambda base: base,
        clock: Clock | None = None,
        faults: Faults = NO_FAULTS,
        retry_backoff_s: tuple[float, float] = RETRY_BACKOFF_S,
        sampling: SamplingParams | None = None,
        grading: StepGrading = NO_STEP_GRADING,
        membership: Membership | None = None,
    ) -> None:
        self.rows = rows
        self.bus = bus
        self.tasks = tasks
        self.read_events = read_events
        self.origin = origin
        self.topic = topic
        self.clock = clock or SystemClock()
        self.retry_backoff_s = retry_backoff_s
        # The run's sampling parameters (temperature, top-p, token budget); each episode gets its own seed.
        # Every PolicyRequest carries them, so the log says how each reply was sampled.
        self.sampling = sampling or SamplingParams()
        # Which intermediate workspaces go to progress.requests (process rewards; off by default).
        self.grading = grading
        self.ready: set[int] = set()  # partitions recovered since they were assigned
        self.live: dict[str, Row] = {}  # rows of the episodes in flight on ready partitions
        self.watermarks: dict[int, int] = {}  # partition -> W (see the module doc)
        self.deadlines: dict[str, tuple[int, int]] = {}  # episode -> (partition, deadline) of its request
        # partition -> (clock time before which it is not recovered again, last backoff in s): see
        # `_recovery_failed`.
        self.recovery_retry: dict[int, tuple[int, float]] = {}
        self.lock = asyncio.Lock()
        self.stats: dict[str, int] = {}
        self.faults = faults
        # Whether this worker's group membership is fresh enough to write (`streams.fencing`); None: always.
        self.membership = membership

    def _count(self, name: str, n: int = 1) -> None:
        self.stats[name] = self.stats.get(name, 0) + n

    # -- assignment and recovery -------------------------------------------------------------------------

    async def sync_assignment(self, assigned: set[int]) -> None:
        """Recover the partitions newly assigned (before anything is decided for them); forget the rest.
        While the membership is stale nothing is recovered (recovery writes): a later call does it. A
        partition whose recovery failed (the log unreadable for a while: a broker restarting) stays
        unrecovered, its inputs unhandled, and is tried again by a later call after a backoff."""
        async with self.lock:
            self._forget(self.ready - assigned)
            # A partition that moved away and comes back starts its backoff afresh.
            self.recovery_retry = {p: retry for p, retry in self.recovery_retry.items() if p in assigned}
            for partition in sorted(assigned - self.ready):
                if not self.may_write():
                    return
                if not self._recovery_due(partition):
                    continue
                try:
                    await self._recover(partition)
                except Stale:
                    self._give_back_all("recovery")
                    return
                except Exception:
                    self._recovery_failed(partition)

    def _recovery_due(self, partition: int) -> bool:
        retry = self.recovery_retry.get(partition)
        return retry is None or self.clock.now_us() >= retry[0]

    def _recovery_failed(self, partition: int) -> None:
        """Log the failure and set when to try again: the backoff doubles from `retry_backoff_s[0]` to
        `[1]`, so that a log that stays unreadable is neither hammered nor given up on (a recovery failure
        used to stop the worker, as a batch that keeps failing does)."""
        _, last = self.recovery_retry.get(partition, (0, self.retry_backoff_s[0] / 2))
        delay = min(2 * last, self.retry_backoff_s[1])
        self.recovery_retry[partition] = (self.clock.now_us() + int(delay * 1e6), delay)
        self._count("recovery_failed")
        log.warning("partition %d: recovery failed, tried again in %.1f s", partition, delay, exc_info=True)

    async def forget_all(self, why: str) -> None:
        """Forget every partition (recovered again from the table and the log by the next
        `sync_assignment` that finds it assigned): a rebalance is under way, after which a partition assigned
        here again may have had another owner meanwhile."""
        async with self.lock:
            if self.ready:
                log.info("%s: partitions %s forgotten until recovered again", why, sorted(self.ready))
                self._count("forgotten.rebalance")
            self._forget(set(self.ready))

    # -- fencing (streams.fencing) ---------------------------------------------------------------------------

    def may_write(self) -> bool:
        """Whether the membership is fresh enough to write now (always, without a membership: the unit
        tests' worker)."""
        return self.membership is None or self.membership.stamp() is not None

    def _stamp(self) -> float | None:
        """The create time of a batch's records (None, without a membership: the producer's clock);
        raises `Stale`."""
        if self.membership is None:
            return None
        stamp = self.membership.stamp()
        if stamp is None:
            raise Stale(f"membership last confirmed {self.membership.age()} s ago")
        return stamp

    def _give_back_all(self, where: str) -> None:
        """Stale: this worker may have lost its partitions without knowing. Forget every partition (their
        inputs are given back unacknowledged; each is recovered from the table and the log, once the
        membership is confirmed again and if it is still assigned here)."""
        self._count("fenced.stale")
        age = None if self.membership is None else self.membership.age()
        log.warning(
            "membership not confirmed for %s s: %s stopped, partitions %s given back",
            "?" if age is None else f"{age:.1f}",
            where,
            sorted(self.ready),
        )
        self._forget(set(self.ready))

    def _forget(self, partitions: set[int]) -> None:
        if not partitions:
            return
        self.ready -= partitions
        self.live = {k: row for k, row in self.live.items() if row.partition not in partitions}
        self.deadlines = {k: d for k, d in self.deadlines.items() if d[0] not in partitions}
        for partition in partitions:
            self.watermarks.pop(partition, None)

    def _partition_rows(self, partition: int) -> dict[str, Row]:
        rows: dict[str, Row] = {}
        for key, data in list(self.rows.partition_items(partition)):
            try:
                rows[key] = Row.decode(data)
            except Exception:
                log.exception("episodes row %r cannot be read", key)
        return rows

    async def _recover(self, partition: int) -> None:
        rows = self._partition_rows(partition)
        watermark = max((row.watermark for row in rows.values()), default=-1)
        self.watermarks[partition] = watermark
        loop = asyncio.get_running_loop()
        records = await loop.run_in_executor(None, lambda: list(self.read_events(partition, watermark + 1)))
        moved: dict[str, Row] = {}
        for offset, _key, value in records:
            folded = self._fold_logged(rows, partition, offset, value)
            if folded is not None:
                key, row = folded
                rows[key] = moved[key] = row
        now = self.clock.now_us()
        work = _Work()
        for key, row in moved.items():
            self._count("recovered")
            try:
                effects = resume(row.state, origin=self.origin, now_us=now)
            except OwnerError:
                log.exception("episode %s cannot be resumed", key)
                work.change(key, row)  # its logged events are kept all the same
                continue
            self._add(work, key, row, effects)
        resent = 0
        for key, row in rows.items():
            if key in moved:
                continue
            self._remember(key, row)
            request = owner.outstanding_request(row.state, origin=self.origin, now_us=now)
            if request is not None:
                resent += 1
                self._count("reissued")
                work.send(self._request_topic(request), key.encode(), self._encode(request))
        await self._commit(work)
        if records:
            self.watermarks[partition] = max(self.watermarks[partition], records[-1][0])
        self.ready.add(partition)
        self.recovery_retry.pop(partition, None)
        log.info(
            "partition %d recovered: %d events, %d episodes moved, %d requests resent",
            partition,
            len(records),
            len(moved),
            resent,
        )

    def _fold_logged(
        self, rows: dict[str, Row], partition: int, offset: int, value: bytes | None
    ) -> tuple[str, Row] | None:
        """The row of the event at `offset` with the event folded in, or None if it changes nothing."""
        if value is None:
            return None
        try:
            event = default_codec().decode(value)
        except DecodeError:
            log.warning("episode.events[%d]@%d is undecodable", partition, offset)
            return None
        if not isinstance(event, EPISODE_EVENT_TYPES):
            return None
        key = event.meta.episode_id
        row = rows.get(key) or Row(OwnerState.new(key), partition)
        try:
            episode = apply(row.state.episode, event, digest(value))
        except FoldError as exc:
            log.warning("episode.events[%d]@%d does not fold onto %s: %s", partition, offset, key, exc)
            return None
        if episode is row.state.episode:  # `apply` returns the state itself for a duplicate
            return None
        state = replace(row.state, episode=episode, logged_bytes=row.state.logged_bytes + len(value))
        if isinstance(event, EpisodeStarted):
            task, sampling = self.tasks.get(event.meta.task_id), sampling_for(event.seed, self.sampling)
            state = replace(state, task=task, sampling=sampling)
        return key, replace(row, state=state, events=(*row.events, value))

    # -- inputs ------------------------------------------------------------------------------------------

    async def handle(self, record: Input) -> None:
        """One input record: a batch of one."""
        await self.handle_batch([record])

    async def handle_batch(self, inputs: Sequence[Input]) -> list[bool]:
        """Decide, send, acknowledge and write one batch (see the module doc); retried after a rebuild when
        sending or writing fails. Never raises for anything the records contain.

        Returns, per input, whether it was handled: an input of a partition not recovered here (assigned
        but not yet restored, or just lost) is skipped and must not be acknowledged to Kafka, so that the
        partition's owner reads it (again) from the committed offset."""
        async with self.lock:
            if self.ready and not self.may_write():
                self._give_back_all("a batch")
            partitions = {record.partition for record in inputs} & self.ready
            delay, attempt = self.retry_backoff_s[0], 1
            while True:
                try:
                    handled = [record.partition in self.ready for record in inputs]
                    work = await self._decide_all(inputs)
                    await self._commit(work)
                    return handled
                except Stale:
                    self._give_back_all("a batch")
                    return [False] * len(inputs)
                except Exception:
                    if attempt >= MAX_BATCH_ATTEMPTS:
                        raise
                    log.exception(
                        "a batch of %d inputs failed (attempt %d); rebuilding", len(inputs), attempt
                    )
                    self._count("batch_retries")
                    await asyncio.sleep(delay)
                    delay, attempt = min(2 * delay, self.retry_backoff_s[1]), attempt + 1
                    await self._rebuild(partitions)

    async def _rebuild(self, partitions: set[int]) -> None:
        """Forget what memory holds of `partitions` and recover them from the table and the log (one that
        fails to recover stays unrecovered: its inputs are left unhandled, `sync_assignment` retries)."""
        self._forget(partitions)
        for partition in sorted(partitions):
            try:
                await self._recover(partition)
            except Stale:
                self._give_back_all("a rebuild")
                return
            except Exception:
                self._recovery_failed(partition)

    async def _decide_all(self, inputs: Sequence[Input]) -> _Work:
        work = _Work()
        for record in inputs:
            if record.partition not in self.ready:
                self._count("skipped.unassigned")  # not acknowledged: its owner reads it (again)
                continue
            # One span per input, under the span its sender named; what it sends names this span.
            with tracing.consumed_span(
                f"owner.{record.topic}", record.key, None, headers=record.headers,
                topic=self.topic(record.topic), partition=record.partition, offset=record.offset,
            ):  # fmt: skip
                try:
                    await self._decide(record, work)
                except Exception as exc:  # an owner or encoding bug must not stop the partition
                    log.exception("input %s[%d]@%d failed", record.topic, record.partition, record.offset)
                    self._dead_letter(work, record, "worker_error", f"{type(exc).__name__}: {exc}")
        return work

    async def _decide(self, record: Input, work: _Work) -> None:
        if record.value is None:
            self._dead_letter(work, record, "empty", "a record without a value")
            return
        try:
            value = default_codec().decode(record.value)
        except DecodeError as exc:
            self._dead_letter(work, record, exc.reason.value, str(exc))
            return
        expected = _ANSWER_TYPES.get(record.topic, ())
        if record.topic == COMMANDS:
            if not isinstance(value, (StartEpisode, AbortEpisode)):
                self._dead_letter(work, record, "unexpected_type", f"{type(value).__name__} on {COMMANDS}")
                return
            key = value.episode_id
        elif isinstance(value, expected) and (
            isinstance(value, (ActionProposed, StepExecuted, RewardAssigned, EpisodeFailed))
        ):
            key = value.meta.episode_id
        else:
            self._dead_letter(work, record, "unexpected_type", f"{type(value).__name__} on {record.topic}")
            return
        tracing.annotate(value)
        row = work.rows.get(key) or self._row(key, record.partition)
        now = self.clock.now_us()
        if isinstance(value, StartEpisode):
            task = await self._task(value.task_id)
            sampling = sampling_for(value.seed, self.sampling)
            effects = owner.on_start(
                row.state,
                value,
                task,
                origin=self.origin,
                now_us=now,
                sampling=sampling,
                grading=self.grading,
            )
        elif isinstance(value, AbortEpisode):
            effects = owner.on_abort(row.state, value, origin=self.origin, now_us=now)
        elif isinstance(value, ActionProposed):
            effects = owner.on_action(row.state, value, origin=self.origin, now_us=now)
        elif isinstance(value, StepExecuted):
            effects = owner.on_executed(
                row.state, value, origin=self.origin, now_us=now, grading=self.grading
            )
        elif isinstance(value, EpisodeFailed):
            effects = owner.on_sandbox_failed(row.state, value, origin=self.origin, now_us=now)
        else:
            effects = owner.on_reward(row.state, value, origin=self.origin, now_us=now)
        if effects.rejected in owner.BENIGN:  # what redelivery after any crash produces: nothing to keep
            self._count(f"ignored.{effects.rejected.value}")
            log.info(
                "ignored (%s) %s of %s at %s[%d]@%d",
                effects.rejected.value,
                type(value).__name__,
                key,
                record.topic,
                record.partition,
                record.offset,
            )
            return
        if effects.rejected is not None:
            self._count(f"rejected.{effects.rejected.value}")
            self._dead_letter(work, record, effects.rejected.value, f"episode {key}: input rejected")
            return
        self._add(work, key, row, effects)

    async def _task(self, task_id: str) -> TaskInfo | None:
        known = self.tasks.get(task_id, refresh=False)
        if known is not None:
            return known
        return await asyncio.get_running_loop().run_in_executor(None, self.tasks.get, task_id)

    async def tick(self) -> None:
        """`owner.on_tick` for the due episodes of the partitions this worker owns and has recovered."""
        async with self.lock:
            now = self.clock.now_us()
            due = [k for k, (p, deadline) in self.deadlines.items() if deadline <= now and p in self.ready]
            if not due:
                return
            work = _Work()
            for key in due:
                try:
                    row = self._row(key, self.deadlines[key][0])
                    effects = owner.on_tick(row.state, origin=self.origin, now_us=now)
                    if effects.requests or effects.events:
                        self._count("timeouts")
                        with tracing.span("owner.timeout", key):
                            self._add(work, key, row, effects)
                except Exception:
                    log.exception("tick of episode %s failed", key)
            try:
                await self._commit(work)
            except Stale:
                self._give_back_all("a tick")
            except Exception:
                log.exception("a tick failed; rebuilding (the next tick decides again)")
                await self._rebuild({row.partition for row in work.rows.values()} & self.ready)

    # -- effects -------------------------------------------------------------------------------------------

    def _row(self, key: str, partition: int) -> Row:
        row = self.live.get(key)
        if row is not None:
            return row
        data = self.rows.get(key)  # an ended episode (live rows are in flight only), or a new one
        if data is None:
            return Row(OwnerState.new(key), partition)
        return Row.decode(data)

    def _add(self, work: _Work, key: str, row: Row, effects: Effects) -> None:
        """Queue the effects' records (events, requests, trajectory) and the row they make."""
        key_bytes = key.encode()
        for event in effects.events:
            work.send(self.topic(EVENTS), key_bytes, event.data, row.partition)
        for request in effects.requests:
            work.send(self._request_topic(request), key_bytes, self._encode(request))
        for progress in effects.progress:  # beside the episode: nothing waits for their answers
            work.send(self.topic(topics.PROGRESS_REQUESTS.name), key_bytes, self._encode(progress))
        trajectory = effects.trajectory
        if trajectory is not None:
            if isinstance(trajectory, TrajectoryCompleted):
                topic, tkey = topics.TRAJECTORIES_COMPLETED.name, trajectory.meta.task_id
            else:
                topic, tkey = topics.TRAJECTORIES_FAILED.name, trajectory.meta.episode_id
            work.send(self.topic(topic), tkey.encode(), self._encode(trajectory))
        events = (*row.events, *(event.data for event in effects.events))
        work.change(key, replace(row, state=effects.state, events=events))
        work.appended += len(effects.events)
        if effects.events:
            work.logged.append((effects.state.episode, effects.events))

    async def _commit(self, work: _Work) -> None:
        """Send every record, await every ack (one flush), then write each changed row once. Every record
        and row carries the create time of one membership check made before any is sent (`_stamp`)."""
        if not work.records and not work.rows:
            return
        if self.faults.before_check is not None:
            self.faults.before_check()
        stamp = self._stamp()
        if self.faults.after_check is not None:
            self.faults.after_check()
        offsets = await send_all(
            functools.partial(self.bus.send, topic, key, value, headers, stamp)
            for topic, key, value, _, headers in work.records
        )
        if not work.rows:
            return
        if self.faults.before_row_write is not None:
            self.faults.before_row_write()
        written = {
            key: replace(row, watermark=self.watermarks.get(row.partition, -1))
            for key, row in work.rows.items()
        }
        await self.rows.write([(row.partition, key, row.encode()) for key, row in written.items()], stamp)
        for key, row in written.items():
            self._remember(key, row)
        for (_topic, _key, _value, partition, _headers), offset in zip(work.records, offsets, strict=True):
            if partition is not None:
                self.watermarks[partition] = max(self.watermarks.get(partition, -1), offset)
        if work.appended:
            self._count("appended", work.appended)
        for episode, events in work.logged:
            telemetry_episodes.appended(episode, events)

    def _remember(self, key: str, row: Row) -> None:
        """Keep the rows in memory and the deadline index (what `tick` scans) in step with the table."""
        if row.state.episode.is_terminal:
            self.live.pop(key, None)
        else:
            self.live[key] = row
        out = row.state.outstanding
        if out is None or row.state.episode.is_terminal:
            self.deadlines.pop(key, None)
        else:
            self.deadlines[key] = (row.partition, out.deadline_us)

    def _request_topic(self, request: Request) -> str:
        return self.topic(_REQUEST_TOPICS[type(request)])

    @staticmethod
    def _encode(record: Record) -> bytes:
        return default_codec().encode(record)

    def _dead_letter(self, work: _Work, record: Input, reason: str, detail: str) -> None:
        self._count(f"deadletter.{reason}")
        metrics.dead_letter(reason, "streams")
        value = record.value
        if value is not None and len(value) > DEAD_LETTER_VALUE_MAX:
            # An input near the broker's limit plus the letter's own fields would be over it, and a dead
            # letter that cannot be written fails the batch again and again; the input itself stays on its
            # topic (kept forever) at the partition and offset the letter names.
            detail = f"value cut from {len(value)} bytes; {detail}"
            value = value[:DEAD_LETTER_VALUE_MAX]
        letter = DeadLetter(
            RecordMeta(self.origin.ids.new_id(), self.clock.now_us(), self.origin.producer),
            self.topic(record.topic),
            record.partition,
            record.offset,
            record.key,
            value,
            reason,
            detail[:2000],
        )
        work.send(self.topic(DEADLETTER), record.key, self._encode(letter))
