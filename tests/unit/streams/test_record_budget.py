"""Every record an episode produces stays under the broker's limit, whatever its steps print.

The sandbox's answers are made by the sandbox's own output capture (`sandbox_agent.output.BoundedOutput`,
the bytes of the step's request limit, decoded with replacement characters), and every size is measured on
the real codec's encoding: the events as appended, the requests as sent, the episodes row as stored and
the trajectory as published.
"""

from __future__ import annotations

import dataclasses

import pytest

from sandbox_agent.output import BoundedOutput
from schemas.actions import RunCommand, Submit
from schemas.budget import (
    BROKER_RECORD_LIMIT,
    EPISODE_LOG_BUDGET,
    LINES_MAX,
    RECORD_BUDGET,
    STREAM_INLINE_FLOOR,
    STREAM_INLINE_MAX,
    TAIL_MAX,
)
from schemas.codec import default_codec
from schemas.common import FailureClass, Output, Verdict
from schemas.events import RewardAssigned, StepExecuted
from schemas.fold import apply
from schemas.requests import PolicyRequest, SandboxRequest, VerifyRequest
from schemas.state import EpisodeState, Phase
from schemas.trajectories import TrajectoryCompleted, TrajectoryFailed
from streams.owner import Effects, Rejection, resume
from streams.rows import Row
from tests.unit.streams.world import CONFIG, Driver, Workers, start_command

pytestmark = pytest.mark.unit

CODEC = default_codec()
NOISE = bytes(range(128, 256)) * 512  # 64 KiB, not one byte of it valid UTF-8 on its own


def _printed(request: SandboxRequest, workers: Workers) -> StepExecuted:
    """The sandbox's answer to a step that printed 64 KiB of non-UTF-8 bytes to stdout and to stderr."""
    kept = BoundedOutput(request.output_limit_bytes)
    kept.write(NOISE)
    out = Output(kept.text(), kept.dropped > 0, kept.total)
    return dataclasses.replace(workers.execute(request), stdout=out, stderr=out)


def _sizes(effects: Effects) -> list[int]:
    sizes = [len(event.data) for event in effects.events]
    sizes += [len(CODEC.encode(request)) for request in effects.requests]
    if effects.trajectory is not None:
        sizes.append(len(CODEC.encode(effects.trajectory)))
    return sizes


def _run(max_steps: int, *, submit_at: int | None) -> tuple[Driver, list[int], list[int]]:
    """Drive an episode to its grade; returns the driver, the size of every record emitted and the size
    of the episodes row after each input."""
    driver, workers = Driver(), Workers()
    config = dataclasses.replace(CONFIG, max_steps=max_steps)
    out = driver.feed(start_command(config))
    records, rows, events = _sizes(out), [], [e.data for e in out.events]
    while out.trajectory is None:
        (request,) = out.requests
        if isinstance(request, PolicyRequest):
            step = request.meta.step
            action = Submit("done") if step == submit_at else RunCommand("cat /dev/urandom | head -c 65536")
            answer = workers.act(request, action)
        elif isinstance(request, SandboxRequest):
            answer = _printed(request, workers)
        else:
            assert isinstance(request, VerifyRequest)
            answer = workers.grade(request)
        out = driver.feed(answer)
        assert out.rejected is None, out.rejected
        events += [e.data for e in out.events]
        records += _sizes(out)
        assert driver.state.logged_bytes == sum(map(len, events))
        rows.append(len(Row(driver.state, 0, 0, tuple(events)).encode()))
    return driver, records, rows


def test_a_hundred_steps_of_64_kib_non_utf8_output_stay_under_the_record_budget() -> None:
    driver, records, rows = _run(101, submit_at=100)
    trajectory = driver.effects[-1].trajectory
    assert isinstance(trajectory, TrajectoryCompleted) and len(trajectory.steps) == 101
    assert max(records) <= RECORD_BUDGET < BROKER_RECORD_LIMIT, max(records)
    assert max(rows) <= RECORD_BUDGET, max(rows)
    print(f"largest record {max(records)} B, largest row {max(rows)} B, budget {RECORD_BUDGET} B")
    results = [step.result for step in trajectory.steps if step.result is not None]
    assert len(results) == 100
    for result in results:
        for output in (result.stdout, result.stderr):
            assert STREAM_INLINE_FLOOR - 16 <= len(output.text.encode()) <= STREAM_INLINE_MAX
            assert output.truncated and output.total_bytes == len(NOISE)
    # The first step keeps the episode's configured limit; the last ones the floor, the budget spent.
    assert len(results[0].stdout.text.encode()) <= CONFIG.output_limit_bytes
    assert len(results[-1].stdout.text.encode()) <= STREAM_INLINE_FLOOR


