"""Process grades beside the episode: which workspaces the owner asks to have graded, that the episode
never waits for them, and the process reward a learner makes of the answers."""

from __future__ import annotations

import dataclasses

import pytest

from schemas.actions import RunCommand, Submit
from schemas.common import Verdict
from schemas.progress import StepGraded, process_rewards
from schemas.requests import PolicyRequest, SandboxRequest, VerifyRequest
from streams.owner import OwnerState, on_action, on_executed, on_start
from streams.step_grading import OFF, StepGrading
from tests.unit.streams.world import EPISODE, T0, TASK, Workers, owner_origin, start_command


@pytest.mark.parametrize(
    ("text", "expected"),
    [("off", OFF), ("every", StepGrading("every")), ("every:3", StepGrading("every", 3)),
     ("changed", StepGrading("changed"))],
)  # fmt: skip
def test_modes_parse_and_print_back(text: str, expected: StepGrading) -> None:
    assert StepGrading.parse(text) == expected and str(expected) == text


@pytest.mark.parametrize("bad", ["", "all", "every:0", "every:-1", "every:x", "changed:2", "off:1"])
def test_a_bad_mode_names_what_is_accepted(bad: str) -> None:
    with pytest.raises(ValueError, match="every:K"):
        StepGrading.parse(bad)


def test_which_workspaces_each_mode_wants() -> None:
    assert not any(OFF.wants(n, True) for n in range(4))
    every2 = StepGrading("every", 2)
    assert [every2.wants(n, False) for n in range(5)] == [True, False, True, False, True]
    changed = StepGrading("changed")
    assert (changed.wants(0, False), changed.wants(3, False), changed.wants(3, True)) == (True, False, True)


def _play(grading: StepGrading, commands: list[tuple[str, bool]]) -> list[VerifyRequest]:
    """An episode running `commands` (each with whether it changes the workspace) then submitting; every
    progress request the owner sent, in order. Checks nothing else changes with grading on."""
    workers, origin, now = Workers(), owner_origin(), T0
    state = OwnerState.new(EPISODE)
    out = on_start(state, start_command(), TASK, origin=origin, now_us=now, grading=grading)
    progress = list(out.progress)
    snapshot = TASK.initial_snapshot_id
    for index, (command, changes) in enumerate(commands):
        policy = out.requests[0]
        assert isinstance(policy, PolicyRequest)  # the next step is asked for at once, grading or not
        out = on_action(out.state, workers.act(policy, RunCommand(command)), origin=origin, now_us=now + 10)
        sandbox = out.requests[0]
        assert isinstance(sandbox, SandboxRequest)
        executed = workers.execute(sandbox)
        if changes:
            snapshot = f"snap-after-{index}"
        executed = dataclasses.replace(
            executed, meta=dataclasses.replace(executed.meta, snapshot_id=snapshot)
        )
        out = on_executed(out.state, executed, origin=origin, now_us=now + 20, grading=grading)
        assert out.rejected is None and out.state.outstanding is not None
        progress += out.progress
    policy = out.requests[0]
    assert isinstance(policy, PolicyRequest)
    out = on_action(out.state, workers.act(policy, Submit("done")), origin=origin, now_us=now + 30)
    assert isinstance(out.requests[0], VerifyRequest) and out.progress == ()  # the final grade as before
    return progress


def test_every_mode_grades_the_untouched_workspace_and_after_each_step_without_waiting() -> None:
    progress = _play(StepGrading("every"), [("edit a", True), ("ls", False), ("edit b", True)])
    assert [(r.meta.step, r.meta.snapshot_id) for r in progress] == [
        (0, TASK.initial_snapshot_id), (1, "snap-after-0"), (2, "snap-after-0"), (3, "snap-after-2"),
    ]  # fmt: skip
    first = progress[0]
    assert (first.image, first.timeout_s, first.step_budget) == (TASK.image, TASK.timeout_s, 4)
    assert [r.steps_used for r in progress] == [0, 1, 2, 3]


def test_changed_mode_skips_a_step_that_left_the_workspace_as_it_was() -> None:
    progress = _play(StepGrading("changed"), [("edit a", True), ("ls", False), ("edit b", True)])
    assert [r.meta.step for r in progress] == [0, 1, 3]


def test_off_sends_none_and_the_episode_is_the_same_record_for_record() -> None:
    assert _play(OFF, [("edit a", True), ("ls", False)]) == []


def _graded(executed: int, passed: int, total: int = 4, verdict: Verdict = Verdict.PARTIAL) -> StepGraded:
    meta = dataclasses.replace(
        Workers().verifier.reply_meta(_play(StepGrading("every"), [])[0].meta), step=executed
    )
    return StepGraded(meta, verdict, passed, total)


def test_a_process_reward_is_a_steps_change_in_pass_rate() -> None:
    grades = [_graded(0, 1), _graded(1, 1), _graded(2, 3), _graded(3, 2), _graded(2, 0)]  # a duplicate last
    assert process_rewards(3, grades) == [0.0, 0.5, -0.25]
    # A step without a usable grade gets none, and the next is measured from the last rate known.
    gaps = [_graded(0, 1), _graded(1, 0, verdict=Verdict.ERROR), _graded(2, 3)]
    assert process_rewards(3, gaps) == [None, 0.5, None]
    # Without the untouched workspace's grade nothing before the first known rate can be measured.
    assert process_rewards(2, [_graded(1, 2), _graded(2, 4)]) == [None, 0.5]
    assert sum(r for r in process_rewards(3, grades) if r is not None) == pytest.approx(2 / 4 - 1 / 4)
