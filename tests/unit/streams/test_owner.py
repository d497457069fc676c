"""The episode owner's decisions: a whole episode, and every way an input is refused or times out."""

from __future__ import annotations

import dataclasses

import pytest

from schemas.actions import InvalidReply, RunCommand, Submit
from schemas.chain import verify_chain
from schemas.codec import default_codec
from schemas.common import GENESIS_HASH, EpisodeConfig, FailureClass
from schemas.events import (
    ActionProposed,
    EpisodeCompleted,
    EpisodeFailed,
    EpisodeStarted,
    RewardAssigned,
    StepExecuted,
)
from schemas.fold import fold
from schemas.requests import PolicyRequest, SandboxRequest, VerifyRequest
from schemas.state import Phase
from schemas.trajectories import TrajectoryCompleted, TrajectoryFailed
from streams.owner import (
    Effects,
    OwnerState,
    Rejection,
    RequestKind,
    outstanding_request,
    resume,
)
from streams.timers import answer_deadline_us
from tests.unit.streams.world import (
    CONFIG,
    TASK,
    VERSION,
    Driver,
    Input,
    Tick,
    Workers,
    abort_command,
    start_command,
)


def assert_consistent(driver: Driver) -> None:
    """The owner's state is the fold of what it emitted, and the emitted bytes form one valid chain."""
    appended = driver.appended
    assert fold((a.event, a.digest) for a in appended) == driver.state.episode
    report = verify_chain([a.data for a in appended], default_codec())
    assert report.ok and report.duplicates == 0
    for a in appended:
        assert default_codec().encode(a.event) == a.data


def play_to_completion(driver: Driver, workers: Workers) -> Effects:
    driver.feed(start_command())
    driver.feed(workers.act(driver.last_request, RunCommand("echo hi > f")))
    driver.feed(workers.execute(driver.last_request))
    driver.feed(workers.act(driver.last_request, Submit("done"), policy_version=4))
    return driver.feed(workers.grade(driver.last_request, 0.8))


def test_a_whole_episode_completes_with_one_chain_and_a_trajectory() -> None:
    driver, workers = Driver(), Workers()
    start = driver.feed(start_command())
    assert [type(a.event) for a in start.events] == [EpisodeStarted]
    first = start.requests[0]
    assert isinstance(first, PolicyRequest)
    assert (first.meta.step, first.meta.attempt, first.meta.prev_hash) == (0, 1, start.events[0].digest)
    assert start.events[0].event.meta.prev_hash == GENESIS_HASH

    run = driver.feed(workers.act(first, RunCommand("echo hi > f")))
    sandbox = run.requests[0]
    assert isinstance(sandbox, SandboxRequest)
    assert sandbox.meta.snapshot_id == TASK.initial_snapshot_id  # step 0 restores the task's tree
    assert (sandbox.timeout_s, sandbox.image) == (CONFIG.sandbox_timeout_s, TASK.image)

    executed = driver.feed(workers.execute(sandbox))
    second = executed.requests[0]
    assert isinstance(second, PolicyRequest)
    assert (second.meta.step, second.meta.attempt, len(second.history)) == (1, 1, 1)
    assert second.meta.snapshot_id == "snap-0-1"

    submitted = driver.feed(workers.act(second, Submit("done"), policy_version=4))
    verify = submitted.requests[0]
    assert isinstance(verify, VerifyRequest)
    assert (verify.meta.snapshot_id, verify.timeout_s, verify.meta.step) == ("snap-0-1", TASK.timeout_s, 1)

    done = driver.feed(workers.grade(verify, 0.8))
    completed = done.events[-1].event
    assert isinstance(completed, EpisodeCompleted)
    assert (completed.reward, completed.steps) == (0.8, 1)
    assert completed.duration_us == driver.now_us - start.events[0].event.meta.occurred_at_us
    trajectory = done.trajectory
    assert isinstance(trajectory, TrajectoryCompleted)
    assert trajectory.meta.prev_hash == done.events[-1].digest
    assert len(trajectory.steps) == 2 and trajectory.steps[1].result is None
    assert (trajectory.min_policy_version, trajectory.max_policy_version) == (3, 4)
    assert trajectory.instruction == TASK.instruction and trajectory.group_id == "g-1"
    assert driver.state.episode.phase is Phase.COMPLETED and driver.state.outstanding is None
    assert done.requests == () and all(out.rejected is None for out in driver.effects)
    assert_consistent(driver)


