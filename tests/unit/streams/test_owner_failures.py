"""The owner's answers to a sandbox worker's failure answers: invalid actions, lost sandboxes, repeats."""

from __future__ import annotations

import dataclasses

import pytest

from schemas.actions import RunCommand
from schemas.common import FailureClass
from schemas.events import EpisodeFailed
from schemas.requests import SandboxRequest
from schemas.state import Phase
from schemas.trajectories import TrajectoryFailed
from streams.owner import BENIGN, Rejection
from tests.unit.streams.test_owner import assert_consistent
from tests.unit.streams.world import CONFIG, Driver, Workers, start_command


def _at_sandbox(driver: Driver, workers: Workers) -> SandboxRequest:
    """Play to the first sandbox request."""
    driver.feed(start_command())
    driver.feed(workers.act(driver.last_request, RunCommand("make")))
    request = driver.last_request
    assert isinstance(request, SandboxRequest)
    return request


def test_an_invalid_action_fails_the_episode_at_once_with_its_class() -> None:
    driver, workers = Driver(), Workers()
    request = _at_sandbox(driver, workers)
    out = driver.feed(workers.fail(request, FailureClass.INVALID_ACTION, "patch does not apply"))
    failed = out.events[-1].event
    assert isinstance(failed, EpisodeFailed) and failed.failure is FailureClass.INVALID_ACTION
    assert "patch does not apply" in failed.reason and not failed.retryable  # the policy is at fault
    assert isinstance(out.trajectory, TrajectoryFailed) and out.requests == ()
    assert driver.state.episode.phase is Phase.FAILED and driver.state.outstanding is None
    assert_consistent(driver)


def test_a_lost_sandbox_is_retried_as_the_next_attempt_then_fails_as_a_crash() -> None:
    driver, workers = Driver(), Workers()
    request = _at_sandbox(driver, workers)
    for attempt in range(1, CONFIG.max_attempts):
        out = driver.feed(workers.fail(request, FailureClass.SANDBOX_CRASH))
        (request,) = out.requests  # type: ignore[assignment]
        assert isinstance(request, SandboxRequest) and out.events == ()
        assert (request.meta.step, request.meta.attempt) == (0, attempt + 1)
        # The retry restores the same point: the snapshot before the step, the same chain head.
        assert request.meta.snapshot_id == "snap-init"
    out = driver.feed(workers.fail(request, FailureClass.SANDBOX_CRASH))
    failed = out.events[-1].event
    assert isinstance(failed, EpisodeFailed) and failed.failure is FailureClass.SANDBOX_CRASH
    assert failed.retryable  # the task is not at fault
    assert f"attempt {CONFIG.max_attempts}" in failed.reason
    assert_consistent(driver)


def test_a_retried_step_that_runs_continues_the_episode() -> None:
    driver, workers = Driver(), Workers()
    request = _at_sandbox(driver, workers)
    retry = driver.feed(workers.fail(request, FailureClass.SANDBOX_CRASH)).requests[0]
    out = driver.feed(workers.execute(retry))
    assert out.rejected is None and driver.state.episode.phase is Phase.AWAITING_ACTION
    assert driver.state.episode.snapshot_id == "snap-0-2"
    assert_consistent(driver)


def test_repeated_and_late_failure_answers_are_benign_and_change_nothing() -> None:
    driver, workers = Driver(), Workers()
    request = _at_sandbox(driver, workers)
    crash = workers.fail(request, FailureClass.SANDBOX_CRASH)
    retry = driver.feed(crash).requests[0]
    assert driver.feed(crash).rejected is Rejection.STALE_ATTEMPT  # attempt 2 is outstanding now
    driver.feed(workers.execute(retry))
    assert driver.feed(crash).rejected is Rejection.STALE_ATTEMPT  # the step ran on attempt 2
    invalid = workers.fail(driver_sandbox(driver, workers), FailureClass.INVALID_ACTION)
    driver.feed(invalid)
    before = driver.state
    for again in (invalid, crash):
        out = driver.feed(again)
        assert out.rejected in BENIGN and (out.state, out.events, out.requests) == (before, (), ())
    assert driver.feed(invalid).rejected is Rejection.DUPLICATE
    assert_consistent(driver)


def driver_sandbox(driver: Driver, workers: Workers) -> SandboxRequest:
    driver.feed(workers.act(driver.last_request, RunCommand("false")))
    request = driver.last_request
    assert isinstance(request, SandboxRequest)
    return request


@pytest.mark.parametrize("failure", [FailureClass.STEP_LIMIT, FailureClass.ABORTED, FailureClass.OTHER])
def test_a_failure_a_sandbox_may_not_report_is_suspicious(failure: FailureClass) -> None:
    driver, workers = Driver(), Workers()
    request = _at_sandbox(driver, workers)
    before = driver.state
    out = driver.feed(workers.fail(request, failure))
    assert out.rejected is Rejection.UNEXPECTED_FAILURE and out.rejected not in BENIGN
    assert (out.state, out.events) == (before, ())


def test_a_failure_answer_from_another_chain_head_or_episode_is_rejected() -> None:
    driver, workers = Driver(), Workers()
    crash = workers.fail(_at_sandbox(driver, workers), FailureClass.SANDBOX_CRASH)
    forged_head = dataclasses.replace(crash, meta=dataclasses.replace(crash.meta, prev_hash="f" * 64))
    other = dataclasses.replace(crash, meta=dataclasses.replace(crash.meta, episode_id="ep-other"))
    assert driver.feed(forged_head).rejected is Rejection.WRONG_CHAIN_HEAD
    assert driver.feed(other).rejected is Rejection.UNKNOWN_EPISODE
    assert driver.state.episode.phase is Phase.AWAITING_EXECUTION
