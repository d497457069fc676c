"""The streams worker's core on a fake bus and a dict table: effects order, dead letters, crash recovery."""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Awaitable, Iterator

import pytest

from schemas.actions import Submit
from schemas.chain import digest, verify_chain
from schemas.codec import default_codec
from schemas.common import FailureClass
from schemas.deadletter import DeadLetter
from schemas.events import EPISODE_EVENT_TYPES, EpisodeEvent
from schemas.fold import fold
from schemas.origin import Origin
from schemas.record import Record
from schemas.requests import PolicyRequest, SamplingParams, SandboxRequest, VerifyRequest
from schemas.state import Phase
from schemas.trajectories import TrajectoryCompleted, TrajectoryFailed
from streams.owner import OwnerState, TaskInfo
from streams.ports import Headers, Input
from streams.rows import Row
from streams.worker import DEAD_LETTER_VALUE_MAX, EpisodeWorker
from tests.unit.streams.fake_rows import Crash, Rows
from tests.unit.streams.world import (
    CONFIG,
    EPISODE,
    T0,
    TASK,
    Workers,
    abort_command,
    owner_origin,
    start_command,
)

CODEC = default_codec()


class Log:
    """Every topic as one partition (0); `send` appends at once and acks with the offset."""

    def __init__(self) -> None:
        self.topics: dict[str, list[tuple[bytes | None, bytes]]] = {}
        self.fail_after: int | None = None  # crash after this many more sends
        self.stamps: list[float | None] = []  # each send's create time, in order

    async def send(
        self,
        topic: str,
        key: bytes | None,
        value: bytes,
        headers: Headers = (),
        timestamp_s: float | None = None,
    ) -> Awaitable[int]:
        if self.fail_after is not None:
            if self.fail_after == 0:
                raise Crash(topic)
            self.fail_after -= 1
        self.stamps.append(timestamp_s)
        records = self.topics.setdefault(topic, [])
        records.append((key, value))
        future: asyncio.Future[int] = asyncio.get_running_loop().create_future()
        future.set_result(len(records) - 1)
        return future

    def values(self, topic: str) -> list[bytes]:
        return [value for _key, value in self.topics.get(topic, [])]

    def records(self, topic: str) -> list[Record]:
        return [CODEC.decode(value) for value in self.values(topic)]

    def read_events(self, partition: int, start: int) -> Iterator[tuple[int, bytes | None, bytes | None]]:
        for offset, (key, value) in enumerate(self.topics.get("episode.events", [])):
            if offset >= start:
                yield offset, key, value


class Tasks:
    def __init__(self, *tasks: TaskInfo) -> None:
        self.tasks = {task.task_id: task for task in tasks}

    def get(self, task_id: str, *, refresh: bool = True) -> TaskInfo | None:
        return self.tasks.get(task_id)


class Clock:
    def __init__(self) -> None:
        self.now = T0

    def now_us(self) -> int:
        self.now += 1_000
        return self.now


@dataclasses.dataclass
class World:
    log: Log = dataclasses.field(default_factory=Log)
    rows: Rows = dataclasses.field(default_factory=Rows)
    clock: Clock = dataclasses.field(default_factory=Clock)
    workers: Workers = dataclasses.field(default_factory=Workers)
    origin: Origin = dataclasses.field(default_factory=owner_origin)
    offsets: dict[str, int] = dataclasses.field(default_factory=dict)

    def worker(self, sampling: SamplingParams | None = None) -> EpisodeWorker:
        """A fresh worker process over the same broker and table (as after a restart)."""
        worker = EpisodeWorker(
            rows=self.rows,
            bus=self.log,
            tasks=Tasks(TASK),
            read_events=self.log.read_events,
            origin=self.origin,
            clock=self.clock,
            sampling=sampling,
        )
        asyncio.run(worker.sync_assignment({0}))
        return worker

    def deliver(self, worker: EpisodeWorker, topic: str, record: Record | bytes) -> None:
        value = record if isinstance(record, bytes) else CODEC.encode(record)
        offset = self.offsets.get(topic, 0)
        self.offsets[topic] = offset + 1
        asyncio.run(worker.handle(Input(topic, 0, offset, EPISODE.encode(), value)))

    def events(self) -> list[EpisodeEvent]:
        return [e for e in self.log.records("episode.events") if isinstance(e, EPISODE_EVENT_TYPES)]

    def requests(self, topic: str) -> list[Record]:
        return self.log.records(topic)

    def dead(self) -> list[DeadLetter]:
        return [d for d in self.log.records("deadletter") if isinstance(d, DeadLetter)]

    def state(self) -> OwnerState:
        return Row.decode(self.rows[EPISODE]).state


