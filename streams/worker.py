"""The episode owner at work: Kafka inputs -> `streams.owner` -> effects on Kafka -> the `episodes` table.

`EpisodeWorker` is the Faust-free core (tested with a fake bus and a dict table); `streams.app` wires it to
Faust (agents, the RocksDB table, a timer) and `python -m streams.worker` runs it.

For each input (a command, an answer, a timer tick) the worker reads the episode's row, calls the owner
with an `Origin` and one clock reading, and carries out the effects in this order: append the events'
exact bytes to `episode.events` (key: episode id), send the requests, publish the trajectory
(`trajectories.completed` keyed by task id, `trajectories.failed` by episode id), wait for every ack, and
only then write the new row. Rejected inputs and undecodable records go to `deadletter` with the reason;
nothing an input can contain stops the worker.

Crash consistency: the log is the truth, the table a cache of its fold.
  A crash between the acks and the table write leaves `episode.events` ahead of the row (and the input
  uncommitted, so it comes again). Deciding again from the old row would append *new* events (new ids,
  new times) after events already logged: a fork of the chain. So before a worker decides anything for a
  partition it has just been given (start, restart, rebalance), it folds the partition's tail of
  `episode.events` into the rows:
  * every row records its partition and the offset of the last event appended for its episode. A row
    goes to the changelog partition of its episode's partition, in processing order, and Kafka keeps
    that order: when a row survived, every earlier row of the partition did. So every event missing
    from the table lies after M, the highest offset any row of the partition records, and the worker
    reads `episode.events`[p] from M + 1 to its end (no row: from the beginning);
  * each event is folded into its episode's row with `schemas.fold.apply` (an event already in the row is
    a duplicate and changes nothing; a row that never got written is rebuilt from EpisodeStarted on,
    with the task from the tasks table);
  * an episode whose state moved is resumed (`streams.owner.resume`): the request its phase waits for
    is sent again with the key the lost write issued (attempt 1), an EpisodeCompleted due after a logged
    reward is appended, the trajectory of an ended episode is published again (at least once);
  * every other episode of the partition with an outstanding request gets it again, same idempotency key
    and chain head (`owner.outstanding_request`): the previous owner may have died before sending it.
  Why the input comes again: Faust flushes its producer (our appends and its changelog writes) before it
  commits input offsets, so an input whose row was lost was not committed; a row lost after a tick (no
  input) is rebuilt from the log all the same. The redelivered input then meets the caught-up state and
  is rejected as a duplicate (dead-lettered), so the log holds each event once. Only this worker appends
  to the partition while it owns it, so the tail read to the end is complete. A worker that lost its
  partition without noticing (a zombie) could still append; at-least-once cannot exclude that, and the
  chain check (`verify_chain`) detects it. Costs: a recovery reads the rows of the new partitions once
  and the log from M + 1; a trajectory may be published twice (consumers key it by episode).

Timers: `tick()` (every 0.5 s from Faust) calls `owner.on_tick` for the episodes whose outstanding
request is past its deadline. Their deadlines are indexed in memory: built from the rows when a partition
is recovered (Faust's `table.items()` only iterates assigned partitions) and kept up to date by every row
this worker writes (only the partition's owner writes its rows), so a tick reads no row that is not due.
One lock serialises inputs, ticks and recovery: a Faust agent handles its partitions one event at a time
anyway.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import socket
from collections.abc import Awaitable, Callable, Iterable, Iterator
from dataclasses import dataclass, replace
from typing import Protocol

from ops.telemetry import config as telemetry_config
from ops.telemetry import episodes as telemetry_episodes
from ops.telemetry import metrics, tracing
from schemas.chain import digest
from schemas.codec import DecodeError, default_codec
from schemas.commands import AbortEpisode, StartEpisode
from schemas.common import RecordMeta
from schemas.deadletter import DeadLetter
from schemas.events import EPISODE_EVENT_TYPES, ActionProposed, EpisodeStarted, RewardAssigned, StepExecuted
from schemas.fold import FoldError, apply
from schemas.record import Record
from schemas.requests import PolicyRequest, SandboxRequest, VerifyRequest
from schemas.sources import Clock, Origin, SystemClock
from schemas.trajectories import TrajectoryCompleted
from streams import owner
from streams.owner import Effects, OwnerError, OwnerState, Request, TaskInfo, resume
from streams.tables import Row, sampling_for

log = logging.getLogger(__name__)

COMMANDS, EVENTS, DEADLETTER = "episode.commands", "episode.events", "deadletter"
ANSWERS = ("policy.results", "sandbox.results", "verify.results")
INPUTS = (COMMANDS, *ANSWERS)
_REQUEST_TOPICS: dict[type[Request], str] = {
    PolicyRequest: "policy.requests",
    SandboxRequest: "sandbox.requests",
    VerifyRequest: "verify.requests",
}
_ANSWER_TYPES: dict[str, type[Record]] = {
    "policy.results": ActionProposed,
    "sandbox.results": StepExecuted,
    "verify.results": RewardAssigned,
}


class Bus(Protocol):
    """Sends one record; the returned awaitable resolves to its offset once the broker acknowledged it."""

    async def send(self, topic: str, key: bytes | None, value: bytes) -> Awaitable[int]: ...


class Rows(Protocol):
    """The `episodes` table as the worker sees it: episode id -> encoded `Row`."""

    def get(self, key: str) -> bytes | None: ...

    def __setitem__(self, key: str, value: bytes) -> None: ...

    def items(self) -> Iterable[tuple[str, bytes]]: ...


class Tasks(Protocol):
    def get(self, task_id: str, *, refresh: bool = True) -> TaskInfo | None: ...


EventReader = Callable[[int, int], Iterable[tuple[int, bytes | None, bytes | None]]]
"""(partition, start offset) -> (offset, key, value) of `episode.events`[partition] up to its end."""


@dataclass(frozen=True, slots=True)
class Input:
    topic: str  # the base name (without the run prefix)
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes], ...] = ()  # the record's Kafka headers (traceparent)


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
        before_row_write: Callable[[], None] | None = None,
    ) -> None:
        self.rows = rows
        self.bus = bus
        self.tasks = tasks
        self.read_events = read_events
        self.origin = origin
        self.topic = topic
        self.clock = clock or SystemClock()
        self.ready: set[int] = set()  # partitions recovered since they were assigned
        self.deadlines: dict[str, tuple[int, int]] = {}  # episode -> (partition, deadline) of its request
        self.lock = asyncio.Lock()
        self.stats: dict[str, int] = {}
        self.before_row_write = before_row_write  # fault injection: runs after the acks, before the row

    def _count(self, name: str) -> None:
        self.stats[name] = self.stats.get(name, 0) + 1

    # -- assignment and recovery -------------------------------------------------------------------------

    async def sync_assignment(self, assigned: set[int]) -> None:
        """Recover the partitions newly assigned (before anything is decided for them); forget the rest."""
        async with self.lock:
            self.ready &= assigned
            self.deadlines = {k: d for k, d in self.deadlines.items() if d[0] in self.ready}
            new = assigned - self.ready
            if not new:
                return
            by_partition: dict[int, dict[str, Row]] = {partition: {} for partition in new}
            for key, row in self._all_rows():
                if row.partition in by_partition:
                    by_partition[row.partition][key] = row
            for partition in sorted(new):
                await self._recover(partition, by_partition[partition])
                self.ready.add(partition)

    def _all_rows(self) -> Iterator[tuple[str, Row]]:
        for key, data in list(self.rows.items()):
            try:
                yield key, Row.decode(data)
            except Exception:
                log.exception("episodes row %r cannot be read", key)

    async def _recover(self, partition: int, rows: dict[str, Row]) -> None:
        start = max((row.log_offset for row in rows.values()), default=-1) + 1
        loop = asyncio.get_running_loop()
        records = await loop.run_in_executor(None, lambda: list(self.read_events(partition, start)))
        moved: dict[str, Row] = {}
        for offset, _key, value in records:
            folded = self._fold_logged(rows, partition, offset, value)
            if folded is not None:
                key, row, changed = folded
                rows[key] = row
                if changed:
                    moved[key] = row
        now = self.clock.now_us()
        for key, row in moved.items():
            self._count("recovered")
            try:
                effects = resume(row.state, origin=self.origin, now_us=now)
            except OwnerError:
                log.exception("episode %s cannot be resumed", key)
                continue
            await self._carry_out(key, row, effects)
        resent = 0
        for key, row in rows.items():
            if key in moved:
                continue
            self._track(key, row)
            request = owner.outstanding_request(row.state, origin=self.origin, now_us=now)
            if request is not None:
                resent += 1
                self._count("reissued")
                ack = await self.bus.send(self._request_topic(request), key.encode(), self._encode(request))
                await ack
        log.info(
            "partition %d recovered: %d events, %d episodes moved, %d requests resent",
            partition,
            len(records),
            len(moved),
            resent,
        )

    def _fold_logged(
        self, rows: dict[str, Row], partition: int, offset: int, value: bytes | None
    ) -> tuple[str, Row, bool] | None:
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
        if episode == row.state.episode:
            return key, replace(row, log_offset=max(row.log_offset, offset)), False
        state = replace(row.state, episode=episode)
        if isinstance(event, EpisodeStarted):
            state = replace(state, task=self.tasks.get(event.meta.task_id), sampling=sampling_for(event.seed))
        return key, Row(state, partition, max(row.log_offset, offset)), True

    # -- inputs ------------------------------------------------------------------------------------------

    async def handle(self, record: Input) -> None:
        """One input record; never raises for anything the record contains."""
        async with self.lock:
            topic = self.topic(record.topic)
            with tracing.consumed_span(
                f"owner.{record.topic}", record.key, None, headers=record.headers,
                topic=topic, partition=record.partition, offset=record.offset,
            ):  # fmt: skip
                try:
                    await self._handle(record)
                except Exception as exc:  # an owner or encoding bug must not stop the partition
                    log.exception("input %s[%d]@%d failed", record.topic, record.partition, record.offset)
                    await self._dead_letter(record, "worker_error", f"{type(exc).__name__}: {exc}")

    async def _handle(self, record: Input) -> None:
        if record.value is None:
            await self._dead_letter(record, "empty", "a record without a value")
            return
        try:
            value = default_codec().decode(record.value)
        except DecodeError as exc:
            await self._dead_letter(record, exc.reason.value, str(exc))
            return
        expected = _ANSWER_TYPES.get(record.topic)
        if record.topic == COMMANDS:
            if not isinstance(value, (StartEpisode, AbortEpisode)):
                await self._dead_letter(record, "unexpected_type", f"{type(value).__name__} on {COMMANDS}")
                return
            key = value.episode_id
        elif (
            expected is not None
            and isinstance(value, expected)
            and isinstance(value, (ActionProposed, StepExecuted, RewardAssigned))
        ):
            key = value.meta.episode_id
        else:
            await self._dead_letter(record, "unexpected_type", f"{type(value).__name__} on {record.topic}")
            return
        tracing.annotate(value)
        row = self._row(key, record.partition)
        now = self.clock.now_us()
        if isinstance(value, StartEpisode):
            task = await asyncio.get_running_loop().run_in_executor(None, self.tasks.get, value.task_id)
            effects = owner.on_start(row.state, value, task, origin=self.origin, now_us=now)
        elif isinstance(value, AbortEpisode):
            effects = owner.on_abort(row.state, value, origin=self.origin, now_us=now)
        elif isinstance(value, ActionProposed):
            effects = owner.on_action(row.state, value, origin=self.origin, now_us=now)
        elif isinstance(value, StepExecuted):
            effects = owner.on_executed(row.state, value, origin=self.origin, now_us=now)
        else:
            effects = owner.on_reward(row.state, value, origin=self.origin, now_us=now)
        if effects.rejected is not None:
            self._count(f"rejected.{effects.rejected.value}")
            await self._dead_letter(record, effects.rejected.value, f"episode {key}: input rejected")
            return
        await self._carry_out(key, row, effects)

    async def tick(self) -> None:
        """`owner.on_tick` for every episode of the partitions this worker owns and has recovered."""
        async with self.lock:
            now = self.clock.now_us()
            due = [k for k, (p, deadline) in self.deadlines.items() if deadline <= now and p in self.ready]
            for key in due:
                try:
                    data = self.rows.get(key)
                    if data is None:
                        self.deadlines.pop(key, None)
                        continue
                    row = Row.decode(data)
                    effects = owner.on_tick(row.state, origin=self.origin, now_us=now)
                    if effects.requests or effects.events:
                        self._count("timeouts")
                        with tracing.span("owner.timeout", key):
                            await self._carry_out(key, row, effects)
                except Exception:
                    log.exception("tick of episode %s failed", key)

    # -- effects -------------------------------------------------------------------------------------------

    def _track(self, key: str, row: Row) -> None:
        """Keep the deadline index (what `tick` scans) in step with the row."""
        out = row.state.outstanding
        if out is None or row.state.episode.is_terminal:
            self.deadlines.pop(key, None)
        else:
            self.deadlines[key] = (row.partition, out.deadline_us)

    def _row(self, key: str, partition: int) -> Row:
        data = self.rows.get(key)
        if data is None:
            return Row(OwnerState.new(key), partition)
        return Row.decode(data)

    async def _carry_out(self, key: str, row: Row, effects: Effects) -> None:
        """Events, requests, trajectory; every ack; then the row (see the module doc for why this order)."""
        key_bytes = key.encode()
        event_acks = [await self.bus.send(self.topic(EVENTS), key_bytes, ev.data) for ev in effects.events]
        other_acks = [
            await self.bus.send(self._request_topic(request), key_bytes, self._encode(request))
            for request in effects.requests
        ]
        trajectory = effects.trajectory
        if trajectory is not None:
            if isinstance(trajectory, TrajectoryCompleted):
                topic, tkey = "trajectories.completed", trajectory.meta.task_id
            else:
                topic, tkey = "trajectories.failed", trajectory.meta.episode_id
            other_acks.append(await self.bus.send(self.topic(topic), tkey.encode(), self._encode(trajectory)))
        offsets = [await ack for ack in event_acks]
        for ack in other_acks:
            await ack
        log_offset = max([row.log_offset, *offsets])
        if self.before_row_write is not None:
            self.before_row_write()
        written = Row(effects.state, row.partition, log_offset)
        self.rows[key] = written.encode()
        self._track(key, written)
        telemetry_episodes.appended(effects.state.episode, effects.events)
        if effects.events:
            self._count("appended")

    def _request_topic(self, request: Request) -> str:
        return self.topic(_REQUEST_TOPICS[type(request)])

    @staticmethod
    def _encode(record: Record) -> bytes:
        return default_codec().encode(record)

    async def _dead_letter(self, record: Input, reason: str, detail: str) -> None:
        self._count(f"deadletter.{reason}")
        metrics.dead_letter(reason, "streams")
        letter = DeadLetter(
            RecordMeta(self.origin.ids.new_id(), self.clock.now_us(), self.origin.producer),
            self.topic(record.topic),
            record.partition,
            record.offset,
            record.key,
            record.value,
            reason,
            detail[:2000],
        )
        try:
            ack = await self.bus.send(self.topic(DEADLETTER), record.key, self._encode(letter))
            await ack
        except Exception:
            log.exception("dead letter for %s[%d]@%d not sent", record.topic, record.partition, record.offset)


# -- entry point ---------------------------------------------------------------------------------------


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--bootstrap", help="Kafka bootstrap servers (default: the local stack's broker)")
    parser.add_argument("--run", default="", help="the run's topic prefix (default: none)")
    parser.add_argument("--data-dir", help="this worker's RocksDB folder (default: under TRIALOG_HOME)")
    parser.add_argument("--instance", default=f"{socket.gethostname()}-{os.getpid()}", help="worker name")
    parser.add_argument(
        "--standby-replicas", type=int, default=0, help="standby copies of each table partition (default 0)"
    )
    telemetry_config.add_arguments(parser)


def run_from_args(args: argparse.Namespace) -> int:
    from ops.telemetry.setup import start_from_args
    from streams.app import Settings, run_worker

    bootstrap = args.bootstrap
    if not bootstrap:
        from ops.stack.stack import StackConfig

        bootstrap = StackConfig.load().kafka.bootstrap
    data_dir = args.data_dir
    if not data_dir:
        from ops.paths import Paths

        data_dir = str(Paths.from_env().component("streams") / f"data-{args.instance}")
    settings = Settings(bootstrap, args.run, data_dir, args.instance, args.standby_replicas)
    start_from_args(args, "trialog-streams")
    return run_worker(settings)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m streams.worker", description="the streams worker")
    add_arguments(parser)
    return run_from_args(parser.parse_args(argv))


if __name__ == "__main__":
    raise SystemExit(main())