def test_an_episode_that_would_outgrow_the_budget_is_truncated_by_size_and_graded() -> None:
    driver, records, rows = _run(5_000, submit_at=None)
    trajectory = driver.effects[-1].trajectory
    assert isinstance(trajectory, TrajectoryCompleted)
    assert 100 < len(trajectory.steps) < 5_000  # stopped by size, long before the step limit
    assert driver.state.logged_bytes >= EPISODE_LOG_BUDGET
    assert max(records) <= RECORD_BUDGET and max(rows) <= RECORD_BUDGET, (max(records), max(rows))


def test_the_step_limit_a_sandbox_is_asked_for_is_what_its_answer_is_fitted_to() -> None:
    driver, workers = Driver(), Workers()
    driver.feed(start_command(dataclasses.replace(CONFIG, output_limit_bytes=10**9)))
    driver.feed(workers.act(driver.last_request))
    request = driver.last_request
    assert isinstance(request, SandboxRequest) and request.output_limit_bytes == STREAM_INLINE_MAX
    big = Output("\ufffd" * STREAM_INLINE_MAX, False, 3 * STREAM_INLINE_MAX)  # three times the limit
    answer = dataclasses.replace(workers.execute(request), stdout=big)
    out = driver.feed(answer)
    (executed,) = (e.event for e in out.events if isinstance(e.event, StepExecuted))
    assert len(executed.stdout.text.encode()) <= STREAM_INLINE_MAX and executed.stdout.truncated
    assert executed.meta.event_id == answer.meta.event_id
    assert driver.feed(answer).rejected is Rejection.DUPLICATE  # the unfitted redelivery is a duplicate


def test_an_action_over_the_action_limit_is_refused_not_appended() -> None:
    driver, workers = Driver(), Workers()
    driver.feed(start_command())
    huge = workers.act(driver.last_request, RunCommand("echo " + "x" * 200_000))
    out = driver.feed(huge)
    assert out.rejected is Rejection.OVERSIZED and out.events == ()


def _graded(reward: RewardAssigned) -> Driver:
    driver, workers = Driver(), Workers()
    driver.feed(start_command())
    driver.feed(workers.act(driver.last_request, Submit("done")))
    request = driver.last_request
    assert isinstance(request, VerifyRequest)
    driver.feed(dataclasses.replace(reward, meta=workers.grade(request).meta))
    return driver


def _reward(verdict: Verdict, reward: float, **lists: tuple[str, ...]) -> RewardAssigned:
    meta = Driver().origin.event_meta(
        run_id="", episode_id="", task_id="", task_version="", step=0, attempt=1, policy_version=0,
        prev_hash="", snapshot_id=None,
    )  # fmt: skip
    blank = RewardAssigned(meta, reward, verdict, 0, 3, (), (), "verifier-1")
    return dataclasses.replace(blank, **lists)


def test_an_ungradable_episode_fails_as_verifier_error_and_never_reaches_the_learner() -> None:
    """Before: a verdict `error` (0.0, not trainable) became EpisodeCompleted and a TrajectoryCompleted."""
    driver = _graded(_reward(Verdict.ERROR, 0.0))
    out = driver.effects[-1]
    kinds = [type(e.event).__name__ for e in out.events]
    assert kinds == ["RewardAssigned", "EpisodeFailed"]
    trajectory = out.trajectory
    assert isinstance(trajectory, TrajectoryFailed) and trajectory.failure is FailureClass.VERIFIER_ERROR
    assert "could not grade" in trajectory.reason and len(trajectory.steps) == 1
    assert driver.state.episode.phase is Phase.FAILED
    # A worker that lost the row after the RewardAssigned decides the same from the log alone.
    rewarded = dataclasses.replace(driver.state, episode=fold_events(driver, upto="RewardAssigned"))
    again = resume(rewarded, origin=driver.origin, now_us=driver.now_us)
    assert isinstance(again.trajectory, TrajectoryFailed)
    assert again.trajectory.failure is FailureClass.VERIFIER_ERROR


def fold_events(driver: Driver, upto: str) -> EpisodeState:
    state = EpisodeState.new(driver.state.episode.episode_id)
    for appended in driver.appended:
        state = apply(state, appended.event, appended.digest)
        if type(appended.event).__name__ == upto:
            break
    return state


def test_a_graded_episode_with_huge_lists_of_evidence_stays_in_its_budget() -> None:
    line = "x" * 100_000
    signals = tuple(f"signal {i}: {line}" for i in range(1_000))
    driver = _graded(
        _reward(Verdict.TAMPERED, -1.0, tamper_signals=signals, tampered_paths=("tests/\udcff.py",) * 500)
    )
    out = driver.effects[-1]
    assert isinstance(out.trajectory, TrajectoryCompleted) and out.trajectory.reward == -1.0
    (graded,) = (e for e in out.events if isinstance(e.event, RewardAssigned))
    assert len(graded.data) <= TAIL_MAX
    assert isinstance(graded.event, RewardAssigned)
    assert len(graded.event.tamper_signals) == LINES_MAX and graded.event.tamper_signals[0].startswith(
        "signal 0"
    )
    assert "more (see the report)" in graded.event.tamper_signals[-1]
    assert CODEC.decode_as(graded.data, RewardAssigned) == graded.event