def _last(world: World, topic: str) -> Record:
    return world.requests(topic)[-1]


def _play(world: World, worker: EpisodeWorker) -> None:
    """Start, one `ls` step, submit, grade."""
    world.deliver(worker, "episode.commands", start_command())
    policy = _last(world, "policy.requests")
    assert isinstance(policy, PolicyRequest)
    world.deliver(worker, "policy.results", world.workers.act(policy))
    sandbox = _last(world, "sandbox.requests")
    assert isinstance(sandbox, SandboxRequest)
    world.deliver(worker, "sandbox.results", world.workers.execute(sandbox))
    policy = _last(world, "policy.requests")
    assert isinstance(policy, PolicyRequest) and policy.meta.step == 1
    world.deliver(worker, "policy.results", world.workers.act(policy, Submit("done")))
    verify = _last(world, "verify.requests")
    assert isinstance(verify, VerifyRequest)
    world.deliver(worker, "verify.results", world.workers.grade(verify))


def _assert_completed_log(world: World) -> None:
    values = world.log.values("episode.events")
    report = verify_chain(values, CODEC)
    assert report.ok and report.duplicates == 0, report
    events = world.events()
    assert len({e.meta.event_id for e in events}) == len(events)
    state = fold((e, digest(v)) for e, v in zip(events, values, strict=True))
    assert state.phase is Phase.COMPLETED
    assert [type(e).__name__ for e in events] == [
        "EpisodeStarted",
        "ActionProposed",
        "StepExecuted",
        "ActionProposed",
        "RewardAssigned",
        "EpisodeCompleted",
    ]


def test_an_episode_runs_to_completion_and_rows_follow_the_log() -> None:
    world = World()
    worker = world.worker()
    _play(world, worker)
    _assert_completed_log(world)
    (trajectory,) = world.log.records("trajectories.completed")
    assert isinstance(trajectory, TrajectoryCompleted) and trajectory.reward == 1.0
    assert world.log.topics["trajectories.completed"][0][0] == TASK.task_id.encode()
    row = Row.decode(world.rows[EPISODE])
    assert (
        row.state.episode.phase is Phase.COMPLETED
        and row.watermark == 3
        and len(row.events) == 6
        and row.partition == 0
    )
    assert world.dead() == []


def test_a_duplicate_answer_is_counted_as_ignored_not_dead_lettered_and_appends_nothing() -> None:
    world = World()
    worker = world.worker()
    world.deliver(worker, "episode.commands", start_command())
    policy = _last(world, "policy.requests")
    assert isinstance(policy, PolicyRequest)
    answer = world.workers.act(policy)
    world.deliver(worker, "policy.results", answer)
    world.deliver(worker, "policy.results", answer)
    world.deliver(worker, "episode.commands", start_command())  # a command redelivered: the same
    assert len(world.events()) == 2
    assert world.dead() == [] and worker.stats.get("ignored.duplicate") == 2
    assert len(world.requests("sandbox.requests")) == 1


def _at_sandbox(world: World, worker: EpisodeWorker) -> SandboxRequest:
    world.deliver(worker, "episode.commands", start_command())
    policy = _last(world, "policy.requests")
    assert isinstance(policy, PolicyRequest)
    world.deliver(worker, "policy.results", world.workers.act(policy))
    sandbox = _last(world, "sandbox.requests")
    assert isinstance(sandbox, SandboxRequest)
    return sandbox


def test_a_sandbox_failure_answer_retries_the_step_or_fails_the_episode() -> None:
    world = World()
    worker = world.worker()
    sandbox = _at_sandbox(world, worker)
    world.deliver(worker, "sandbox.results", world.workers.fail(sandbox, FailureClass.SANDBOX_CRASH))
    retry = _last(world, "sandbox.requests")
    assert isinstance(retry, SandboxRequest) and (retry.meta.step, retry.meta.attempt) == (0, 2)
    world.deliver(worker, "sandbox.results", world.workers.fail(retry, FailureClass.INVALID_ACTION))
    (trajectory,) = world.log.records("trajectories.failed")
    assert isinstance(trajectory, TrajectoryFailed) and trajectory.failure is FailureClass.INVALID_ACTION
    assert world.state().episode.phase is Phase.FAILED and world.dead() == []
    assert [type(e).__name__ for e in world.events()][-1] == "EpisodeFailed"