def test_every_answer_delivered_twice_is_rejected_and_changes_nothing() -> None:
    driver, workers = Driver(), Workers()
    delivered: list[Input] = [start_command()]
    driver.feed(delivered[0])
    for make in (workers.act, workers.execute, lambda r: workers.act(r, Submit()), workers.grade):
        delivered.append(make(driver.last_request))
        driver.feed(delivered[-1])
        for again in delivered:
            before = driver.state
            out = driver.feed(again)
            assert out.rejected is Rejection.DUPLICATE
            assert (out.state, out.events, out.requests, out.trajectory) == (before, (), (), None)
    assert driver.state.episode.phase is Phase.COMPLETED
    assert_consistent(driver)


def test_a_stale_attempt_is_rejected_after_a_reissue_and_after_the_slot_is_filled() -> None:
    driver, workers = Driver(), Workers()
    driver.feed(start_command())
    first = driver.last_request
    late = workers.act(first)
    deadline = driver.state.outstanding.deadline_us if driver.state.outstanding else 0
    reissued = driver.feed(Tick(deadline)).requests[0]
    assert (reissued.meta.step, reissued.meta.attempt, reissued.meta.prev_hash) == (
        0,
        2,
        first.meta.prev_hash,
    )
    assert driver.feed(late).rejected is Rejection.STALE_ATTEMPT
    assert driver.feed(workers.act(reissued)).rejected is None
    assert driver.feed(late).rejected is Rejection.STALE_ATTEMPT  # the slot is filled by attempt 2
    assert_consistent(driver)


def test_an_answer_from_another_chain_head_step_or_episode_is_rejected() -> None:
    driver, workers = Driver(), Workers()
    driver.feed(start_command())
    good = workers.act(driver.last_request)
    cases = {
        Rejection.WRONG_CHAIN_HEAD: dataclasses.replace(good.meta, event_id="x1", prev_hash="f" * 64),
        Rejection.WRONG_STEP: dataclasses.replace(good.meta, event_id="x2", step=1),
        Rejection.UNKNOWN_EPISODE: dataclasses.replace(good.meta, event_id="x3", episode_id="ep-other"),
    }
    for reason, meta in cases.items():
        before = driver.state
        out = driver.feed(dataclasses.replace(good, meta=meta))
        assert out.rejected is reason and out.state == before and out.events == ()
    assert driver.feed(workers.execute(_fake_sandbox(driver))).rejected is Rejection.NOT_OUTSTANDING
    assert driver.feed(good).rejected is None
    assert_consistent(driver)


def _fake_sandbox(driver: Driver) -> SandboxRequest:
    request = driver.last_request
    return SandboxRequest(request.meta, "img", RunCommand("x"), 1.0, 10)


def test_answers_before_the_start_are_for_an_unknown_episode() -> None:
    driver, workers = Driver(), Workers()
    other = Driver()
    other.feed(start_command())
    assert driver.feed(workers.act(other.last_request)).rejected is Rejection.UNKNOWN_EPISODE
    assert driver.feed(abort_command()).rejected is Rejection.UNKNOWN_EPISODE


def _play_until(driver: Driver, workers: Workers, kind: RequestKind) -> None:
    driver.feed(start_command())
    if kind is RequestKind.SANDBOX:
        driver.feed(workers.act(driver.last_request))
    elif kind is RequestKind.VERIFY:
        driver.feed(workers.act(driver.last_request, Submit()))


@pytest.mark.parametrize(
    ("kind", "failure"),
    [
        (RequestKind.POLICY, FailureClass.POLICY_TIMEOUT),
        (RequestKind.SANDBOX, FailureClass.SANDBOX_TIMEOUT),
        (RequestKind.VERIFY, FailureClass.VERIFIER_ERROR),
    ],
)
def test_timeouts_reissue_with_growing_deadlines_then_fail_with_their_class(
    kind: RequestKind, failure: FailureClass
) -> None:
    driver, workers = Driver(), Workers()
    _play_until(driver, workers, kind)
    waits = []
    for attempt in range(1, CONFIG.max_attempts + 1):
        out = driver.state.outstanding
        assert out is not None and (out.kind, out.attempt) == (kind, attempt)
        waits.append(out.deadline_us - out.issued_at_us)
        assert driver.feed(Tick(out.deadline_us - 1)).state == driver.state  # not yet due: nothing
        assert driver.effects[-1].requests == () and driver.effects[-1].events == ()
        due = driver.feed(Tick(out.deadline_us))
        if attempt < CONFIG.max_attempts:
            (request,) = due.requests
            assert (request.meta.attempt, request.meta.step) == (attempt + 1, out.step)
            assert due.events == ()
    assert waits == sorted(set(waits))  # strictly growing
    assert waits[0] == answer_deadline_us(0, _base(kind), 1)
    failed = driver.effects[-1]
    (event,) = (a.event for a in failed.events)
    assert isinstance(event, EpisodeFailed) and event.failure is failure and event.retryable
    assert isinstance(failed.trajectory, TrajectoryFailed) and failed.trajectory.failure is failure
    assert failed.requests == () and driver.state.outstanding is None
    assert driver.feed(Tick(driver.now_us + 10**12)).events == ()
    assert_consistent(driver)