def test_a_failure_class_a_sandbox_may_not_report_is_dead_lettered() -> None:
    world = World()
    worker = world.worker()
    sandbox = _at_sandbox(world, worker)
    world.deliver(worker, "sandbox.results", world.workers.fail(sandbox, FailureClass.STEP_LIMIT))
    assert [d.reason for d in world.dead()] == ["unexpected_failure"]
    assert world.state().episode.phase is Phase.AWAITING_EXECUTION
    failed = world.workers.fail(sandbox, FailureClass.INVALID_ACTION)
    world.deliver(worker, "policy.results", failed)  # a failure answer on another kind's topic
    assert [d.reason for d in world.dead()][-1] == "unexpected_type"


def test_bad_records_are_dead_lettered_with_their_reason() -> None:
    world = World()
    worker = world.worker()
    world.deliver(worker, "episode.commands", b"\xc3\x01" + bytes(8) + b"junk")
    world.deliver(worker, "policy.results", b"x")
    world.deliver(worker, "policy.results", start_command())  # a command on an answer topic
    reasons = [d.reason for d in world.dead()]
    assert reasons[0] in {"unknown_fingerprint", "truncated"}
    assert reasons[1:] == ["too_short", "unexpected_type"]
    letter = world.dead()[1]
    assert (letter.topic, letter.partition, letter.offset, letter.value) == ("policy.results", 0, 0, b"x")
    assert world.events() == []


def test_a_dead_letter_of_an_input_near_the_record_limit_stays_under_it() -> None:
    world = World()
    worker = world.worker()
    huge = b"\xc3\x01" + bytes(8) + b"x" * (1024 * 1024 - 100)  # as large as the broker let it through
    world.deliver(worker, "policy.results", huge)
    (letter,) = world.dead()
    assert letter.value == huge[:DEAD_LETTER_VALUE_MAX] and f"cut from {len(huge)} bytes" in letter.detail
    assert (letter.topic, letter.offset) == ("policy.results", 0)  # where the whole input still is


def test_requests_carry_the_runs_sampling_parameters_with_the_episodes_seed() -> None:
    world = World()
    run = SamplingParams(temperature=0.7, top_p=0.9, max_tokens=48, seed=999)
    command = start_command()
    world.deliver(world.worker(run), "episode.commands", command)
    (request,) = world.requests("policy.requests")
    assert isinstance(request, PolicyRequest)
    assert request.sampling == SamplingParams(temperature=0.7, top_p=0.9, max_tokens=48, seed=command.seed)
    # A restarted worker rebuilds the row from the log with the same parameters.
    world.deliver(world.worker(run), "policy.results", world.workers.act(request))
    assert world.state().sampling == request.sampling


def test_a_start_for_an_unknown_task_fails_the_episode() -> None:
    world = World()
    worker = world.worker()
    worker.tasks = Tasks()
    world.deliver(worker, "episode.commands", start_command())
    (trajectory,) = world.log.records("trajectories.failed")
    assert isinstance(trajectory, TrajectoryFailed) and trajectory.failure.value == "invalid_task"


@pytest.mark.parametrize("crash_at", ["start", "action", "executed", "reward"])
def test_a_crash_between_the_appends_and_the_table_write_leaves_no_duplicate(crash_at: str) -> None:
    """The row write dies after the effects were acked; the restarted worker folds the log's tail, and the
    redelivered input is a duplicate: the log holds every event once and the episode completes."""
    world = World()
    worker = world.worker()
    inputs = {
        "start": "episode.commands",
        "action": "policy.results",
        "executed": "sandbox.results",
        "reward": "verify.results",
    }
    target = inputs[crash_at]
    original = world.deliver
    crashed: list[tuple[str, Record | bytes]] = []

    def deliver(w: EpisodeWorker, topic: str, record: Record | bytes) -> None:
        nonlocal worker
        if topic == target and not crashed:
            world.rows.crash_next = True
            with pytest.raises(Crash):
                original(w, topic, record)  # the process dies: restart it and redeliver the input
            crashed.append((topic, record))
            worker = world.worker()
            original(worker, topic, record)
            return
        original(worker, topic, record)

    world.deliver = deliver  # type: ignore[method-assign,assignment]
    _play(world, worker)
    _assert_completed_log(world)
    assert world.dead() == [] and worker.stats.get("ignored.duplicate") == 1
    assert world.state().episode.phase is Phase.COMPLETED


def test_restart_reissues_the_outstanding_request_with_the_same_key() -> None:
    world = World()
    worker = world.worker()
    world.deliver(worker, "episode.commands", start_command())
    (first,) = world.requests("policy.requests")
    world.worker()
    again = world.requests("policy.requests")[-1]
    assert isinstance(first, PolicyRequest) and isinstance(again, PolicyRequest)
    assert (again.meta.step, again.meta.attempt, again.meta.prev_hash) == (
        first.meta.step,
        first.meta.attempt,
        first.meta.prev_hash,
    )
    assert len(world.events()) == 1