def _base(kind: RequestKind) -> float:
    if kind is RequestKind.POLICY:
        return CONFIG.policy_timeout_s
    if kind is RequestKind.SANDBOX:
        return CONFIG.sandbox_timeout_s
    return max(CONFIG.verify_timeout_s, TASK.timeout_s)


def test_nothing_outstanding_means_a_tick_does_nothing() -> None:
    driver = Driver()
    assert driver.feed(Tick(10**18)) == Effects(OwnerState.new("ep-0001"))


def test_abort_fails_the_episode_once() -> None:
    driver, workers = Driver(), Workers()
    driver.feed(start_command())
    driver.feed(workers.act(driver.last_request))
    pending = driver.last_request
    aborted = driver.feed(abort_command("operator stop"))
    (event,) = (a.event for a in aborted.events)
    assert isinstance(event, EpisodeFailed) and event.failure is FailureClass.ABORTED and not event.retryable
    assert isinstance(aborted.trajectory, TrajectoryFailed) and len(aborted.trajectory.steps) == 1
    assert aborted.trajectory.meta.prev_hash == aborted.events[0].digest
    assert driver.feed(abort_command()).rejected is Rejection.ENDED
    assert driver.feed(workers.execute(pending)).rejected is Rejection.ENDED
    assert driver.feed(Tick(10**18)).events == ()
    assert_consistent(driver)


@pytest.mark.parametrize("known", [False, True])
def test_an_unknown_or_changed_task_fails_the_episode_before_it_starts(known: bool) -> None:
    driver = Driver()
    task = dataclasses.replace(TASK, task_version="0" * 64) if known else None
    out = driver.feed(start_command(), task=task)
    (event,) = (a.event for a in out.events)
    assert isinstance(event, EpisodeFailed) and event.failure is FailureClass.INVALID_TASK
    assert event.meta.prev_hash == GENESIS_HASH and event.meta.task_version == VERSION
    assert (
        isinstance(out.trajectory, TrajectoryFailed) and out.trajectory.meta.prev_hash == out.events[0].digest
    )
    assert out.requests == () and driver.state.episode.phase is Phase.FAILED
    again = driver.feed(start_command())
    assert again.rejected is Rejection.DUPLICATE and again.events == ()
    assert_consistent(driver)


def test_a_second_start_is_a_duplicate_never_a_second_episode_started() -> None:
    driver = Driver()
    driver.feed(start_command())
    assert driver.feed(start_command()).rejected is Rejection.DUPLICATE
    assert sum(isinstance(a.event, EpisodeStarted) for a in driver.appended) == 1


def test_at_the_step_limit_the_last_action_is_executed_then_the_workspace_graded() -> None:
    config = EpisodeConfig(max_steps=2)
    driver, workers = Driver(), Workers()
    driver.feed(start_command(config))
    for _ in range(2):
        driver.feed(workers.act(driver.last_request))
        last = driver.feed(workers.execute(driver.last_request))
    assert [type(a.event) for a in last.events] == [StepExecuted]
    (verify,) = last.requests
    assert isinstance(verify, VerifyRequest) and verify.meta.step == 2
    assert verify.meta.snapshot_id == "snap-1-1"  # the workspace after the last executed step
    assert driver.state.episode.phase is Phase.AWAITING_VERIFICATION
    graded = driver.feed(workers.grade(verify, 0.25))
    assert [type(a.event) for a in graded.events] == [RewardAssigned, EpisodeCompleted]
    trajectory = graded.trajectory
    assert isinstance(trajectory, TrajectoryCompleted) and trajectory.reward == 0.25
    assert [s.result is not None for s in trajectory.steps] == [True, True]  # no submit was invented
    assert not any(isinstance(s.action.action, Submit) for s in trajectory.steps)
    assert_consistent(driver)


def test_a_truncated_episode_resumed_from_its_state_asks_for_the_grade_again() -> None:
    driver, workers = Driver(), Workers()
    driver.feed(start_command(EpisodeConfig(max_steps=1)))
    driver.feed(workers.act(driver.last_request))
    verify = driver.feed(workers.execute(driver.last_request)).requests[0]
    resumed = resume(driver.state, origin=driver.origin, now_us=driver.now_us)
    (again,) = resumed.requests
    assert isinstance(again, VerifyRequest)
    assert dataclasses.replace(again.meta, event_id=verify.meta.event_id) == verify.meta  # the same key


def test_an_action_past_the_step_limit_is_refused() -> None:
    driver, workers = Driver(), Workers()
    driver.feed(start_command(EpisodeConfig(max_steps=1)))
    first = driver.last_request
    driver.feed(workers.act(first))
    driver.feed(workers.execute(driver.last_request))
    late = dataclasses.replace(
        first, meta=dataclasses.replace(first.meta, step=1, prev_hash=driver.state.episode.head_hash)
    )
    assert driver.feed(workers.act(late)).rejected is Rejection.NOT_OUTSTANDING


def test_an_invalid_reply_is_a_step_answered_by_the_owner_without_a_sandbox() -> None:
    driver, workers = Driver(), Workers()
    driver.feed(start_command())
    first = driver.last_request
    invalid = InvalidReply.of("Your reply has no tool call.", "I think we should look at the code")
    out = driver.feed(workers.act(first, invalid))
    assert [type(a.event) for a in out.events] == [ActionProposed, StepExecuted]
    result = out.events[1].event
    assert isinstance(result, StepExecuted)
    assert (result.exit_code, result.stderr.text, result.stdout.text) == (2, invalid.error, "")
    assert result.meta.step == 0 and result.meta.snapshot_id == TASK.initial_snapshot_id
    (second,) = out.requests
    assert isinstance(second, PolicyRequest) and second.meta.step == 1
    assert second.history[0].action.action == invalid and second.history[0].result == result
    assert driver.feed(workers.act(first, invalid)).rejected is Rejection.DUPLICATE
    assert_consistent(driver)


def test_an_invalid_reply_as_the_last_allowed_step_is_graded() -> None:
    driver, workers = Driver(), Workers()
    driver.feed(start_command(EpisodeConfig(max_steps=1)))
    out = driver.feed(workers.act(driver.last_request, InvalidReply.of("no tool call", "hmm")))
    (verify,) = out.requests
    assert isinstance(verify, VerifyRequest)
    assert isinstance(driver.feed(workers.grade(verify, -0.2)).trajectory, TrajectoryCompleted)
    assert_consistent(driver)


def test_an_invalid_reply_whose_result_was_lost_is_answered_on_resume() -> None:
    driver, workers = Driver(), Workers()
    driver.feed(start_command())
    driver.feed(workers.act(driver.last_request, InvalidReply.of("no tool call", "hmm")))
    # The worker crashed after appending the action but before its result: the state is rebuilt from the log.
    appended = [(a.event, a.digest) for a in driver.appended]
    state = dataclasses.replace(driver.state, episode=fold(appended[:-1]))
    assert state.episode.phase is Phase.AWAITING_EXECUTION
    resumed = resume(state, origin=driver.origin, now_us=driver.now_us)
    assert [type(a.event) for a in resumed.events] == [StepExecuted]
    assert isinstance(resumed.requests[0], PolicyRequest)


def test_a_submit_as_the_last_allowed_action_is_graded() -> None:
    driver, workers = Driver(), Workers()
    driver.feed(start_command(EpisodeConfig(max_steps=2)))
    driver.feed(workers.act(driver.last_request))
    driver.feed(workers.execute(driver.last_request))
    driver.feed(workers.act(driver.last_request, Submit()))
    assert isinstance(driver.feed(workers.grade(driver.last_request)).trajectory, TrajectoryCompleted)


def test_no_steps_allowed_fails_right_after_the_start() -> None:
    out = Driver().feed(start_command(EpisodeConfig(max_steps=0)))
    assert [type(a.event) for a in out.events] == [EpisodeStarted, EpisodeFailed]
    assert out.requests == ()


def test_a_new_owner_reissues_the_outstanding_request_with_the_same_key() -> None:
    driver, workers = Driver(), Workers()
    driver.feed(start_command())
    driver.feed(workers.act(driver.last_request))
    sent = driver.last_request
    restored = OwnerState.from_record(driver.state.to_record())
    assert restored == driver.state
    again = outstanding_request(restored, origin=driver.origin, now_us=driver.now_us)
    assert isinstance(again, SandboxRequest)
    assert dataclasses.replace(again, meta=sent.meta) == sent
    key = ("episode_id", "step", "attempt", "prev_hash", "snapshot_id")
    assert [getattr(again.meta, k) for k in key] == [getattr(sent.meta, k) for k in key]
    assert driver.feed(workers.execute(again)).rejected is None


def test_state_round_trips_as_a_plain_record_at_every_point() -> None:
    driver, workers = Driver(), Workers()
    play_to_completion(driver, workers)
    for out in driver.effects:
        assert OwnerState.from_record(out.state.to_record()) == out.state