def test_a_tick_past_the_deadline_reissues_then_fails() -> None:
    world = World()
    worker = world.worker()
    world.deliver(worker, "episode.commands", start_command())
    for attempt in range(2, CONFIG.max_attempts + 1):
        world.clock.now = world.state().outstanding.deadline_us  # type: ignore[union-attr]
        asyncio.run(worker.tick())
        request = world.requests("policy.requests")[-1]
        assert isinstance(request, PolicyRequest) and request.meta.attempt == attempt
    asyncio.run(worker.tick())  # not yet due: nothing
    assert len(world.requests("policy.requests")) == CONFIG.max_attempts
    world.clock.now = world.state().outstanding.deadline_us  # type: ignore[union-attr]
    asyncio.run(worker.tick())
    (trajectory,) = world.log.records("trajectories.failed")
    assert isinstance(trajectory, TrajectoryFailed) and trajectory.failure.value == "policy_timeout"
    assert world.state().episode.phase is Phase.FAILED


def test_ticks_skip_partitions_not_recovered() -> None:
    world = World()
    worker = world.worker()
    world.deliver(worker, "episode.commands", start_command())
    asyncio.run(worker.sync_assignment(set()))
    world.clock.now = world.state().outstanding.deadline_us  # type: ignore[union-attr]
    asyncio.run(worker.tick())
    assert len(world.requests("policy.requests")) == 1


def test_rows_round_trip() -> None:
    world = World()
    worker = world.worker()
    _play(world, worker)
    data = world.rows[EPISODE]
    assert Row.decode(data).encode() == data
    fresh = Row(OwnerState.new("e"), 3)
    assert Row.decode(fresh.encode()) == fresh


def test_a_crash_between_two_appends_is_finished_by_the_next_owner() -> None:
    """RewardAssigned reached the log, EpisodeCompleted did not: the next owner appends it."""
    world = World()
    worker = world.worker()
    world.deliver(worker, "episode.commands", start_command())
    policy = _last(world, "policy.requests")
    assert isinstance(policy, PolicyRequest)
    world.deliver(worker, "policy.results", world.workers.act(policy, Submit("done")))
    verify = _last(world, "verify.requests")
    assert isinstance(verify, VerifyRequest)
    grade = world.workers.grade(verify)
    world.log.fail_after = 1  # RewardAssigned is sent, then the process dies
    with pytest.raises(Crash):
        world.deliver(worker, "verify.results", grade)
    world.log.fail_after = None
    assert [type(e).__name__ for e in world.events()][-1] == "RewardAssigned"
    restarted = world.worker()
    assert [type(e).__name__ for e in world.events()][-2:] == ["RewardAssigned", "EpisodeCompleted"]
    assert len(world.log.records("trajectories.completed")) == 1
    world.deliver(restarted, "verify.results", grade)  # redelivered
    assert len(world.events()) == 4 and verify_chain(world.log.values("episode.events"), CODEC).ok
    assert world.dead() == [] and restarted.stats.get("ignored.duplicate") == 1
    assert world.state().episode.phase is Phase.COMPLETED and world.state().outstanding is None


def test_a_lost_row_of_an_ended_episode_republishes_its_trajectory() -> None:
    world = World()
    worker = world.worker()
    world.deliver(worker, "episode.commands", start_command())
    world.rows.crash_next = True
    with pytest.raises(Crash):
        world.deliver(worker, "episode.commands", abort_command())
    assert world.state().episode.phase is Phase.AWAITING_ACTION  # the row write was lost
    world.worker()
    (first, again) = world.log.records("trajectories.failed")
    assert isinstance(again, TrajectoryFailed) and again.failure.value == "aborted"
    assert isinstance(first, TrajectoryFailed) and first.meta.prev_hash == again.meta.prev_hash
    assert world.state().episode.phase is Phase.FAILED


def test_ticks_use_the_deadlines_indexed_at_recovery() -> None:
    world = World()
    world.deliver(world.worker(), "episode.commands", start_command())
    restarted = world.worker()  # rebuilds its index from the rows (and resends the request)
    assert set(restarted.deadlines) == {EPISODE}
    world.clock.now = world.state().outstanding.deadline_us  # type: ignore[union-attr]
    asyncio.run(restarted.tick())
    request = world.requests("policy.requests")[-1]
    assert isinstance(request, PolicyRequest) and request.meta.attempt == 2
